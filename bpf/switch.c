/* railab switch: the XDP entry program shared by every switch of a lab.
 *
 * Loaded once per lab (bcc, src_file + -D size cflags) and attached to every
 * switch port. The ingress ifindex is lab-unique, so `ports` tells which switch
 * and which port slot a frame arrived on. Pipeline:
 *
 *   port lookup (unknown -> drop unknown_port) -> rx counters -> port down?
 *   Ethernet -> ARP: request for an owned address on this port -> reply sent back
 *                    out of the ingress port (redirect to it, or XDP_TX per port flag),
 *                    any other ARP -> XDP_PASS (kernel/agent may learn from it)
 *            -> not IPv4 (IPv6, LLDP, VLAN, ...) -> drop not_ipv4 (documented choice:
 *               kernel IP forwarding is off in switch namespaces, nothing would use it)
 *   IPv4 -> L4 ports (TCP/UDP, not for fragments) -> RoCEv2 BTH (UDP 4791)
 *        -> dst owned by the switch -> XDP_PASS
 *        -> TTL <= 1 -> drop ttl_expired
 *        -> LPM (switch_id, dst) -> group -> member (lb.h) -> MAC rewrite, TTL-1
 *        -> bpf_redirect(member ifindex)
 *
 * Every exit goes through rl_exit() (per-verdict counters); drops go through
 * rl_drop() (per-port and global per-reason counters) which calls rl_exit().
 * bcc only rewrites map accesses in this file, so all map lookups live here.
 */
#include <uapi/linux/bpf.h>
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

static __always_inline int rl_exit(struct xdp_md *ctx, int action)
{
    __u32 key = action;
    struct pkt_count *v;

    if (key >= RL_XDP_ACTION_MAX)
        key = XDP_ABORTED;
    v = verdict_stats.lookup(&key);
    if (v) {
        v->packets++;
        v->bytes += ctx->data_end - ctx->data;
    }
    return action;
}

static __always_inline int rl_drop(struct xdp_md *ctx, struct port_stats *ps, __u32 reason)
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
    return rl_exit(ctx, XDP_DROP);
}

static __always_inline int rl_lookup_route(__u32 switch_id, __u32 daddr, __u32 *group_id)
{
    struct route_key key = {};
    struct route_val *rv;

    key.prefixlen = 64;
    key.switch_id_be = rl_htonl(switch_id);
    key.dst = daddr;
    rv = routes.lookup(&key);
    if (!rv)
        return -1;
    *group_id = rv->group_id;
    return 0;
}

static __always_inline int handle_arp(struct xdp_md *ctx, struct hdr_cursor *nh, void *data_end,
                                      struct ethhdr *eth, struct port_info *port,
                                      struct port_stats *ps, __u32 ifindex)
{
    struct arp_eth_ipv4 *arp;
    struct port_addr_key key = {};
    __u32 gid;
    int op;

    op = parse_arp(nh, data_end, &arp);
    if (op < 0)
        return rl_drop(ctx, ps, DROP_PARSE_ERROR);
    if (op != RL_ARPOP_REQUEST || !arp_is_plain_request(arp))
        return rl_exit(ctx, XDP_PASS);

    key.ifindex = ifindex;
    key.ip = arp_target_ip(arp);
    if (!port_addrs.lookup(&key)) {
        if (!(port->flags & PORT_F_PROXY_ARP) ||
            rl_lookup_route(port->switch_id, key.ip, &gid) < 0)
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

/* Trivial program for the far end of a switch link (host NICs): gives that veth
 * an XDP program so frames the switch sends it with XDP_TX are delivered. */
int xdp_pass(struct xdp_md *ctx)
{
    return XDP_PASS;
}

int xdp_switch(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    __u32 ifindex = ctx->ingress_ifindex;
    __u64 len = data_end - data;
    struct hdr_cursor nh = { .pos = data };
    struct port_info *port;
    struct port_stats *ps, *eps;
    struct switch_cfg *sw;
    struct group *grp;
    struct member *m;
    struct pkt_count *mc;
    struct local_addr_key lkey = {};
    struct flow f = {};
    struct ethhdr *eth;
    struct iphdr *iph;
    struct udphdr *udph;
    struct tcphdr *tcph;
    struct ib_bth *bth;
    __u32 switch_id, slot, gid, idx, midx, fields, seed;
    int proto;

    port = ports.lookup(&ifindex);
    if (!port)
        return rl_drop(ctx, NULL, DROP_UNKNOWN_PORT);
    slot = port->slot;
    switch_id = port->switch_id;
    ps = port_stats.lookup(&slot);
    if (ps) {
        ps->rx_packets++;
        ps->rx_bytes += len;
    }
    if (port->flags & PORT_F_DOWN)
        return rl_drop(ctx, ps, DROP_PORT_DOWN);

    proto = parse_ethhdr(&nh, data_end, &eth);
    if (proto < 0)
        return rl_drop(ctx, ps, DROP_PARSE_ERROR);
    if (proto == RL_ETH_P_ARP)
        return handle_arp(ctx, &nh, data_end, eth, port, ps, ifindex);
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
            }
        } else if (proto == RL_IPPROTO_TCP) {
            if (parse_tcphdr(&nh, data_end, &tcph) < 0)
                return rl_drop(ctx, ps, DROP_PARSE_ERROR);
            f.sport = rl_ntohs(tcph->source);
            f.dport = rl_ntohs(tcph->dest);
        }
    }

    lkey.switch_id = switch_id;
    lkey.ip = f.daddr;
    if (local_addrs.lookup(&lkey))
        return rl_exit(ctx, XDP_PASS);

    if (iph->ttl <= 1)
        return rl_drop(ctx, ps, DROP_TTL_EXPIRED);

    if (rl_lookup_route(switch_id, f.daddr, &gid) < 0)
        return rl_drop(ctx, ps, DROP_NO_ROUTE);

    grp = groups.lookup(&gid);
    if (!grp || grp->n_members == 0)
        return rl_drop(ctx, ps, DROP_NO_MEMBER);

    sw = switches.lookup(&switch_id);
    seed = sw ? sw->hash_seed : 0;
    fields = grp->hash_fields;
    if (!fields)
        fields = sw ? sw->hash_fields : 0;
    if (!fields)
        fields = HASH_FIELDS_5TUPLE;

    idx = lb_pick(grp->mode, grp->n_members, &f, fields, seed, ifindex, port->lbn);
    if (idx >= MAX_MEMBERS)
        return rl_drop(ctx, ps, DROP_NO_MEMBER);
    midx = gid * MAX_MEMBERS + idx;
    m = members.lookup(&midx);
    if (!m || !m->ifindex)
        return rl_drop(ctx, ps, DROP_NO_MEMBER);

    rewrite_macs(eth, m->dmac, m->smac);
    ip_decrease_ttl(iph);

    mc = member_stats.lookup(&midx);
    if (mc) {
        mc->packets++;
        mc->bytes += len;
    }
    slot = m->egress_slot;
    eps = port_stats.lookup(&slot);
    if (eps) {
        eps->tx_packets++;
        eps->tx_bytes += len;
    }
    return rl_exit(ctx, bpf_redirect(m->ifindex, 0));
}
