/* railab switch: the XDP entry program shared by every switch of a lab.
 *
 * Loaded once per lab (bcc, src_file + -D size cflags) and attached to every
 * switch port. The ingress ifindex is lab-unique, so `ports` tells which switch
 * and which port slot a frame arrived on. Pipeline:
 *
 *   port lookup (port_index array, `ports` hash beyond it; unknown -> drop unknown_port)
 *   -> rx counters -> port down?
 *   Ethernet -> ARP: request for an owned address on this port -> reply sent back
 *                    out of the ingress port (redirect to it, or XDP_TX per port flag),
 *                    any other ARP -> XDP_PASS (kernel/agent may learn from it)
 *            -> not IPv4 (IPv6, LLDP, VLAN, ...) -> drop not_ipv4 (documented choice:
 *               kernel IP forwarding is off in switch namespaces, nothing would use it)
 *   IPv4 -> L4 ports (TCP/UDP, not for fragments) -> RoCEv2 BTH (UDP 4791)
 *        -> ARN notice (UDP 4792, consumption on, fabric port or magic) -> tail call
 *           xdp_notice_rx: exclusion in arn_excl, notice dropped (before the local-address check)
 *        -> route_cache (switch_id, dst, route_gen, arn_gen) (miss: local_addrs + LPM + the
 *           exclusion covering dst, then fill the entry)
 *        -> dst owned by the switch -> XDP_PASS
 *        -> TTL <= 1 -> drop ttl_expired
 *        -> traffic-matrix entry (switch has any for dst) -> that member, skipping route and mode
 *        -> the route's group (no route -> drop no_route)
 *           -> no live member: drop members_down, and on a fabric port (generation on) tail call
 *              xdp_notice_tx: the frame becomes a WITHDRAW notice back out of the ingress port
 *              (XDP_TX), at most one per (switch, prefix, port) per hold
 *        -> member by the group's mode
 *        -> emulated egress port (rl_transmit: virtual queue, tail drop queue_full, ECN CE)
 *        -> MAC rewrite, TTL-1 -> bpf_redirect(member ifindex)
 *           or, if that port has a real queue: XDP_PASS with the egress ifindex in a
 *           handoff inside the frame -> tc_handoff (clsact ingress) removes it ->
 *           bpf_redirect through the egress port's shaper qdisc (delay as well as the
 *           model's drops and marks)
 *
 * Every exit goes through rl_exit() (per-verdict counters); drops go through
 * rl_drop() (per-port and global per-reason counters) which calls rl_exit().
 * bcc only rewrites map accesses in this file, so all map lookups live here.
 *
 * Cost model (x86-64, SRSO/retpoline mitigations): array and per-CPU array lookups are
 * inlined by the verifier (~1 ns); every helper call costs 10-40 ns (hash lookup ~30,
 * LPM ~36, bpf_ktime_get_ns ~30, bpf_spin_lock+unlock ~45). The fast path therefore
 * uses arrays only (port_index, switches, route_cache, groups, members, counters), reads
 * the clock at most once per packet (rl_now) and updates the emulated queue lock-free.
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/pkt_cls.h>
#include <linux/in.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/tcp.h>

#include "railab_consts.h"
#include "railab_structs.h"
#include "railab_maps.h"
#include "parse.h"
#include "rewrite.h"
#include "arp.h"
#include "lb.h"
#include "flows.h"
#include "ecn.h"
#include "pfc.h"

static __always_inline void rl_count_verdict(struct xdp_md *ctx, __u32 key)
{
    struct pkt_count *v;

    if (key >= RL_XDP_ACTION_MAX)
        key = XDP_ABORTED;
    v = verdict_stats.lookup(&key);
    if (v) {
        v->packets++;
        v->bytes += ctx->data_end - ctx->data;
    }
}

static __always_inline int rl_exit(struct xdp_md *ctx, int action)
{
    rl_count_verdict(ctx, action);
    return action;
}

/* Count a frame as dropped for reason (port and global counters), without the verdict:
 * a frame turned into a notice is a dropped data packet and a sent notice. */
static __always_inline void rl_count_drop(struct xdp_md *ctx, struct port_stats *ps, __u32 reason)
{
    __u64 *d;

    if (reason >= DROP_REASON_MAX)
        reason = DROP_NONE;
    if (ps)
        ps->drops[reason]++;
    d = drop_stats.lookup(&reason);
    if (d)
        *d += 1;
#ifdef RAILAB_DEBUG
    bpf_trace_printk("railab drop ifindex=%u reason=%u\n", ctx->ingress_ifindex, reason);
#endif
}

static __always_inline int rl_drop(struct xdp_md *ctx, struct port_stats *ps, __u32 reason)
{
    rl_count_drop(ctx, ps, reason);
    return rl_exit(ctx, XDP_DROP);
}

/* The packet's time, read at most once per packet (*now == 0: not read yet). */
static __always_inline __u64 rl_now(__u64 *now)
{
    if (!*now)
        *now = bpf_ktime_get_ns();
    return *now;
}

/* The port ifindex belongs to: port_index (inlined array lookup) for ifindexes it covers,
 * where the agent keeps every port; the `ports` hash beyond. NULL: not a switch port. */
static __always_inline struct port_info *rl_port(__u32 ifindex)
{
    struct port_info *p;

    if (ifindex < PORT_INDEX_SLOTS) {
        p = port_index.lookup(&ifindex);
        return p && (p->flags & PORT_F_VALID) ? p : NULL;
    }
    return ports.lookup(&ifindex);
}

/* The key of (switch_id, daddr) in an LPM map keyed like `routes` (routes, arn_excl):
 * all 64 bits, so the lookup answers with the longest prefix covering daddr. */
static __always_inline void rl_dst_key(struct route_key *key, __u32 switch_id, __u32 daddr)
{
    key->prefixlen = 64;
    key->switch_id_be = rl_htonl(switch_id);
    key->dst = daddr;
}

static __always_inline int rl_lookup_route(__u32 switch_id, __u32 daddr, __u32 *group_id,
                                           __u64 *avoid)
{
    struct route_key key = {};
    struct route_val *rv;

    rl_dst_key(&key, switch_id, daddr);
    rv = routes.lookup(&key);
    if (!rv)
        return -1;
    *group_id = rv->group_id;
    *avoid = rv->avoid_mask;
    return 0;
}

/* route_cache slot of (switch_id, dst). */
static __always_inline __u32 rc_slot(__u32 switch_id, __u32 daddr)
{
    return rl_fmix(daddr ^ (switch_id * 0x9e3779b9U)) & (ROUTE_CACHE_SLOTS - 1);
}

/* Members of exclusion e still in force at now, and when they lapse (*until; 0: at a
 * RESTORE): one expiry for the entry, the latest a WITHDRAW asked for (rl_excl_set). */
static __always_inline __u64 rl_excl_live(const struct arn_excl *e, __u64 now, __u64 *until)
{
    __u64 u = e->until;

    if (u && now >= u)
        return 0;
    *until = u;
    return e->avoid;
}

/* Local-address check, route and traffic-matrix presence of (switch_id, daddr): RC_F_LOCAL /
 * RC_F_ROUTE / RC_F_TM in the result, *group_id / *avoid set if RC_F_ROUTE. From this
 * CPU's route_cache entry if it is for this (switch, dst) and generations; otherwise
 * local_addrs + LPM (+ tm_dsts, + arn_excl), and the entry is refilled. gen is read BEFORE
 * those lookups and the agent bumps it AFTER changing those maps, so an entry filled from
 * old tables carries an old generation and is never used after the change.
 *
 * Notice exclusions (arn_excl, written by xdp_notice_rx) join the cached avoid mask the same
 * way, under a generation of their own (switch_cfg.arn_gen: the data path bumps it; the
 * agent writes 0 with every new route_gen, so a pair of the two never comes back): an entry is valid
 * for both generations it was filled under, and, if it holds exclusions that expire,
 * only until the earliest expiry (excl_until; only such entries read the clock on a hit).
 * A fill looks into arn_excl only while the switch has exclusions (arn_switch.excl), and
 * only for a route: the most specific exclusion covering dst applies if it is for the
 * route's group (a learned /32 inside an excluded prefix is covered too).
 * sw == NULL (not expected: switch ids are checked): no caching. */
