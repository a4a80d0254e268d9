/* railab data plane: RED-style ECN marking of the emulated egress queue, as DCQCN expects.
 *
 * No mark at or below Kmin (port_queue.ecn_ns), a probability rising linearly from 0 at
 * Kmin to Pmax (port_queue.ecn_pmax, ECN_P_ONE = 1) at Kmax (port_queue.ecn_max_ns), and
 * every frame above Kmax. Kmax <= Kmin (an older config, or one threshold) is the step
 * at Kmin. Thresholds are backlogs as drain time (ns) at the port's speed, like buf_ns.
 */
#ifndef RAILAB_ECN_H
#define RAILAB_ECN_H

#include "railab_structs.h"

/* 1 if a frame that finds `backlog` ns queued ahead of it gets CE. The random draw is
 * taken only on the ramp between Kmin and Kmax. */
static __always_inline int ecn_mark(const struct port_queue *q, __u64 backlog)
{
    __u64 kmin = q->ecn_ns, kmax = q->ecn_max_ns, span, x, p;

    if (backlog <= kmin)
        return 0;
    if (kmax <= kmin || backlog > kmax)
        return 1;
    /* p = Pmax (backlog - kmin) / (kmax - kmin), in ECN_P_ONE units (Pmax <= 2^16). A
     * ramp of 2^47 ns or more (a 256 MiB buffer at 2 kb/s is 2^50) is coarsened first so
     * the product stays within 64 bits. */
    span = kmax - kmin;
    x = backlog - kmin;
    if (span >= (1ULL << 47)) {
        span >>= 17;
        x >>= 17;
    }
    if (!span)
        return 1;
    p = (__u64)q->ecn_pmax * x / span;
    return (bpf_get_prandom_u32() & (ECN_P_ONE - 1)) < p;
}

#endif /* RAILAB_ECN_H */
