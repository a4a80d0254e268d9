/* Per-QP receive accounting, the definitions of dataplane.traffic.receiver.FlowStats
 * with fixed-size state: called with the QP's spin lock held, so no helper calls here.
 *
 *  - position: PSNs compared as signed 24-bit differences (wrap-around);
 *  - a PSN above the highest one seen makes the PSNs in between holes;
 *  - a PSN that fills a hole is out of order; its reorder distance = highest - PSN;
 *  - a PSN seen before is a duplicate: counted there only.
 * Holes are remembered in a 128-bit window behind the highest PSN; a PSN older than
 * that is `late` (hole or duplicate, unknown) and otherwise ignored.
 *
 * Loss windows (dataplane.traffic.rxstats.loss_timing from the same packets): the send
 * stamp of each delivered position is kept while it is in the window. When the window
 * moves up, its oldest positions leave it in order: a hole that leaves is lost for good
 * (a late packet no longer fills it) and lengthens the current run; a delivered position
 * that leaves closes the run before it as a window [stamp before, its stamp, run]. What
 * is still in the window at the end is finished by Python (dataplane.nic.report). */
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

/* An empty asm that the compiler cannot see through: keeps a 0/1 mask arithmetic (BPF
 * has no conditional move, so a select the compiler rebuilt would be a branch again) */
#define nic_opaque(v) asm volatile("" : "+r"(v))

/* 1 when v != 0 (v < 2^63), and a < b (both < 2^63): branch-free */
#define nic_nz(v) ((0 - (__u64)(v)) >> 63)
#define nic_lt(a, b) (((__u64)(a) - (__u64)(b)) >> 63)

/* The highest PSN moves up by d > 0: the window's oldest min(d, 128) positions leave it,
 * oldest first (bit 127 of seen_hi:seen_lo), then the d - 128 positions skipped past it,
 * all lost. A hole that leaves lengthens the lost run; a delivered position that leaves
 * closes the run before it (a window [stamp before, its stamp, run], or AT_START when no
 * stamp came before) and becomes the stamp before the next one. Positions before position
 * 0 (the window starts full) have no stamp (0): they close nothing.
 *
 * One iteration per position that leaves: one per packet in order. The body is
 * branch-free (0/1 masks; a window that does not close is written to the scratch slot),
 * so the verifier walks each iteration once. */
static __always_inline void nic_loss_slide(struct nic_qp *q, __u32 d)
{
    struct nic_loss *l = &q->loss;
    struct nic_loss_window *w;
    __u64 hi = q->seen_hi, lo = q->seen_lo;
    __u64 t0 = l->t0, run = l->run, windows = l->windows, flags = l->flags;
    __u64 b, m, ts, close, rec, has_t0, idx;
    __u32 slot = q->highest + 1;       /* the oldest position's PSN (% 128: its stamp) */
    __u32 left = d, i;

    for (i = 0; i < NIC_SEEN_BITS; i++) {
        if (!left)
            break;
        left--;
        nic_opaque(left);               /* no trip count computed ahead (one more path) */
        b = hi >> 63;                   /* 1: delivered */
        nic_opaque(b);
        m = 0 - b;
        ts = l->stamp[slot & (NIC_SEEN_BITS - 1)] & m;
        has_t0 = nic_nz(t0);
        close = b & nic_nz(run);
        rec = close & has_t0;
        flags |= (close & (has_t0 ^ 1)) * NIC_LOSS_AT_START;
        flags |= (rec & (nic_lt(t0, ts) ^ 1)) * NIC_LOSS_FLAT;
        flags |= (nic_nz(ts) & has_t0 & nic_lt(ts, t0)) * NIC_LOSS_BACKWARDS;
        /* the window's slot: min(windows, NIC_LOSS_LAST); nothing closing: the scratch */
        idx = nic_lt(windows, NIC_LOSS_LAST);
        nic_opaque(idx);
        idx = NIC_LOSS_LAST ^ ((windows ^ NIC_LOSS_LAST) & (0 - idx));
        m = 0 - rec;
        nic_opaque(m);
        idx = NIC_LOSS_SCRATCH ^ ((idx ^ NIC_LOSS_SCRATCH) & m);
        w = &l->win[idx & (NIC_LOSS_SLOTS - 1)];
        w->t0 = t0;
        w->t1 = ts;
        w->lost = run;
        windows += rec;
        run = (run + 1) & (b - 1);      /* delivered: 0 */
        m = 0 - nic_nz(ts);
        nic_opaque(m);
        t0 ^= (t0 ^ ts) & m;
        hi = (hi << 1) | (lo >> 63);
        lo <<= 1;
        slot++;
    }
    if (d > NIC_SEEN_BITS)
        run += d - NIC_SEEN_BITS;
    l->t0 = t0;
    l->run = run;
    l->windows = windows;
    l->flags = flags;
}

static __always_inline void nic_loss_stamp(struct nic_qp *q, __u32 psn, __u64 ts)
{
    q->loss.stamp[psn & (NIC_SEEN_BITS - 1)] = ts;
    if (!ts)
        q->loss.flags |= NIC_LOSS_NO_STAMP;
}

/* Book one PSN (send stamp ts) in the window. Returns 1 for a packet seen for the
 * first time. */
static __always_inline int nic_book_psn(struct nic_qp *q, __u32 psn, __u64 ts)
{
    __s32 d = nic_psn_diff(psn, q->highest);
    __u32 back, slot;
    __u64 bit;

    if (d > 0) {
        nic_loss_slide(q, d);
        nic_loss_stamp(q, psn, ts);
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
    nic_loss_stamp(q, psn, ts);
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