static __always_inline __u32 rl_route(const struct switch_cfg *sw, __u32 switch_id, __u32 daddr,
                                      __u32 *group_id, __u64 *avoid, __u64 *nowp)
{
    struct local_addr_key lkey = {};
    struct route_cache *rc = NULL;
    struct arn_switch *as;
    __u32 slot, gen = 0, agen = 0, flags = RC_F_VALID;
    __u64 until = 0;

    if (sw) {
        gen = *(volatile const __u32 *)&sw->route_gen;
        agen = *(volatile const __u32 *)&sw->arn_gen;
        slot = rc_slot(switch_id, daddr);
        rc = route_cache.lookup(&slot);
        if (rc && rc->gen == gen && rc->arn_gen == agen && rc->dst == daddr &&
            rc->switch_id == switch_id && (rc->flags & RC_F_VALID) &&
            (!rc->excl_until || rl_now(nowp) < rc->excl_until)) {
            *group_id = rc->group_id;
            *avoid = rc->avoid_mask;
            return rc->flags;
        }
    }
    lkey.switch_id = switch_id;
    lkey.ip = daddr;
    if (local_addrs.lookup(&lkey))
        flags |= RC_F_LOCAL;
    *group_id = 0;
    *avoid = 0;
    if (rl_lookup_route(switch_id, daddr, group_id, avoid) == 0) {
        flags |= RC_F_ROUTE;
        as = arn_switch.lookup(&switch_id);
        if (as && as->excl) {
            struct route_key ekey = {};
            struct arn_excl *e;

            rl_dst_key(&ekey, switch_id, daddr);
            e = arn_excl.lookup(&ekey);
            if (e && e->group_id == *group_id) {
                *avoid |= rl_excl_live(e, rl_now(nowp), &until);
            }
        }
    }
    if (sw && (sw->flags & SW_F_TM)) {
        struct tm_dst_key tkey = {};

        tkey.switch_id = switch_id;
        tkey.daddr = daddr;
        if (tm_dsts.lookup(&tkey))
            flags |= RC_F_TM;
    }
    if (rc) {
        rc->switch_id = switch_id;
        rc->dst = daddr;
        rc->gen = gen;
        rc->arn_gen = agen;
        rc->flags = flags;
        rc->group_id = *group_id;
        rc->avoid_mask = *avoid;
        rc->excl_until = until;
    }
    return flags;
}

/* Remember the sender of an ARP seen on a host-facing (PORT_F_LEARN) port; bump
 * learn_gen when a host is new or moved so the agent's poll sees it. */
static __always_inline void arp_learn(struct arp_eth_ipv4 *arp, __u32 switch_id, __u32 ifindex)
{
    struct learn_key key = {};
    struct learn_val nv = {}, *lv;
    __u32 zero = 0;
    __u64 *gen;

    key.switch_id = switch_id;
    __builtin_memcpy(&key.ip, arp->ar_sip, 4);
    if (!key.ip)   /* ARP probe (RFC 5227): no sender address yet */
        return;
    lv = arp_learned.lookup(&key);
    if (lv && lv->ifindex == ifindex && lv->mac[0] == arp->ar_sha[0] &&
        lv->mac[1] == arp->ar_sha[1] && lv->mac[2] == arp->ar_sha[2] &&
        lv->mac[3] == arp->ar_sha[3] && lv->mac[4] == arp->ar_sha[4] &&
        lv->mac[5] == arp->ar_sha[5]) {
        lv->last_ns = bpf_ktime_get_ns();
        return;
    }
    nv.ifindex = ifindex;
    __builtin_memcpy(nv.mac, arp->ar_sha, 6);
    nv.last_ns = bpf_ktime_get_ns();
    arp_learned.update(&key, &nv);
    gen = learn_gen.lookup(&zero);
    if (gen)
        __sync_fetch_and_add(gen, 1);
}

static __always_inline int handle_arp(struct xdp_md *ctx, struct hdr_cursor *nh, void *data_end,
                                      struct ethhdr *eth, struct port_info *port,
                                      struct port_stats *ps, __u32 ifindex)
{
    struct arp_eth_ipv4 *arp;
    struct port_addr_key key = {};
    __u64 avoid;
    __u32 gid;
    int op;

    op = parse_arp(nh, data_end, &arp);
    if (op < 0)
        return rl_drop(ctx, ps, DROP_PARSE_ERROR);
    if (port->flags & PORT_F_LEARN)
        arp_learn(arp, port->switch_id, ifindex);
    if (op != RL_ARPOP_REQUEST || !arp_is_plain_request(arp))
        return rl_exit(ctx, XDP_PASS);

    key.ifindex = ifindex;
    key.ip = arp_target_ip(arp);
    if (!port_addrs.lookup(&key)) {
        if (!(port->flags & PORT_F_PROXY_ARP) ||
            rl_lookup_route(port->switch_id, key.ip, &gid, &avoid) < 0)
            return rl_exit(ctx, XDP_PASS);
    }
    arp_make_reply(eth, arp, port->mac);
    if (ps) {
        ps->tx_packets++;
        ps->tx_bytes += ctx->data_end - ctx->data;
    }
    /* veth: XDP_TX frames are queued on the peer but its NAPI is only kicked if
     * the peer runs an XDP program; a redirect to our own ifindex goes through
     * ndo_xdp_xmit + flush and needs only GRO on the peer, like forwarding. */
    if (port->flags & PORT_F_ARP_XDP_TX)
        return rl_exit(ctx, XDP_TX);
    return rl_exit(ctx, bpf_redirect(ifindex, 0));
}

/* Least-loaded member among LB_SCAN_MAX consecutive members (mod n) from the caller's
 * `start` (all of them when n <= LB_SCAN_MAX); a tie goes to the member scanned first. The
 * comparison is branch-free: with branches the verifier's paths multiply per candidate. */
static __always_inline void lb_consider(struct group *grp, __u32 j, __u64 now, __u64 dead,
                                        __u32 *best, __u64 *best_load)
{
    __u32 slot = grp->eslots[j & (WCMP_SLOTS - 1)];
    struct port_queue *q = port_queue.lookup(&slot);
    __u64 load, lt, dm;

    if (!q)
        return;
    load = queue_load(q, now);
    /* a dead member scores "infinitely" loaded (never strictly better than the start) */
    dm = -(__u64)(j < DOWN_MASK_BITS ? ((dead >> (j & 63)) & 1) : 0);
    load = (load & ~dm) | (0x7fffffffffffffffULL & dm);
    lt = (__u64)((__s64)(load - *best_load) >> 63);   /* all ones iff load < best_load */
    *best_load = (load & lt) | (*best_load & ~lt);
    *best = (__u32)((j & lt) | (*best & ~lt));
}

/* The scan starts at `start` (< n): a flowlet's own member when it is re-decided, so it
 * stays where it is unless another member is strictly less loaded (its load includes the
 * flow's own traffic: moving to an equal member would only reorder); a pseudo-random member
 * otherwise, so tied idle members spread. Members past the n-th are scanned again (mod n):
 * a repeat never changes the result. */
static __always_inline __u32 lb_least_loaded(struct group *grp, __u32 n, __u64 now, __u64 dead,
                                             __u32 start)
{
    __u32 best = start, k, j;
    __u64 best_load = 0x7fffffffffffffffULL;

#pragma unroll
    for (k = 0; k < LB_SCAN_MAX; k++) {
        j = start + k;
        j = j < n ? j : (j - n < n ? j - n : start);
        lb_consider(grp, j, now, dead, &best, &best_load);
    }
    return best;   /* may still be dead (all scanned members dead): lb_select re-picks */
}

/* Flowlet: keep the flow's member while its packets come closer together than the
 * group's flowlet gap (the shorter busy gap while that member's utilisation is above
 * busy_util); after a longer gap the next flowlet goes to the least-loaded member -- or
 * stays where it was if that member is among the least loaded (its load includes the
 * flow's own traffic: moving to an equal member would only reorder). The chosen member
 * counts the flowlet as placed until its meter has seen it (queue_load). */
