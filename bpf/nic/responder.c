/* railab emulated RoCE NIC, receive side: the XDP program of a host's NIC port.
 *
 * For every railab RoCEv2 data frame (UDP 4791, BTH [+ RETH] + railab header) it books
 * the frame to its QP, keyed by (our address, BTH destination QP):
 *   - receive accounting (stats.h): packets, bytes, holes, out of order and reorder
 *     distance, duplicates, CE marks, one-way latency from the railab send stamp
 *     (CLOCK_MONOTONIC, as bpf_ktime_get_ns) and message completions;
 *   - in RESPOND mode a go-back-N responder, as dataplane.traffic.transport.QpResponder:
 *     the expected PSN advances only on the expected packet; an ACK (PSN = last in-order
 *     packet, MSN = messages delivered in order) answers an ack-request, every
 *     ack_every in-order packets and the first in-order packet ack_delay after the last
 *     ACK; a duplicate is re-ACKed (else a requester that lost our ACK resends forever);
 *     the first packet past the expected PSN gets one NAK (PSN sequence error, PSN = the
 *     expected one) and no other until the hole is filled; a CE-marked packet gets a CNP,
 *     at most one per QP per cnp_interval.
 * The answer is the frame itself, rewritten and trimmed, sent back with XDP_TX: one frame
 * out per frame in. When a CNP is due together with an ACK or NAK, the ACK/NAK goes with
 * BECN set (IBA annex A10 lets an ACK carry it) and the CNP waits for the next CE mark.
 * ACKs, NAKs and CNPs for our own requester QPs are booked in nic_reqs, PFC frames from a
 * known switch port in nic_pauses (both read by the send engine) and dropped.
 * Everything else (other traffic, feedback for QPs not ours, data frames not
 * answered) goes on with XDP_PASS, so the Python hosts keep working beside it.
 *
 * bcc rewrites map accesses in this file only: every map lookup lives here. */
#include <uapi/linux/bpf.h>
#include <linux/in.h>

#include "nic.h"
#include "roce.h"
#include "icrc.h"
#include "stats.h"
#include "selective.h"

BPF_ARRAY(nic_cfg, struct nic_cfg, 1);
BPF_ARRAY(nic_crc, struct nic_crc_table, 1);
BPF_PERCPU_ARRAY(nic_counters, __u64, NIC_C_MAX);
BPF_HASH(nic_qps, struct nic_qp_key, struct nic_qp, NIC_MAX_QPS);
BPF_PERCPU_ARRAY(nic_rx_bins, __u64, NIC_RX_BINS);
BPF_RINGBUF_OUTPUT(nic_events, NIC_EVENT_PAGES);
/* a zero QP to insert from: struct nic_qp is far larger than the 512-byte stack, and a
 * map value whose BTF holds a bpf_spin_lock may not be a helper's value argument */
struct nic_qp_blank {
    __u8 b[sizeof(struct nic_qp)];
};
BPF_ARRAY(nic_qp_zero, struct nic_qp_blank, 1);
/* the requester side (nic.h): our QPs' slots, and what came back for them */
BPF_HASH(nic_req_slots, struct nic_qp_key, __u32, NIC_MAX_REQS);
BPF_F_TABLE("array", __u32, struct nic_req, nic_reqs, NIC_MAX_REQS, BPF_F_MMAPABLE);
/* PFC from the switch ports we know (nic.h): their MACs' slots, and the pauses */
BPF_HASH(nic_pause_ports, __u64, __u32, NIC_MAX_PAUSES);
BPF_F_TABLE("array", __u32, struct nic_pause, nic_pauses, NIC_MAX_PAUSES, BPF_F_MMAPABLE);

#define NIC_SEND_NONE 0
#define NIC_SEND_ACK  1
#define NIC_SEND_NAK  2
#define NIC_SEND_CNP  3

static __always_inline void nic_count(__u32 idx)
{
    __u64 *c = nic_counters.lookup(&idx);

    if (c)
        *c += 1;
}

