/* Per-QP receive accounting, the definitions of dataplane.traffic.receiver.FlowStats
 * with fixed-size state: called with the QP's spin lock held, so no helper calls here.
 *
 *  - position: PSNs compared as signed 24-bit differences (wrap-around);
 *  - a PSN above the highest one seen makes the PSNs in between holes;
 *  - a PSN that fills a hole is out of order; its reorder distance = highest - PSN;
 *  - a PSN seen before is a duplicate: counted there only.
 * Holes are remembered in a 128-bit window behind the highest PSN; a PSN older than
 * that is `late` (hole or duplicate, unknown) and otherwise ignored. */
#ifndef RAILAB_NIC_STATS_H
#define RAILAB_NIC_STATS_H

#include "nic.h"
#include "roce.h"

static __always_inline __s32 nic_psn_diff(__u32 a, __u32 b)
{
    return ((__s32)((a - b) << 8)) >> 8;
}

/* Log-linear slot of a nanosecond value: v < 4 -> v; else 4 * floor(log2 v) + the two
 * bits after the leading one (steps of 19 % or less), up to 2^32 ns in slot 127.
 * Branch-free log2: (X - v) >> 63 is 1 exactly when v > X (v < 2^62), and the verifier
 * walks one path instead of one per branch combination. */
static __always_inline __u32 nic_log_slot(__u64 v)
{
    __u64 x, e, s;

    v &= (1ULL << 62) - 1;
    x = v;
    s = ((0xFFFFFFFFULL - x) >> 63) << 5; x >>= s; e = s;
    s = ((0xFFFFULL - x) >> 63) << 4;     x >>= s; e |= s;
    s = ((0xFFULL - x) >> 63) << 3;       x >>= s; e |= s;
    s = ((0xFULL - x) >> 63) << 2;        x >>= s; e |= s;
    s = ((0x3ULL - x) >> 63) << 1;        x >>= s; e |= s;
    s = (0x1ULL - x) >> 63;               e |= s;
    if (v < 4)
        return v;
    if (e > 31)
        return NIC_LOG_SLOTS - 1;
    return ((e << 2) | ((v >> (e - 2)) & 3)) & (NIC_LOG_SLOTS - 1);
}

/* Book one PSN in the window. Returns 1 for a packet seen for the first time. */
static __always_inline int nic_book_psn(struct nic_qp *q, __u32 psn)
{
    __s32 d = nic_psn_diff(psn, q->highest);
    __u32 back, slot;
    __u64 bit;

    if (d > 0) {
        q->holes += d - 1;
        if (d >= 128) {
            q->seen_hi = 0;
            q->seen_lo = 0;
        } else if (d >= 64) {
            q->seen_hi = q->seen_lo << (d - 64);
            q->seen_lo = 0;
        } else {
            q->seen_hi = (q->seen_hi << d) | (q->seen_lo >> (64 - d));
            q->seen_lo <<= d;
        }
        q->seen_lo |= 1;
        q->highest = psn;
        return 1;
    }
    back = -d;
    if (back >= NIC_SEEN_BITS) {
        q->late++;
        return 0;
    }
    if (back < 64) {
        bit = 1ULL << back;
        if (q->seen_lo & bit) {
            q->duplicates++;
            return 0;
        }
        q->seen_lo |= bit;
    } else {
        bit = 1ULL << (back - 64);
        if (q->seen_hi & bit) {
            q->duplicates++;
            return 0;
        }
        q->seen_hi |= bit;
    }
    q->out_of_order++;
    slot = back < NIC_REORDER_SLOTS ? back : NIC_REORDER_SLOTS - 1;
    q->reorder_hist[slot & (NIC_REORDER_SLOTS - 1)]++;
    return 1;
}

/* A distinct packet of message msg_id arrived: 1 when it was the message's last
 * missing one. Messages of a QP are counted in NIC_MSG_SLOTS slots by msg_id, so
 * up to that many may be in flight at once (reordered across message boundaries). */
static __always_inline int nic_book_msg(struct nic_qp *q, __u32 msg_id, __u32 msg_pkts)
{
    struct nic_msg_slot *s = &q->msg_slots[msg_id & (NIC_MSG_SLOTS - 1)];

    if (s->msg_id != msg_id) {
        s->msg_id = msg_id;
        s->got = 0;
    }
    s->got++;
    if (s->got < msg_pkts)
        return 0;
    s->got = 0;
    s->msg_id = ~msg_id;        /* a late duplicate of a done message starts no new one */
    return 1;
}

#endif