static __always_inline __u32 lb_flowlet(struct group *grp, __u32 gid, __u32 n, __u32 hash,
                                        __u64 dead, __u64 live, __u64 *nowp, __u64 *placed)
{
    struct flowlet_key key = {};
    struct flowlet *fl, nf = {};
    struct port_queue *q;
    __u64 now = rl_now(nowp), gap;
    __u32 slot, cur = n;

    key.group_id = gid;
    key.hash = hash;
    nf.flowlets = 1;
    fl = flowlets.lookup(&key);
    if (fl) {
        cur = fl->member;
        gap = grp->flowlet_ns;
        if (grp->busy_util) {
            slot = grp->eslots[cur & (WCMP_SLOTS - 1)];
            q = port_queue.lookup(&slot);
            if (q && queue_util(q, now) > grp->busy_util)
                gap = grp->busy_ns;
        }
        /* a flowlet whose member died ends at once (its next member is chosen now) */
        if (cur < n && !lb_is_dead(dead, cur) && now - fl->last_ns <= gap) {
            fl->last_ns = now;
            return cur;
        }
        nf.flowlets = fl->flowlets + 1;
    }
    /* a new flow's scan starts where its hash and flowlet number say, not at random: the
     * same flows with the same hash seed make the same choices on every run and at every
     * time scale, and different flows still start apart */
    nf.member = lb_least_loaded(grp, n, now, dead,
                                cur < n ? cur : rl_reduce(rl_fmix(hash ^ (nf.flowlets * 0x9e3779b9U)), n));
    if (lb_is_dead(dead, nf.member))
        nf.member = lb_repick(live, bpf_get_prandom_u32());
    *placed = 1;          /* rl_transmit counts the frame on the member's port */
    nf.last_ns = now;
    flowlets.update(&key, &nf);
    return nf.member;
}

/* Member index by the group's mode, ignoring liveness (n > 0). *h gets the flow hash
 * (or a random value for per-packet modes) for a re-pick. */
static __always_inline __u32 lb_pick(struct group *grp, __u32 gid, __u32 n, const struct flow *f,
                                     __u32 fields, __u32 seed, __u32 ingress_ifindex, __u16 lbn,
                                     __u64 dead, __u64 live, __u32 *h, __u64 *nowp,
                                     __u32 pre_fields, __u32 pre_hash, __u64 *placed)
{
    __u16 mode = grp->mode;

    /* if-chain, not switch: bcc/llvm may emit a jump table, which BPF lacks.
     * ECMP (the default and most common mode) first. */
    if (mode == LB_MODE_ECMP) {
        *h = fields == pre_fields ? pre_hash : flow_hash(f, fields, seed, ingress_ifindex);
        return rl_reduce(*h, n);
    }
    if (mode == LB_MODE_LBN) {
        *h = rl_fmix((__u32)lbn + 0x9e3779b9);
        return rl_mod(lbn, n);
    }
    if (mode == LB_MODE_SPRAY_RANDOM || mode == LB_MODE_SPRAY_RR ||
        (mode == LB_MODE_SPRAYLINK && f->has_bth && roce_is_data(f->bth_opcode))) {
        *h = bpf_get_prandom_u32();
        if (mode == LB_MODE_SPRAY_RANDOM)
            return rl_reduce(*h, n);
        if (mode == LB_MODE_SPRAY_RR)   /* one shared counter: per-CPU counters would break RR */
            return rl_mod(__sync_fetch_and_add(&grp->rr, 1), n);
        return lb_least_loaded(grp, n, rl_now(nowp), dead, rl_reduce(*h, n));
    }
    *h = fields == pre_fields ? pre_hash : flow_hash(f, fields, seed, ingress_ifindex);
    if (mode == LB_MODE_WCMP && grp->n_wslots)
        return grp->wslots[rl_reduce(*h, grp->n_wslots) & (WCMP_SLOTS - 1)];
    if (mode == LB_MODE_FLOWLET)
        return lb_flowlet(grp, gid, n, *h, dead, live, nowp, placed);
    return rl_reduce(*h, n);   /* ECMP, SprayLink protocol/non-RoCE packets, unknown modes */
}

/* Member index (< n, n > 0) for a packet of group gid: the mode's pick, re-picked among
 * live members (by an independent hash of the flow, or at random per packet) only if
 * that pick is dead. live != 0. */
static __always_inline __u32 lb_select(struct group *grp, __u32 gid, __u32 n, const struct flow *f,
                                       __u32 fields, __u32 seed, __u32 ingress_ifindex, __u16 lbn,
                                       __u64 dead, __u64 live, __u64 *nowp, __u32 pre_fields,
                                       __u32 pre_hash, __u64 *placed)
{
    __u32 h = 0;
    __u32 idx = lb_pick(grp, gid, n, f, fields, seed, ingress_ifindex, lbn, dead, live, &h, nowp,
                        pre_fields, pre_hash, placed);

    if (lb_is_dead(dead, idx))
        idx = lb_repick(live, rl_fmix(h ^ 0x5bd1e995));
    return idx;
}

/* x / 1000 exactly. BPF has no multiply-high, so clang keeps a 64-bit division by a
 * constant as a div instruction (tens of cycles); below 2^32 the compiler's own exact
 * 32-bit reciprocal (0x10624dd3, shift 38) does it with one multiply. */
static __always_inline __u64 rl_div1000(__u64 x)
{
    return x < 0x100000000ULL ? (x * 0x10624dd3ULL) >> 38 : x / 1000;
}

/* Account a frame of tx_ns transmit time on an emulated egress port (model on). Returns
 * 1 if the virtual queue refuses it (tail drop), else 0 with *mark = ECN-mark it.
 * Lock-free: the frame is queued by a compare-and-swap of t_free (RL_CAS_TRIES tries;
 * after that many lost races, by an atomic add), its time is added to win_busy_ns
 * atomically, and the CPU that moves win_start on by compare-and-swap closes the
 * utilisation window. The same arithmetic as one CPU at a time under a lock, without
 * the helper calls (bpf_spin_lock + unlock cost ~45 ns here). A window start newer than
 * this packet's clock read (another CPU's later `now`) is not a window end. */
#define RL_CAS_TRIES 3
static __always_inline int queue_admit(struct port_queue *q, __u64 now, __u64 tx_ns, int *mark,
                                       __u64 buf_ns)
{
    __u64 tf, prev, backlog = 0, ws, elapsed, sample, busy;
    int drop = 0, done = 0, i;

    tf = *(volatile __u64 *)&q->t_free;
#pragma unroll
    for (i = 0; i < RL_CAS_TRIES; i++) {
        if (!done && !drop) {
            backlog = tf > now ? tf - now : 0;
            if (backlog + tx_ns > buf_ns) {
                drop = 1;
            } else {
                prev = __sync_val_compare_and_swap(&q->t_free, tf, now + backlog + tx_ns);
                if (prev == tf)
                    done = 1;
                else
                    tf = prev;
            }
        }
    }
    if (!done && !drop) {   /* still losing races: queue it by an atomic add (approximate:
                             * an idle queue's t_free is not moved up to now first) */
        backlog = tf > now ? tf - now : 0;
        if (backlog + tx_ns > buf_ns) {
            drop = 1;
        } else {
            prev = __sync_fetch_and_add(&q->t_free, tx_ns);
            backlog = prev > now ? prev - now : 0;
            done = 1;
        }
    }
    if (done) {
        *mark = ecn_mark(q, backlog);
        __sync_fetch_and_add(&q->win_busy_ns, tx_ns);
    }
    ws = *(volatile __u64 *)&q->win_start;
    elapsed = now - ws;
    if ((__s64)elapsed >= 0 && elapsed >= q->win_ns &&
        __sync_val_compare_and_swap(&q->win_start, ws, now) == ws) {
        busy = __sync_lock_test_and_set(&q->win_busy_ns, 0);
        sample = elapsed ? busy * UTIL_ONE / elapsed : 0;
        if (sample > UTIL_ONE)
            sample = UTIL_ONE;
        /* A window that stayed open for more than 4 windows spans an idle stretch: the
         * port was idle (util 0), whatever the first frame's share of that stretch -- a
         * share that depends on how long the idle lasted, so on the time scale, and that
         * would make the next, busy window's average come out half-risen. A port whose
         * average is 0 takes its first busy window as it is, so a port that has just
         * started carrying a flow reads as loaded after one window, not only after the
         * 3/4 average has crept up over several (flowlet's least-loaded pick would see a
         * half-risen average as a lower band and put a second flow there). */
        /* ... and the average of a port idle that long has decayed: it reads as idle (as
         * queue_util already said), not as what it carried before the idle stretch, so a
         * flowlet starting after a gap compares its port with the others as they are now */
        if (elapsed > 4 * (__u64)q->win_ns)
            q->util = sample = 0;
        q->util = !q->util ? sample : (q->util * 3 + sample) >> 2;
        /* the closed window saw part of what the flowlets placed in it send */
        q->placed_prev = __sync_lock_test_and_set(&q->placed, 0);
    }
    return drop;
}