/* Delivered frame bytes by arrival time, all QPs together (the run's timeline) */
static __always_inline void nic_book_bin(const struct nic_cfg *cfg, __u64 now, __u32 len)
{
    __u64 *b;
    __u32 idx;

    if (!cfg->bin_origin_ns || !cfg->bin_ns)
        return;
    if (now < cfg->bin_origin_ns || (now - cfg->bin_origin_ns) / cfg->bin_ns >= NIC_RX_BINS) {
        nic_count(NIC_C_BIN_OUT);
        return;
    }
    idx = (now - cfg->bin_origin_ns) / cfg->bin_ns;
    b = nic_rx_bins.lookup(&idx);
    if (b)
        *b += len;
}

/* An ACK, NAK or CNP for one of our requesters, booked for the send engine, which reads
 * nic_reqs. Returns 0 when the QP is not one of ours. */
static __always_inline int nic_book_feedback(const struct nic_fb *fb)
{
    struct nic_qp_key key = {.daddr = fb->daddr, .dqpn = fb->dqpn};
    struct nic_req *r;
    __u32 *slot, n;

    slot = nic_req_slots.lookup(&key);
    if (!slot)
        return 0;
    r = nic_reqs.lookup(slot);
    if (!r)
        return 0;
    if (fb->opcode == OP_CNP) {
        __sync_fetch_and_add(&r->cnps, 1);
        return 1;
    }
    if ((fb->syndrome >> 5) == 3) {
        /* NAK (syndrome 011x xxxx): its PSN first, then the count the engine watches */
        n = (__u32)r->naks;
        r->nak_psn[n & (NIC_NAK_RING - 1)] = fb->psn;
        __sync_fetch_and_add(&r->naks, 1);
        return 1;
    }
    if ((fb->syndrome >> 5) != 0)
        return 1;               /* RNR NAK or reserved: railab's responders send neither */
    if (!(r->flags & NIC_REQ_ACKED) || nic_psn_diff(fb->psn, r->ack_psn) > 0) {
        r->ack_psn = fb->psn;
        r->flags |= NIC_REQ_ACKED;
    }
    if (fb->becn)
        __sync_fetch_and_add(&r->becns, 1);
    __sync_fetch_and_add(&r->acks, 1);
    return 1;
}

/* A PFC frame from a switch port in nic_pause_ports, applied to its nic_pauses slot as
 * PauseState.apply does (the watchdog is the engine's). Returns -1 for no PFC frame, 0 for
 * one from an unknown MAC, 1 when booked. */
static __always_inline int nic_book_pause(void *data, void *data_end)
{
    struct nic_pfc_frame *f = data;
    struct nic_pause *p;
    __u64 mac = 0, now, until, opened, q;
    __u32 *slot, vector;
    int was;

    if ((void *)(f + 1) > data_end || f->eth.h_proto != nic_htons(ETH_P_MAC_CONTROL) ||
        f->opcode != nic_htons(PFC_OPCODE))
        return -1;
    __builtin_memcpy(&mac, f->eth.h_source, ETH_ALEN);
    slot = nic_pause_ports.lookup(&mac);
    if (!slot)
        return 0;
    p = nic_pauses.lookup(slot);
    if (!p)
        return 0;
    now = bpf_ktime_get_ns();
    vector = nic_ntohs(f->vector);
    p->frames++;
#pragma unroll
    for (int i = 0; i < NIC_PRIOS; i++) {
        if (!(vector & (1u << i)))
            continue;
        q = nic_ntohs(f->time[i]);
        until = p->until_ns[i];
        opened = p->opened_ns[i];
        was = until > now;
        if (opened && (!was || !q)) {
            /* an expired pause lasted until its time ran out; an XON ends one in force now */
            p->paused_ns[i] += (was ? now : until) - opened;
            p->opened_ns[i] = 0;
        }
        if (!q) {
            p->xon += was;
            p->until_ns[i] = now;
            continue;
        }
        if (!was)
            p->opened_ns[i] = now;      /* before until_ns: the engine reads until_ns first */
        p->until_ns[i] = now + q * p->quantum_ps / 1000;   /* a refresh restarts the time */
    }
    return 1;
}

