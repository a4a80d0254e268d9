/* railab data plane: PFC (802.1Qbb) ingress accounting of the lossless priority.
 *
 * The switch counts, per ingress port, the bytes of lossless-priority frames that wait in
 * its egress queues (struct pfc_port's ring). Those frames are never tail-dropped by the
 * egress queue; a frame that would take its ingress port beyond XOFF + headroom is dropped
 * (the pause was too late). The agent reads the rings, sends the PFC frames (XOFF above
 * XOFF bytes, XON below XON bytes) out of the ingress port, and the neighbour holds
 * that priority. Received PFC frames are recorded per port and priority (pause_until);
 * while an egress port is paused its lossless frames wait in the port's qdisc (the agent
 * holds that class) and stay in their ingress accounts as PFC_HELD entries, so the
 * pause spreads upstream hop by hop. Retiring entries needs other ports' pause state:
 * a map lookup, so it lives in switch.c (rl_pfc_retire).
 */
#ifndef RAILAB_PFC_H
#define RAILAB_PFC_H

#include "railab_structs.h"

/* Hold the queued frame in its ingress port's account until t_dep (a time, or PFC_HELD |
 * egress slot). A full ring merges the frame into the newest entry (its bytes stay
 * counted, leaving with the later frame). */
static __always_inline void pfc_hold(struct pfc_port *pp, __u64 t_dep, __u32 len)
{
    __u32 h = pp->head;

    if (h - pp->tail >= PFC_RING) {
        __u32 last = (h - 1) & (PFC_RING - 1);

        pp->len[last] += len;
        if (t_dep > pp->t_dep[last])
            pp->t_dep[last] = t_dep;
    } else {
        pp->t_dep[h & (PFC_RING - 1)] = t_dep;
        pp->len[h & (PFC_RING - 1)] = len;
        pp->head = h + 1;
    }
    pp->bytes += len;
    if (pp->bytes > pp->peak)
        pp->peak = pp->bytes;
}

/* A PFC frame (opcode 0x0101) received on a port: count it and record, per enabled
 * priority, until when the neighbour asked this port to hold it. Returns 0 if it was one. */
static __always_inline int pfc_receive(struct pfc_port *pp, void *data, void *data_end, __u64 now)
{
    __u8 *p = (__u8 *)data + 14;
    __u16 vector, q;
    int i;

    if ((void *)(p + 20) > data_end || p[0] != 0x01 || p[1] != 0x01)
        return -1;
    vector = ((__u16)p[2] << 8) | p[3];
    pp->pause_rx++;
#pragma unroll
    for (i = 0; i < 8; i++) {
        if (vector & (1 << i)) {
            q = ((__u16)p[4 + 2 * i] << 8) | p[5 + 2 * i];
            pp->pause_until[i] = now + (__u64)q * pp->ns_per_quantum;
        }
    }
    return 0;
}

#endif /* RAILAB_PFC_H */