/* Hand a decided, rewritten frame to tc_handoff, which sends it through the egress
 * port's qdisc: XDP cannot hold a frame, a qdisc can. The handoff travels in the frame
 * (this kernel's XDP has no bpf_xdp_adjust_meta): HANDOFF_GAP bytes are added in front,
 * the Ethernet header is copied to the new front and the `struct handoff` written behind
 * it, over the old header, so the stack sees an IPv4 frame to another MAC, which it
 * leaves to tc; tc_handoff removes the gap between the MAC and IP headers. tc_class
 * picks the qdisc's class (PFC_TC_*; 0 = none). */
static __always_inline int rl_handoff(struct xdp_md *ctx, __u32 egress_ifindex, __u32 tc_class)
{
    struct handoff *h;
    struct ethhdr *eth;
    void *data, *data_end;
    __u64 *key;
    __u32 zero = 0;

    rl_count_verdict(ctx, RL_VERDICT_QUEUED);
    key = handoff_key.lookup(&zero);
    if (!key || bpf_xdp_adjust_head(ctx, -(int)HANDOFF_GAP))
        return rl_exit(ctx, XDP_ABORTED);
    data = (void *)(long)ctx->data;
    data_end = (void *)(long)ctx->data_end;
    eth = data;
    h = data + sizeof(*eth);
    if (data + HANDOFF_GAP + sizeof(*eth) > data_end)
        return rl_exit(ctx, XDP_ABORTED);
    __builtin_memcpy(eth, data + HANDOFF_GAP, sizeof(*eth));
    h->magic = HANDOFF_MAGIC;
    h->ifindex = egress_ifindex;
    h->tc_class = tc_class;
    h->_pad = 0;
    h->key = *key;
    return XDP_PASS;
}

/* Retire this ingress port's ring entries whose frames have left (at most PFC_POPS, in
 * order): a departure time that has passed, or a frame held by a pause on its egress
 * port once that port's pause of the lossless priority has ended (XON or expiry). */
static __always_inline void rl_pfc_retire(struct pfc_port *pp, __u64 now, __u32 prio)
{
    struct pfc_port *epp;
    __u32 i, tail, eslot;
    __u64 t;

#pragma unroll
    for (i = 0; i < PFC_POPS; i++) {
        tail = pp->tail;
        if (tail == pp->head)
            return;
        t = pp->t_dep[tail & (PFC_RING - 1)];
        if (t & PFC_HELD) {
            eslot = (__u32)t;
            epp = pfc_port.lookup(&eslot);
            if (epp && epp->pause_until[prio & 7] > now)
                return;
        } else if (t > now) {
            return;
        }
        pp->bytes -= pp->len[tail & (PFC_RING - 1)];
        pp->tail = tail + 1;
    }
}

/* Send the frame out of member m: emulated egress port (virtual queue: tail drop,
 * ECN, utilisation), MAC rewrite, TTL, tx counters, then a redirect -- or, for a port
 * with a real queue, the handoff to its qdisc. With PFC on, a lossless frame is
 * accounted at its ingress port instead of being tail-dropped, and one whose egress
 * port is paused by the neighbour skips the virtual queue (it is not on the wire) and
 * waits in the qdisc's held lossless class. */
static __always_inline int rl_transmit(struct xdp_md *ctx, struct ethhdr *eth, struct iphdr *iph,
                                       const struct member *m, __u64 len, struct pkt_count *mc,
                                       __u64 *nowp, __u32 in_slot, __u64 placed)
{
    struct port_stats *eps;
    struct port_queue *q;
    struct pfc_port *pp = NULL, *epp;
    struct pfc_cfg *pc;
    __u32 slot = m->egress_slot, zero = 0, tc_class = 0, prio;
    __u64 t_dep;
    int mark = 0, held = 0;

    eps = port_stats.lookup(&slot);
    q = port_queue.lookup(&slot);
    if (q && q->ps_per_byte) {
        __u64 buf_ns = q->buf_ns;

        /* a flowlet just placed here counts as load until the meter has seen it (lb.h),
         * in proportion to its first frame: an acknowledgement's flowlet weighs little */
        __sync_fetch_and_add(&q->placed, placed * (len < LB_PLACED_FRAME ? len : LB_PLACED_FRAME));
        pc = pfc_cfg.lookup(&zero);
        if (pc && (pc->flags & PFC_F_ON)) {
            tc_class = (iph->tos >> 2) == PFC_CNP_DSCP ? PFC_TC_CNP : PFC_TC_OTHER;
            if ((iph->tos >> 2) == pc->lossless_dscp) {
                tc_class = PFC_TC_LOSSLESS;
                prio = pc->lossless_prio & 7;
                pp = pfc_port.lookup(&in_slot);
                if (pp && pp->limit_bytes) {
                    rl_pfc_retire(pp, rl_now(nowp), prio);
                    if (pp->bytes + len > pp->limit_bytes) {
                        __sync_fetch_and_add(&pp->headroom_drops, 1);
                        return rl_drop(ctx, port_stats.lookup(&in_slot), DROP_PFC_HEADROOM);
                    }
                    buf_ns = ~0ULL;
                    epp = pfc_port.lookup(&slot);
                    held = epp && epp->pause_until[prio] > rl_now(nowp);
                } else {
                    pp = NULL;
                }
            }
        }
        if (!held && queue_admit(q, rl_now(nowp), rl_div1000(len * q->ps_per_byte), &mark, buf_ns))
            return rl_drop(ctx, eps, DROP_QUEUE_FULL);
        if (pp) {
            t_dep = held ? (PFC_HELD | slot) : *(volatile __u64 *)&q->t_free;
            pfc_hold(pp, t_dep, len);
        }
    }

    rewrite_macs(eth, m->dmac, m->smac);
    ip_decrease_ttl(iph);
    if (mark && ip_set_ce(iph) && eps)
        eps->ecn_marked++;
    if (mc) {
        mc->packets++;
        mc->bytes += len;
    }
    if (eps) {
        eps->tx_packets++;
        eps->tx_bytes += len;
    }
    if (q && (q->flags & QUEUE_F_REAL))
        return rl_handoff(ctx, m->ifindex, tc_class);
    return rl_exit(ctx, bpf_redirect(m->ifindex, 0));
}

/* Flow visibility (bpf/flows.h): account a frame of flow f leaving by egress port slot,
 * sampled. The map accesses live here because bcc rewrites them only in this file. */
