/* Selective repeat at the responder (nic_cfg.flags NIC_F_SELECTIVE), as
 * dataplane.traffic.transport.QpResponder with selective repeat: packets past the
 * expected PSN are kept (their bits in the receive window are the reorder buffer), the
 * expected PSN then moves over every kept packet, ACKs are cumulative, and a hole that
 * has been open nak_delay gets a NAK with its own PSN, again every 4 nak_delay + 1 while
 * it stays open. An XDP program answers one frame with one frame, so a packet carries at
 * most one NAK (the oldest hole due); QpResponder may send several at once.
 *
 * Called with the QP's spin lock held: no helper calls. The window is NIC_SEEN_BITS
 * behind the highest PSN; the requester's window must stay below it. */
#ifndef RAILAB_NIC_SELECTIVE_H
#define RAILAB_NIC_SELECTIVE_H

#include "nic.h"
#include "stats.h"

/* Index of the highest set bit of x (x != 0), without branches: each branch would double
 * the paths the verifier walks. */
static __always_inline __u32 nic_fls64(__u64 x)
{
    __u64 t, s, e;

    t = x >> 32; s = ((t | -t) >> 63) << 5; x >>= s; e = s;
    t = x >> 16; s = ((t | -t) >> 63) << 4; x >>= s; e |= s;
    t = x >> 8;  s = ((t | -t) >> 63) << 3; x >>= s; e |= s;
    t = x >> 4;  s = ((t | -t) >> 63) << 2; x >>= s; e |= s;
    t = x >> 2;  s = ((t | -t) >> 63) << 1; x >>= s; e |= s;
    t = x >> 1;  s = (t | -t) >> 63;                 e |= s;
    return e;
}

/* Bits 0..top of the window (bit i: PSN highest - i) that did not arrive, as (lo, hi). */
static __always_inline void nic_window_gaps(const struct nic_qp *q, __u32 top, __u64 *lo, __u64 *hi)
{
    *lo = ~q->seen_lo & (top >= 63 ? ~0ULL : (2ULL << top) - 1);
    *hi = top < 64 ? 0 : ~q->seen_hi & (top >= 127 ? ~0ULL : (2ULL << (top - 64)) - 1);
}

/* The window index of the oldest gap (the largest set bit of hi:lo), -1 when none. */
static __always_inline __s32 nic_oldest_gap(__u64 lo, __u64 hi)
{
    if (hi)
        return 64 + nic_fls64(hi);
    if (lo)
        return nic_fls64(lo);
    return -1;
}

/* Move the expected PSN over every packet that has arrived; returns how many. */
static __always_inline __u32 nic_sr_advance(struct nic_qp *q)
{
    __s32 back = nic_psn_diff(q->highest, q->epsn);
    __u32 old = q->epsn, j;
    __u64 lo, hi;

    if (back < 0 || back >= NIC_SEEN_BITS)
        return 0;
    nic_window_gaps(q, back, &lo, &hi);
    j = nic_oldest_gap(lo, hi);   /* -1: everything up to the highest arrived */
    q->epsn = (q->highest - j) & PSN_MASK;
    return (q->epsn - old) & PSN_MASK;
}

/* The highest PSN moved from prev_high: the PSNs it skipped are new holes, seen now. */
static __always_inline void nic_sr_new_holes(struct nic_qp *q, __u32 prev_high, __u64 now)
{
    __s32 step = nic_psn_diff(q->highest, prev_high);
    __u32 slot;
    int i;

    for (i = 1; i < NIC_SEEN_BITS; i++) {
        if (i >= step)
            break;
        slot = prev_high + i;
        /* opaque: else clang stores two neighbouring slots at one offset, which can
         * pass the array's end, and the verifier refuses it */
        asm volatile("" : "+r"(slot));
        slot &= NIC_SEEN_BITS - 1;
        q->hole_ns[slot] = now;
        q->naked_ns[slot] = 0;
    }
}

/* The hole due a NAK, if any: 1 and its PSN in *psn (marked NAKed now), else 0.
 * Holes open in PSN order, so the oldest hole not NAKed yet is the only one that can be
 * due a first NAK; nak_cursor walks over the holes NAKed so far and wraps to the oldest
 * one for the repeats. No loop: one candidate per packet. */
static __always_inline int nic_sr_nak_due(struct nic_qp *q, __u64 now, __u64 delay, __u32 *psn)
{
    __s32 back = nic_psn_diff(q->highest, q->epsn);
    __s32 from = nic_psn_diff(q->highest, q->nak_cursor);
    __u64 lo, hi, naked;
    __u32 j, h, slot;

    if (back <= 0 || back >= NIC_SEEN_BITS)
        return 0;
    if (from < 0 || from > back)
        from = back;
    nic_window_gaps(q, from, &lo, &hi);
    if (!(lo | hi))
        nic_window_gaps(q, back, &lo, &hi);
    j = nic_oldest_gap(lo, hi);
    if ((__s32)j < 0)
        return 0;
    h = (q->highest - j) & PSN_MASK;
    slot = h & (NIC_SEEN_BITS - 1);
    naked = q->naked_ns[slot];
    if (naked ? (__s64)(now - naked) < (__s64)(4 * delay + 1)
              : (__s64)(now - q->hole_ns[slot]) < (__s64)delay)
        return 0;
    q->naked_ns[slot] = now;
    q->nak_cursor = (h + 1) & PSN_MASK;
    *psn = h;
    return 1;
}

#endif