static __always_inline int nic_pass(void)
{
    nic_count(NIC_C_PASS);
    return XDP_PASS;
}

static __always_inline void nic_swap_macs(struct ethhdr *eth)
{
    __u8 mac[ETH_ALEN];

    __builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
    __builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
    __builtin_memcpy(eth->h_source, mac, ETH_ALEN);
}

/* Cut the received frame down to an answer of `size` bytes, its MACs turned around: the
 * answer's start, or NULL with *err 1 when the frame could not be trimmed (it is as it
 * came) or -1 when it is too short after trimming. */
static __always_inline void *nic_reshape(struct xdp_md *ctx, const struct nic_rx *rx, __u32 size,
                                         int *err)
{
    void *data;

    if (bpf_xdp_adjust_tail(ctx, (int)size - (int)rx->frame_len)) {
        *err = 1;
        return NULL;
    }
    data = (void *)(long)ctx->data;
    if (data + size > (void *)(long)ctx->data_end) {
        *err = -1;
        return NULL;
    }
    nic_swap_macs(data);
    return data;
}

/* The headers are written into the frame and the ICRC read back from it: a stack copy
 * of the 40-byte header per answer kind would not fit beside the rest in 512 bytes.
 * Returns 0, else nic_reshape's error. */
static __always_inline int nic_send_ack(struct xdp_md *ctx, const struct nic_crc_table *t,
                                        const struct nic_cfg *cfg, const struct nic_rx *rx,
                                        __u8 syndrome, __u32 psn, __u32 msn, __u8 becn)
{
    struct nic_ack_frame *f;
    __u32 crc;
    int err = 0;

    f = nic_reshape(ctx, rx, sizeof(*f), &err);
    if (!f)
        return err;
    nic_fill_l4(&f->l4, rx, cfg->ack_dscp, cfg->reply_sport,
                sizeof(*f) - sizeof(f->eth) - sizeof(struct iphdr),
                OP_ACK, BTH_F_MIGREQ, becn ? BTH_BECN : 0, psn);
    f->aeth = nic_htonl(((__u32)syndrome << 24) | (msn & PSN_MASK));
    crc = nic_icrc_head(t, &f->l4);
    crc = nic_crc_bytes(t, crc, (const __u8 *)&f->aeth, sizeof(f->aeth));
    nic_put_icrc(f->icrc, crc);
    return 0;
}

static __always_inline int nic_send_cnp(struct xdp_md *ctx, const struct nic_crc_table *t,
                                        const struct nic_cfg *cfg, const struct nic_rx *rx)
{
    struct nic_cnp_frame *f;
    __u32 crc;
    int err = 0;

    f = nic_reshape(ctx, rx, sizeof(*f), &err);
    if (!f)
        return err;
    /* as roce.build_cnp: no MigReq, BECN, PSN 0 */
    nic_fill_l4(&f->l4, rx, cfg->cnp_dscp, cfg->reply_sport,
                sizeof(*f) - sizeof(f->eth) - sizeof(struct iphdr), OP_CNP, 0, BTH_BECN, 0);
    __builtin_memset(f->pad, 0, sizeof(f->pad));
    crc = nic_icrc_head(t, &f->l4);
    crc = nic_crc_bytes(t, crc, f->pad, sizeof(f->pad));
    nic_put_icrc(f->icrc, crc);
    return 0;
}