static __always_inline void rl_flow_seen(const struct flow *f, __u32 slot, __u64 len, __u64 *nowp)
{
    struct flow_seen_key key = {};
    struct flow_seen *fs, nf = {};
    struct flow_cfg *cfg;
    __u64 *count, weight;
    __u32 zero = 0;

    cfg = flow_cfg.lookup(&zero);
    if (!cfg || !(cfg->flags & FLOW_CFG_F_ON))
        return;
    count = flow_sample.lookup(&zero);
    if (!count)
        return;
    *count += 1;
    if (rl_fmix((__u32)*count) & cfg->sample_mask)
        return;
    weight = (__u64)cfg->sample_mask + 1;
    key.slot = slot;
    key.saddr = f->saddr;
    key.daddr = f->daddr;
    key.sport = f->sport;
    key.dport = f->dport;
    key.proto = f->proto;
    fs = flow_seen.lookup(&key);
    if (fs) {
        __sync_fetch_and_add(&fs->bytes, len * weight);
        __sync_fetch_and_add(&fs->packets, weight);
        fs->last_ns = rl_now(nowp);
        return;
    }
    nf.bytes = len * weight;
    nf.packets = weight;
    nf.first_ns = rl_now(nowp);
    nf.last_ns = nf.first_ns;
    flow_seen.update(&key, &nf);
}

static __always_inline void rl_arn_stat(__u32 key)
{
    __u64 *c = arn_stats.lookup(&key);

    if (c)
        *c += 1;
}

/* The first time (since the agent cleared them) switch_id did a step of a reaction: the
 * stamp's 0 becomes now, by compare-and-swap, so a later packet (or another CPU) never
 * moves it. Called off the common path only: a dead group, a notice, an avoid mask. */
static __always_inline struct arn_stamps *rl_stamps(__u32 switch_id)
{
    return arn_stamps.lookup(&switch_id);
}

#define RL_STAMP(switch_id, field, nowp) do {                                          \
        struct arn_stamps *st_ = rl_stamps(switch_id);                              \
        if (st_ && !*(volatile __u64 *)&st_->field)                                  \
            __sync_val_compare_and_swap(&st_->field, 0, rl_now(nowp));               \
    } while (0)

/* Members (bit i) of grp whose egress port is slot: the members a notice arriving on that
 * port excludes. Branch-free over every member (see rl_excl_live). */
static __always_inline __u64 rl_members_by_slot(const struct group *grp, __u32 slot)
{
    __u64 mask = 0, eq;
    __u32 i;

#pragma clang loop unroll(disable)   /* a bounded loop: unrolled, it spills past the stack */
    for (i = 0; i < WCMP_SLOTS; i++) {
        eq = (__u64)(grp->eslots[i] ^ slot);
        eq = ((eq | -eq) >> 63) - 1;                        /* all ones iff equal */
        RL_OPAQUE(eq);
        mask |= eq & (1ULL << i);
    }
    return mask & rl_member_mask(grp->n_members);
}

/* The members of grp that lead to the same neighbour as port slot (its arn_ports
 * peer_switch): a neighbour's notice concerns the neighbour, whichever of the parallel
 * links it came in on. Without a known neighbour, slot's own members. */
static __always_inline __u64 rl_members_by_peer(const struct group *grp, __u32 slot, __u32 peer)
{
    struct arn_port *ap;
    __u64 mask = 0, eq;
    __u32 i, es;

    if (!peer)
        return rl_members_by_slot(grp, slot);
    /* branch-free on the match, as rl_members_by_slot: with a branch the verifier walks
     * every combination of matches (2^64 states: E2BIG) */
#pragma clang loop unroll(disable)
    for (i = 0; i < WCMP_SLOTS; i++) {
        RL_OPAQUE(mask);
        es = grp->eslots[i];
        ap = arn_ports.lookup(&es);
        if (!ap)
            continue;
        eq = (__u64)(ap->peer_switch ^ peer);
        eq = ((eq | -eq) >> 63) - 1;                        /* all ones iff equal */
        RL_OPAQUE(eq);
        mask |= eq & (1ULL << i);
    }
    return mask & rl_member_mask(grp->n_members);
}

/* Exclude the members in bits until `until` (0: until a RESTORE). One expiry serves the
 * whole entry: a WITHDRAW moves it to the later of the two (0 wins), so members excluded by
 * an earlier notice from another port may stay excluded up to one hold longer than their
 * own notice asked (advisory state: they are still used if nothing else is live). */
static __always_inline void rl_excl_set(struct arn_excl *e, __u64 bits, __u64 until)
{
    if (!e->avoid)
        e->until = until;
    else if (e->until && (!until || until > e->until))
        e->until = until;
    e->avoid |= bits;
}

/* Is this UDP datagram to ARN_UDP_PORT, arriving on port slot, one for xdp_notice_rx?
 * Consumption on, and either a fabric port (where anything to the port is a notice, or a
 * malformed one) or the notice magic (a notice on another port is counted and dropped);
 * not a notice with a flow list (the agent's flow-granular ARN: passed on as before). */
static __always_inline int rl_notice_ours(__u32 slot, struct udphdr *udph, void *data_end)
{
    struct arn_cfg *cfg;
    struct arn_port *ap;
    __u8 *h = (void *)(udph + 1);
    __u32 zero = 0;
    int magic;

    cfg = arn_cfg.lookup(&zero);
    if (!cfg || !(cfg->flags & ARN_F_CONSUME))
        return 0;
    magic = (void *)(h + 8) <= data_end && h[0] == 'R' && h[1] == 'A' && h[2] == 'R' && h[3] == 'N';
    if (magic && (h[7] & ARN_NF_FLOWS))
        return 0;
    ap = arn_ports.lookup(&slot);
    return magic || (ap && (ap->flags & ARN_PORT_F_FABRIC));
}

/* May a data packet that met a dead group on port slot become a notice (xdp_notice_tx)? */
static __always_inline int rl_notice_wanted(__u32 slot)
{
    struct arn_cfg *cfg;
    struct arn_port *ap;
    __u32 zero = 0;

    cfg = arn_cfg.lookup(&zero);
    ap = arn_ports.lookup(&slot);
    return cfg && (cfg->flags & ARN_F_GENERATE) && ap && (ap->flags & ARN_PORT_F_FABRIC);
}

/* A packet that met a group with no live member: dropped, and from a fabric port, with
 * generation on, turned into a notice upstream (xdp_notice_tx). */
static __always_inline int rl_dead_group(struct xdp_md *ctx, struct port_stats *ps, __u32 switch_id,
                                         __u32 slot, __u64 *nowp)
{
    rl_count_drop(ctx, ps, DROP_MEMBERS_DOWN);
    RL_STAMP(switch_id, dead_ns, nowp);
    if (rl_notice_wanted(slot))
        arn_progs.call(ctx, ARN_PROG_TX);
    return rl_exit(ctx, XDP_DROP);
}

/* ---- link watch (arn_cfg ARN_F_WATCH) ----
 * A switch ASIC sees a port lose its signal within microseconds, and its fast failover
 * moves the port's traffic before any software hears of it. Here the agent hears of a
 * downed link over netlink milliseconds later, and until then redirects into the dead
 * veth vanish without a trace the program could read. With the watch on, the data path
 * asks the kernel itself: a fabric port's address gives the switch's namespace a
 * connected route to the neighbour's address (arn_ports.dst_ip, the agent sets
 * ARN_PORT_F_WATCHED only where that holds), which the kernel deletes the moment the port
 * goes down and skips once it loses carrier (ignore_routes_with_linkdown). The link is up
 * while the FIB's answer leads out of this very port. The lookup enters on lo: it refuses
 * a device that does not forward, and of all devices only lo may (the runtime turns
 * forwarding on there and nowhere else: packets never arrive on lo from outside). */
static __always_inline int rl_link_up(struct xdp_md *ctx, __u32 slot)
{
    struct bpf_fib_lookup fib = {};
    struct arn_port *ap = arn_ports.lookup(&slot);
    struct port_info *out;
    int rc;

    if (!ap || !(ap->flags & ARN_PORT_F_WATCHED))
        return 1;
    fib.family = AF_INET;
    fib.ifindex = RL_LOOPBACK_IFINDEX;
    fib.ipv4_dst = ap->dst_ip;
    rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), BPF_FIB_LOOKUP_DIRECT);
    if (rc == BPF_FIB_LKUP_RET_FWD_DISABLED) {   /* misconfigured: blind, not dead */
        rl_arn_stat(ARN_S_WATCH_BLIND);
        return 1;
    }
    if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
        return 0;
    out = rl_port(fib.ifindex);
    return out && out->slot == slot;
}

static __always_inline int rl_watching(void)
{
    __u32 zero = 0;
    struct arn_cfg *cfg = arn_cfg.lookup(&zero);

    return cfg && (cfg->flags & ARN_F_WATCH);
}

/* The watch found the link of member idx of group gid down: rescan in xdp_link_scan. */
static __always_inline int rl_watch_rescan(struct xdp_md *ctx, __u32 gid, __u32 idx)
{
    __u32 zero = 0;
    struct link_watch *w = link_watch.lookup(&zero);

    rl_arn_stat(ARN_S_WATCH_DEAD);
    if (w) {
        w->gid = gid;
        w->member = idx;
        arn_progs.call(ctx, ARN_PROG_LINK_SCAN);
    }
    return rl_drop(ctx, NULL, DROP_MEMBERS_DOWN);
}

/* This run of xdp_switch is xdp_link_scan's second: the members it found down (of group
 * *gid), taken once. 0: a packet's first run. */
static __always_inline __u64 rl_watch_rescanned(__u32 *gid)
{
    __u32 zero = 0;
    struct link_watch *w = link_watch.lookup(&zero);

    if (!w || !w->pending)
        return 0;
    w->pending = 0;
    *gid = w->gid;
    return w->down;
}

/* Tail call (arn_progs[ARN_PROG_TX]) of xdp_switch for a data packet that met a group with
 * no live member: xdp_switch has counted it as dropped (DROP_MEMBERS_DOWN) and checked
 * ARN_F_GENERATE and that its ingress port is a fabric link. It is turned into a
 * WITHDRAW notice for the route's prefix sent back out of its ingress port (XDP_TX) to the
 * upstream switch that sent it. Rate limit: one notice per (switch, route, ingress port)
 * per arn_cfg.interval_ns (arn_sent, claimed by compare-and-swap, so two CPUs never both
 * send); a packet within the interval is dropped as before (ARN_S_SUPPRESSED). The frame
 * is resized to ARN_FRAME_LEN and rewritten whole: Ethernet to the packet's source MAC
 * from the port's, IPv4 (TTL 1, DF, CS6, header checksum) from the switch's address on
 * the port to the neighbour's (arn_ports; 0.0.0.0 / 255.255.255.255 when not configured),
 * UDP ARN_UDP_PORT both ways without a checksum (0: allowed for IPv4, as the agent's).
 * XDP_TX and not a redirect to the ingress port (as ARP replies): only fabric ports send
 * notices, and both ends of a switch-switch link run this program, which XDP_TX on veth
 * needs (the peer's NAPI is kicked only then). */
int xdp_notice_tx(struct xdp_md *ctx)
{
    struct route_key rkey = {};
    struct arn_sent_key skey = {};
    struct arn_cfg *cfg;
    struct arn_port *ap;
    struct arn_switch *as;
    struct route_val *rv;
    struct ethhdr *eth;
    struct iphdr *iph;
    struct udphdr *udph;
    struct arn_hdr *h;
    void *data, *data_end;
    __u64 now, prev, *last;
    struct port_info *port;
    struct port_stats *ps;
    __u32 zero = 0, seq = 0, switch_id, slot, daddr, ifindex = ctx->ingress_ifindex;
    __u64 now_ns = 0, *nowp = &now_ns;
    __u8 dmac[6];

    data = (void *)(long)ctx->data;
    data_end = (void *)(long)ctx->data_end;
    iph = data + sizeof(struct ethhdr);
    port = rl_port(ifindex);
    if (!port || (void *)(iph + 1) > data_end)
        return rl_exit(ctx, XDP_DROP);
    daddr = iph->daddr;
    switch_id = port->switch_id;
    slot = port->slot;
    ps = port_stats.lookup(&slot);
    cfg = arn_cfg.lookup(&zero);
    ap = arn_ports.lookup(&slot);
    if (!cfg || !ap)
        return rl_exit(ctx, XDP_DROP);
    rl_dst_key(&rkey, switch_id, daddr);
    rv = routes.lookup(&rkey);
    if (!rv)
        return rl_exit(ctx, XDP_DROP);
    skey.switch_id = switch_id;
    skey.prefix = rv->prefix;
    skey.plen = rv->plen;
    skey.ifindex = ifindex;
    now = rl_now(nowp);
    last = arn_sent.lookup(&skey);
    if (last) {
        prev = *(volatile __u64 *)last;
        if ((__s64)(now - prev) < (__s64)cfg->interval_ns ||
            __sync_val_compare_and_swap(last, prev, now) != prev) {
            rl_arn_stat(ARN_S_SUPPRESSED);
            return rl_exit(ctx, XDP_DROP);
        }
    } else if (arn_sent.insert(&skey, &now)) {   /* another CPU inserted it first */
        rl_arn_stat(ARN_S_SUPPRESSED);
        return rl_exit(ctx, XDP_DROP);
    }

    eth = data;
    __builtin_memcpy(dmac, eth->h_source, 6);
    if (bpf_xdp_adjust_tail(ctx, (int)ARN_FRAME_LEN - (int)(data_end - data))) {
        rl_arn_stat(ARN_S_TX_FAILED);
        return rl_exit(ctx, XDP_DROP);
    }
    data = (void *)(long)ctx->data;
    data_end = (void *)(long)ctx->data_end;
    eth = data;
    iph = (void *)(eth + 1);
    udph = (void *)(iph + 1);
    h = (void *)(udph + 1);
    if ((void *)(h + 1) > data_end) {
        rl_arn_stat(ARN_S_TX_FAILED);
        return rl_exit(ctx, XDP_DROP);
    }
    as = arn_switch.lookup(&switch_id);
    if (as)
        seq = (__u32)(__sync_fetch_and_add(&as->seq, 1) + 1);

    __builtin_memcpy(eth->h_dest, dmac, 6);
    __builtin_memcpy(eth->h_source, port->mac, 6);
    eth->h_proto = rl_htons(RL_ETH_P_IP);
    iph->version = 4;
    iph->ihl = 5;
    iph->tos = ARN_TOS;
    iph->tot_len = rl_htons(ARN_FRAME_LEN - sizeof(*eth));
    iph->id = 0;
    iph->frag_off = rl_htons(0x4000);   /* DF */
    iph->ttl = 1;                        /* one link: the neighbour consumes it */
    iph->protocol = RL_IPPROTO_UDP;
    iph->check = 0;
    iph->saddr = ap->src_ip;
    iph->daddr = ap->dst_ip ? ap->dst_ip : 0xffffffffU;
    iph->check = rl_ip_csum(iph);
    udph->source = rl_htons(ARN_UDP_PORT);
    udph->dest = rl_htons(ARN_UDP_PORT);
    udph->len = rl_htons(sizeof(*udph) + ARN_HDR_LEN);
    udph->check = 0;
    h->magic = rl_htonl(ARN_MAGIC);
    h->version = ARN_VERSION;
    h->type = ARN_T_WITHDRAW;
    h->reason = ARN_R_LINK_DOWN;
    h->flags = ARN_NF_XDP;
    h->seq = rl_htonl(seq);
    h->reporter = rl_htonl(switch_id);
    h->nexthop = 0;
    h->prefix = rv->prefix;
    h->plen = rv->plen;
    h->_pad[0] = 0;
    h->_pad[1] = 0;
    h->_pad[2] = 0;
    h->hold_ms = rl_htonl(cfg->hold_ms);
    h->metric = 0;
    h->port = rl_htonl(ifindex);
    rl_arn_stat(ARN_S_SENT);
    RL_STAMP(switch_id, notice_ns, nowp);
    if (ps) {
        ps->tx_packets++;
        ps->tx_bytes += ARN_FRAME_LEN;
    }
    return rl_exit(ctx, XDP_TX);
}