int xdp_nic_responder(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    struct nic_rx rx = {};
    struct nic_qp_key key = {};
    struct nic_qp *q;
    struct nic_cfg *cfg;
    struct nic_crc_table *t;
    __u32 zero = 0, lat_slot, msg_slot, send = NIC_SEND_NONE, resp_psn = 0, resp_msn = 0;
    __u64 now, lat, msg_ns;
    __s32 d;
    int why, respond, open_loop, selective, go_back_n, unique, book_msg, msg_done = 0, becn = 0,
        cnp_due, owed, r;
    __u32 prev_high, nak_psn = 0;
    struct nic_msg_event *ev;

    cfg = nic_cfg.lookup(&zero);
    if (!cfg || cfg->mode == NIC_MODE_OFF)
        return XDP_PASS;
    nic_count(NIC_C_RX);
    why = nic_parse(data, data_end, &rx);
    if (why == NIC_C_NOT_DATA) {
        struct nic_fb fb = {};

        if (nic_parse_feedback(data, data_end, &fb)) {
            if (nic_book_feedback(&fb)) {
                nic_count(NIC_C_FEEDBACK);
                nic_count(NIC_C_DROP);
                return XDP_DROP;
            }
            nic_count(NIC_C_FB_UNKNOWN);
        }
    }
    if (why == NIC_C_NOT_ROCE) {
        r = nic_book_pause(data, data_end);
        if (r > 0) {
            nic_count(NIC_C_PAUSE);
            nic_count(NIC_C_DROP);
            return XDP_DROP;
        }
        if (r == 0)
            nic_count(NIC_C_PAUSE_UNKNOWN);   /* a Python PauseListener may read it */
    }
    if (why) {
        nic_count(why);
        return nic_pass();
    }
    if (rx.ts_ns && rx.ts_ns < cfg->not_before_ns) {
        /* an earlier run's frame (nic.h, not_before_ns) */
        nic_count(NIC_C_STALE);
        if (cfg->flags & NIC_F_CONSUME) {
            nic_count(NIC_C_DROP);
            return XDP_DROP;
        }
        return nic_pass();
    }
    respond = cfg->mode == NIC_MODE_RESPOND;
    open_loop = cfg->flags & NIC_F_OPEN_LOOP;
    selective = !open_loop && (cfg->flags & NIC_F_SELECTIVE);
    t = nic_crc.lookup(&zero);
    if (respond && (!t || t->t[1] == 0)) {
        /* no table, no ICRC: book the frame, answer nothing */
        nic_count(NIC_C_NO_TABLE);
        respond = 0;
    }

    key.daddr = rx.daddr;
    key.dqpn = rx.dqpn;
    q = nic_qps.lookup(&key);
    if (!q) {
        struct nic_qp_blank *fresh = nic_qp_zero.lookup(&zero);

        if (fresh)
            nic_qps.insert(&key, (struct nic_qp *)fresh);   /* BPF_NOEXIST: a racing CPU's entry stays */
        q = nic_qps.lookup(&key);
        if (!q) {
            nic_count(NIC_C_QP_FULL);
            return nic_pass();
        }
    }
    nic_count(NIC_C_DATA);

    now = bpf_ktime_get_ns();     /* a helper: not under the lock */
    lat = now - rx.ts_ns;
    msg_ns = now - rx.msg_start_ns;

    bpf_spin_lock(&q->lock);
    if (!(q->flags & NIC_QP_INIT)) {
        /* position 0 is this frame's PSN minus its railab seq, so losses at the very
         * start count (as Receiver) and the responder NAKs them (as QpResponder) */
        q->flags = NIC_QP_INIT;
        q->psn0 = (rx.psn - rx.seq) & PSN_MASK;
        q->epsn = q->psn0;
        q->highest = (q->psn0 - 1) & PSN_MASK;
        q->seen_lo = ~0ULL;      /* nothing before position 0 is missing */
        q->seen_hi = ~0ULL;
        q->first_ns = now;
        q->lat_min = ~0ULL;
    }
    q->saddr = rx.saddr;
    q->src_qp = rx.src_qp;
    q->flow_id = rx.flow_id;
    q->sport = rx.sport;

    /* go-back-N keeps only the expected packet: a message completes when its packets
     * are accepted, not when a discarded one first arrived */
    go_back_n = respond && !open_loop && !selective;
    prev_high = q->highest;
    unique = nic_book_psn(q, rx.psn, rx.ts_ns);
    book_msg = go_back_n ? nic_psn_diff(rx.psn, q->epsn) == 0 : unique;
    if (unique) {
        q->packets++;
        q->bytes += rx.frame_len;
        q->payload_bytes += rx.payload_len;
        if (q->packets > 1 && now - q->last_ns > q->max_gap_ns)
            q->max_gap_ns = now - q->last_ns;
        q->last_ns = now;
        if (rx.ts_ns > q->last_send_ns)
            q->last_send_ns = rx.ts_ns;
        if (rx.ecn == 3)
            q->ce++;
        if ((__s64)lat >= 0) {
            q->lat_sum += lat;
            if (lat < q->lat_min)
                q->lat_min = lat;
            if (lat > q->lat_max)
                q->lat_max = lat;
            /* the slot is computed where it is used: alive across the rest, its
             * per-branch ranges kept the verifier from merging paths (330 k insns) */
            lat_slot = nic_log_slot(lat);
            q->lat_hist[lat_slot & (NIC_LOG_SLOTS - 1)]++;
        } else {
            q->lat_bad++;
        }
    }
    if (book_msg && nic_book_msg(q, rx.msg_id, rx.msg_pkts)) {
        msg_done = 1;
        q->messages++;
        q->msg_sum += msg_ns;
        msg_slot = nic_log_slot(msg_ns);
        q->msg_hist[msg_slot & (NIC_LOG_SLOTS - 1)]++;
    }

    if (respond) {
        d = open_loop ? 0 : nic_psn_diff(rx.psn, q->epsn);
        if (open_loop) {
            /* receiver.Responder: the MSN counts messages whose last packet arrived */
            if (rx.msg_last)
                q->msn = (q->msn + 1) & PSN_MASK;
            if (rx.ackreq)
                send = NIC_SEND_ACK;
        } else if (selective) {
            nic_sr_new_holes(q, prev_high, now);
            if (d > 0 && rx.ackreq) {
                if (!(q->flags & NIC_QP_ACK_OWED) || nic_psn_diff(rx.psn, q->ack_owed_psn) > 0)
                    q->ack_owed_psn = rx.psn;
                q->flags |= NIC_QP_ACK_OWED;
            }
            if (d == 0) {
                q->unacked += nic_sr_advance(q);
                owed = (q->flags & NIC_QP_ACK_OWED) && nic_psn_diff(q->epsn, q->ack_owed_psn) > 0;
                if (owed)
                    q->flags &= ~NIC_QP_ACK_OWED;
                if (rx.ackreq || owed || (cfg->ack_every && q->unacked >= cfg->ack_every) ||
                    (cfg->ack_delay_ns && (q->flags & NIC_QP_ACK_SENT) &&
                     now - q->last_ack_ns >= cfg->ack_delay_ns))
                    send = NIC_SEND_ACK;
            } else if (d < 0) {
                send = NIC_SEND_ACK;
            }
            /* messages whose every packet arrived: the MSN of a buffering responder */
            q->msn = q->messages & PSN_MASK;
            if (send == NIC_SEND_NONE && nic_sr_nak_due(q, now, cfg->nak_delay_ns, &nak_psn))
                send = NIC_SEND_NAK;
        } else if (d == 0) {
            q->epsn = (q->epsn + 1) & PSN_MASK;
            q->unacked++;
            q->flags &= ~NIC_QP_NAK_OPEN;
            if (rx.msg_last)
                q->msn = (q->msn + 1) & PSN_MASK;
            if (rx.ackreq || (cfg->ack_every && q->unacked >= cfg->ack_every) ||
                (cfg->ack_delay_ns && (q->flags & NIC_QP_ACK_SENT) &&
                 now - q->last_ack_ns >= cfg->ack_delay_ns))
                send = NIC_SEND_ACK;
        } else if (d > 0) {
            q->discarded++;
            if (!(q->flags & NIC_QP_NAK_OPEN)) {
                q->flags |= NIC_QP_NAK_OPEN;
                send = NIC_SEND_NAK;
            }
        } else {
            send = NIC_SEND_ACK;
        }
        if (!(q->flags & NIC_QP_ACK_SENT)) {
            /* the coalescing timer starts with the first packet, as QpResponder's */
            q->flags |= NIC_QP_ACK_SENT;
            q->last_ack_ns = now;
        }
        cnp_due = rx.ecn == 3 && (!(q->flags & NIC_QP_CNP_SENT) ||
                                  now - q->last_cnp_ns >= cfg->cnp_interval_ns);
        if (cnp_due && send == NIC_SEND_NONE) {
            send = NIC_SEND_CNP;
            q->flags |= NIC_QP_CNP_SENT;
            q->last_cnp_ns = now;
            q->cnps++;
        } else if (cnp_due) {
            becn = 1;
            q->cnp_deferred++;
        }
        if (send == NIC_SEND_ACK) {
            q->acks++;
            q->unacked = 0;
            q->last_ack_ns = now;
        } else if (send == NIC_SEND_NAK) {
            q->naks++;
        }
        resp_psn = send == NIC_SEND_NAK ? (selective ? nak_psn : q->epsn) : q->epsn - 1;
        if (open_loop)
            resp_psn = rx.psn;
        resp_msn = q->msn;
    }
    bpf_spin_unlock(&q->lock);

    if (unique)
        nic_book_bin(cfg, now, rx.frame_len);
    if (msg_done) {
        /* reserved in the ring, not built on the stack: the stack is at its 512 bytes */
        ev = nic_events.ringbuf_reserve(sizeof(*ev));
        if (ev) {
            ev->daddr = rx.daddr;
            ev->dqpn = rx.dqpn;
            ev->flow_id = rx.flow_id;
            ev->msg_id = rx.msg_id;
            ev->done_ns = now;
            ev->msg_ns = msg_ns;
            ev->msg_bytes = rx.msg_bytes;
            ev->_pad = 0;
            nic_events.ringbuf_submit(ev, 0);
        } else {
            nic_count(NIC_C_EVENT_LOST);
        }
    }

    if (send == NIC_SEND_NONE) {
        if (cfg->flags & NIC_F_CONSUME && respond) {
            nic_count(NIC_C_DROP);
            return XDP_DROP;
        }
        return nic_pass();
    }
    if (!t)
        return nic_pass();      /* (respond is 0 then: for the verifier) */
    if (send == NIC_SEND_CNP) {
        r = nic_send_cnp(ctx, t, cfg, &rx);
        if (r)
            goto tx_fail;
        nic_count(NIC_C_CNP);
        return XDP_TX;
    }
    r = nic_send_ack(ctx, t, cfg, &rx, send == NIC_SEND_NAK ? AETH_NAK_PSN_SEQ : AETH_ACK,
                     resp_psn, resp_msn, becn);
    if (r)
        goto tx_fail;
    if (becn)
        nic_count(NIC_C_CNP_DEFER);
    nic_count(send == NIC_SEND_NAK ? NIC_C_NAK : NIC_C_ACK);
    return XDP_TX;

tx_fail:
    nic_count(NIC_C_TX_FAIL);
    if (r > 0)
        return nic_pass();
    return XDP_DROP;            /* trimmed, then too short: no frame left to pass on */
}

/* For the peer of a veth whose other end sends with XDP_TX: veth delivers XDP frames
 * only to an end that runs an XDP program. */
int xdp_nic_pass(struct xdp_md *ctx)
{
    return XDP_PASS;
}