/* Tail call (arn_progs[ARN_PROG_RX]) of xdp_switch for a UDP datagram to ARN_UDP_PORT that
 * rl_notice_ours() claimed: consumption on, and a fabric port or the notice magic, and no
 * flow list (those go on to the agent). Claimed before the route cache, so a notice
 * addressed to the switch itself is consumed too, never passed up.
 * A notice from the neighbour on port slot excludes, for destinations in its prefix, the
 * members of this switch's route covering the prefix whose egress port is slot: until now
 * + hold_ms (0: until a RESTORE), in arn_excl; a RESTORE lifts them. The switch's
 * switch_cfg.arn_gen is bumped AFTER the change (rl_route's cache protocol). Consumed notices
 * are dropped, counted in arn_stats (not as a drop reason: no data was lost); malformed
 * ones (length, magic, version, type, plen > 32) and notices on other ports too. */
int xdp_notice_rx(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    struct iphdr *iph = data + sizeof(struct ethhdr);
    struct udphdr *udph;
    struct arn_hdr *h;
    struct port_info *port;
    struct route_key key = {};
    struct arn_cfg *cfg;
    struct arn_port *ap;
    struct arn_switch *as;
    struct switch_cfg *sw;
    struct arn_excl *e, ne = {};
    struct route_val *rv;
    struct group *grp;
    __u32 zero = 0, switch_id, slot, plen, prefix, ulen, hold;
    __u64 bits, until = 0, now_ns = 0, *nowp = &now_ns;
    int fabric, same;

    cfg = arn_cfg.lookup(&zero);
    port = rl_port(ctx->ingress_ifindex);
    if (!cfg || !port || (void *)(iph + 1) > data_end)
        return rl_exit(ctx, XDP_DROP);
    udph = (void *)iph + (iph->ihl & 0xf) * 4;
    h = (void *)(udph + 1);
    switch_id = port->switch_id;
    slot = port->slot;
    ap = arn_ports.lookup(&slot);
    fabric = ap && (ap->flags & ARN_PORT_F_FABRIC);
    if ((void *)(h + 1) > data_end || h->magic != rl_htonl(ARN_MAGIC)) {
        rl_arn_stat(fabric ? ARN_S_MALFORMED : ARN_S_NOT_FABRIC);
        return rl_exit(ctx, XDP_DROP);
    }
    if (!fabric) {
        rl_arn_stat(ARN_S_NOT_FABRIC);
        return rl_exit(ctx, XDP_DROP);
    }
    ulen = rl_ntohs(udph->len);
    if (ulen < sizeof(*udph) + ARN_HDR_LEN || ulen > rl_ntohs(iph->tot_len) - iph->ihl * 4 ||
        h->version != ARN_VERSION || (h->type != ARN_T_WITHDRAW && h->type != ARN_T_RESTORE) ||
        h->plen > 32) {
        rl_arn_stat(ARN_S_MALFORMED);
        return rl_exit(ctx, XDP_DROP);
    }

    plen = h->plen;
    prefix = h->prefix & rl_htonl(plen ? ~0U << ((32 - plen) & 31) : 0);
    key.prefixlen = 32 + plen;
    key.switch_id_be = rl_htonl(switch_id);
    key.dst = prefix;
    rv = routes.lookup(&key);
    grp = rv ? groups.lookup(&rv->group_id) : NULL;
    bits = grp ? rl_members_by_peer(grp, slot, ap ? ap->peer_switch : 0) : 0;
    if (!rv || !bits) {
        rl_arn_stat(ARN_S_IGNORED);
        return rl_exit(ctx, XDP_DROP);
    }
    as = arn_switch.lookup(&switch_id);
    e = arn_excl.lookup(&key);
    same = e && e->prefix == prefix && e->plen == plen;
    if (h->type == ARN_T_WITHDRAW) {
        hold = rl_ntohl(h->hold_ms);
        until = hold ? rl_now(nowp) + (__u64)hold * 1000000ULL : 0;
        if (same && e->group_id == rv->group_id) {
            rl_excl_set(e, bits, until);
        } else {
            ne.group_id = rv->group_id;
            ne.prefix = prefix;
            ne.plen = plen;
            rl_excl_set(&ne, bits, until);
            if (arn_excl.update(&key, &ne) == 0 && !same && as)
                __sync_fetch_and_add(&as->excl, 1);
        }
        rl_arn_stat(ARN_S_WITHDRAW_RX);
        RL_STAMP(switch_id, excl_ns, nowp);
    } else {
        if (same && e->group_id == rv->group_id) {
            e->avoid &= ~bits;   /* the others keep their expiry */
            if (!e->avoid && arn_excl.delete(&key) == 0 && as)
                __sync_fetch_and_add(&as->excl, -1);
        }
        rl_arn_stat(ARN_S_RESTORE_RX);
    }
    sw = switches.lookup(&switch_id);
    if (sw)
        __sync_fetch_and_add(&sw->arn_gen, 1);
    return rl_exit(ctx, (cfg->flags & ARN_F_PASS) ? XDP_PASS : XDP_DROP);
}

/* Members of grp whose link the watch finds down; every member is asked. */
static __always_inline __u64 rl_links_down(struct xdp_md *ctx, const struct group *grp)
{
    __u64 mask = 0, down;
    __u32 i, n = grp->n_members;

#pragma clang loop unroll(disable)
    for (i = 0; i < WCMP_SLOTS; i++) {
        if (i >= n)
            break;
        down = rl_link_up(ctx, grp->eslots[i]) ? 0 : ~0ULL;
        RL_OPAQUE(down);          /* one state per iteration, not one per answer so far */
        mask |= down & (1ULL << i);
        RL_OPAQUE(mask);
    }
    return mask;
}

/* Tail call (arn_progs[ARN_PROG_LINK_SCAN]) of xdp_switch, whose pick's link the watch
 * found down before the agent did: every member of the group is asked, the answer left in
 * link_watch for this CPU, and xdp_switch runs the packet again (arn_progs[ARN_PROG_SWITCH]),
 * now with those members dead: re-picked as the agent's down mask would re-pick it, or, if
 * none is left, a dead group (and a notice upstream). The rare path gets its own program:
 * inline, the scan multiplied the states the verifier walks after it past its limit. */
int xdp_link_scan(struct xdp_md *ctx)
{
    __u32 zero = 0;
    struct link_watch *w = link_watch.lookup(&zero);
    struct group *grp;

    if (!w)
        return rl_exit(ctx, XDP_DROP);
    grp = groups.lookup(&w->gid);
    if (grp) {
        w->down = rl_links_down(ctx, grp) | (1ULL << (w->member & 63));
        w->pending = 1;
        arn_progs.call(ctx, ARN_PROG_SWITCH);
    }
    w->pending = 0;          /* no program to run again: the packet is lost as a redirect
                              * into the dead link would have lost it */
    return rl_drop(ctx, NULL, DROP_MEMBERS_DOWN);
}

/* Trivial program for the far end of a switch link (host NICs): gives that veth
 * an XDP program so frames the switch sends it with XDP_TX are delivered (ARP replies
 * on PORT_F_ARP_XDP_TX ports; everything else reaches it by redirect). */
int xdp_pass(struct xdp_md *ctx)
{
    return XDP_PASS;
}

/* tc ingress (clsact) of every switch port in real-queue mode: a frame rl_handoff
 * passed up goes to the egress port's transmit path, through its qdisc, once the gap
 * that carried the handoff is gone. Anything else (frames for the switch itself, ARP the
 * kernel answers) goes on to the stack; so does a frame that only looks like a handoff
 * (a sender cannot know handoff_key), where the stack drops it as a bad IPv4 header. */
int tc_handoff(struct __sk_buff *skb)
{
    void *data = (void *)(long)skb->data;
    void *data_end = (void *)(long)skb->data_end;
    struct handoff *h = data + sizeof(struct ethhdr);
    __u32 zero = 0, ifindex, tc_class;
    __u64 *key;

    if ((void *)(h + 1) > data_end || h->magic != HANDOFF_MAGIC)
        return TC_ACT_OK;
    key = handoff_key.lookup(&zero);
    if (!key || h->key != *key)
        return TC_ACT_OK;
    ifindex = h->ifindex;
    tc_class = h->tc_class;
    if (bpf_skb_adjust_room(skb, -(int)HANDOFF_GAP, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_NO_CSUM_RESET))
        return TC_ACT_SHOT;
    if (tc_class)
        skb->priority = tc_class;
    return bpf_redirect(ifindex, 0);
}

int xdp_switch(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    __u32 ifindex = ctx->ingress_ifindex;
    __u64 len = data_end - data;
    struct hdr_cursor nh = { .pos = data };
    struct port_info *port;
    struct port_stats *ps;
    struct switch_cfg *sw;
    struct group *grp;
    struct member *m;
    struct pkt_count *mc;
    struct flow f = {};
    struct ethhdr *eth;
    struct iphdr *iph;
    struct udphdr *udph;
    struct tcphdr *tcph;
    struct ib_bth *bth;
    __u32 switch_id, slot, gid, idx, midx, fields, seed, sw_fields, sw_hash;
    __u64 avoid = 0, dead, live, all, now = 0, placed = 0, rescan;
    __u32 rflags, rescan_gid = 0;
    int proto;

    port = rl_port(ifindex);
    if (!port)
        return rl_drop(ctx, NULL, DROP_UNKNOWN_PORT);
    slot = port->slot;
    switch_id = port->switch_id;
    rescan = rl_watch_rescanned(&rescan_gid);   /* a second run counts nothing twice */
    ps = port_stats.lookup(&slot);
    if (ps) {
        ps->rx_packets += !rescan;
        ps->rx_bytes += len & -(__u64)!rescan;
    }
    if (port->flags & PORT_F_DOWN)
        return rl_drop(ctx, ps, DROP_PORT_DOWN);

    proto = parse_ethhdr(&nh, data_end, &eth);
    if (proto < 0)
        return rl_drop(ctx, ps, DROP_PARSE_ERROR);
    if (proto == RL_ETH_P_ARP)
        return handle_arp(ctx, &nh, data_end, eth, port, ps, ifindex);
    if (proto == RL_ETH_P_MAC_CONTROL) {   /* PFC from the neighbour: recorded, not forwarded */
        struct pfc_port *pp = pfc_port.lookup(&slot);

        if (pp && pfc_receive(pp, data, data_end, rl_now(&now)) == 0)
            return rl_exit(ctx, XDP_DROP);
        return rl_drop(ctx, ps, DROP_NOT_IPV4);
    }
    if (proto != RL_ETH_P_IP)
        return rl_drop(ctx, ps, DROP_NOT_IPV4);
    if (eth->h_dest[0] & 1)
        return rl_drop(ctx, ps, DROP_NOT_UNICAST);

    proto = parse_iphdr(&nh, data_end, &iph);
    if (proto < 0)
        return rl_drop(ctx, ps, DROP_PARSE_ERROR);
    f.saddr = iph->saddr;
    f.daddr = iph->daddr;
    f.proto = proto;
    /* fragments carry no (or only the first) L4 header: hash them on L3 only,
     * so all fragments of a datagram take the same member */
    if (!(iph->frag_off & rl_htons(RL_IP_MF | RL_IP_OFFSET))) {
        if (proto == RL_IPPROTO_UDP) {
            int dport = parse_udphdr(&nh, data_end, &udph);

            if (dport < 0)
                return rl_drop(ctx, ps, DROP_PARSE_ERROR);
            f.sport = rl_ntohs(udph->source);
            f.dport = dport;
            if (dport == ROCE_V2_UDP_PORT) {
                if (parse_bth(&nh, data_end, &bth) < 0)
                    return rl_drop(ctx, ps, DROP_PARSE_ERROR);
                flow_set_bth(&f, bth);
            } else if (dport == ARN_UDP_PORT) {   /* a notice (rl_notice_rx) */
                if (rl_notice_ours(slot, udph, data_end)) {
                    arn_progs.call(ctx, ARN_PROG_RX);
                    return rl_exit(ctx, XDP_DROP);   /* no program installed */
                }
            }
        } else if (proto == RL_IPPROTO_TCP) {
            if (parse_tcphdr(&nh, data_end, &tcph) < 0)
                return rl_drop(ctx, ps, DROP_PARSE_ERROR);
            f.sport = rl_ntohs(tcph->source);
            f.dport = rl_ntohs(tcph->dest);
        }
    }

    sw = switches.lookup(&switch_id);
    /* The flow hash under the switch's default fields, computed now although only the
     * hashing modes use it (and only if the group has no fields of its own): its ~50-cycle
     * multiply chain then runs alongside the lookups below instead of after them. */
    seed = sw ? sw->hash_seed : 0;
    sw_fields = sw ? sw->hash_fields : 0;
    if (!sw_fields)
        sw_fields = HASH_FIELDS_5TUPLE;
    sw_hash = flow_hash(&f, sw_fields, seed, ifindex);

    rflags = rl_route(sw, switch_id, f.daddr, &gid, &avoid, &now);
    if (rflags & RC_F_LOCAL)
        return rl_exit(ctx, XDP_PASS);

    if (iph->ttl <= 1)
        return rl_drop(ctx, ps, DROP_TTL_EXPIRED);

    if (sw && (sw->flags & SW_F_TM) && (rflags & RC_F_TM)) {   /* static traffic matrix
                                                                 * overrides every mode */
        struct tm_key tk = {};
        struct tm_entry *te;

        tk.switch_id = switch_id;
        tk.saddr = f.saddr;
        tk.daddr = f.daddr;
        tk.sport = f.sport;
        tk.dport = f.dport;
        tk.proto = f.proto;
        te = tm.lookup(&tk);
        if (te && te->m.ifindex) {
            __u32 eif = te->m.ifindex;
            struct port_info *ep = rl_port(eif);

            if (ep && (ep->flags & PORT_F_DOWN))
                goto route;   /* entry's egress is down: fall back to the route */
            __sync_fetch_and_add(&te->packets, 1);
            __sync_fetch_and_add(&te->bytes, len);
            rl_flow_seen(&f, te->m.egress_slot, len, &now);
            return rl_transmit(ctx, eth, iph, &te->m, len, NULL, &now, slot, 0);
        }
    }

route:
    if (!(rflags & RC_F_ROUTE))
        return rl_drop(ctx, ps, DROP_NO_ROUTE);

    grp = groups.lookup(&gid);
    if (!grp || grp->n_members == 0)
        return rl_drop(ctx, ps, DROP_NO_MEMBER);

    /* liveness: down members are never used; the route's avoid mask (remote failure,
     * ARN) is honoured unless it would leave nothing live */
    all = rl_member_mask(grp->n_members);
    dead = grp->down_mask | (rescan & -(__u64)(gid == rescan_gid));
    if (!(all & ~dead))     /* nowhere to go: dropped, and maybe a notice upstream */
        return rl_dead_group(ctx, ps, switch_id, slot, &now);
    if (all & ~(dead | avoid)) {
        if (avoid & all & ~dead)   /* the mask steers this packet: the reaction's last step */
            RL_STAMP(switch_id, avoid_ns, &now);
        dead |= avoid;
    }
    live = all & ~dead;

    fields = grp->hash_fields;
    if (!fields)
        fields = sw_fields;

    idx = lb_select(grp, gid, grp->n_members, &f, fields, seed, ifindex, port->lbn, dead, live,
                    &now, sw_fields, sw_hash, &placed);
    if (idx >= MAX_MEMBERS)
        return rl_drop(ctx, ps, DROP_NO_MEMBER);
    midx = grp->member_base + idx;
    m = members.lookup(&midx);
    if (!m || !m->ifindex)
        return rl_drop(ctx, ps, DROP_NO_MEMBER);
    if (!rescan && rl_watching() && !rl_link_up(ctx, m->egress_slot))
        return rl_watch_rescan(ctx, gid, idx);
    mc = member_stats.lookup(&midx);
    rl_flow_seen(&f, m->egress_slot, len, &now);
    return rl_transmit(ctx, eth, iph, m, len, mc, &now, slot, placed);
}
