/* railab data plane: ARP responder for the switch's own addresses.
 *
 * The switch answers ARP requests for an address it owns on the ingress port
 * (or, on PORT_F_PROXY_ARP ports, for anything it has a route to) by turning the
 * request into a reply in place and sending it back out of the ingress port: a
 * redirect to that port (ndo_xdp_xmit; see the comment in switch.c), or XDP_TX on
 * ports with PORT_F_ARP_XDP_TX.
 */
#ifndef RAILAB_ARP_H
#define RAILAB_ARP_H

#include "parse.h"

static __always_inline int arp_is_plain_request(const struct arp_eth_ipv4 *arp)
{
    __u32 sip, tip;

    /* gratuitous ARP (sender == target) announces, it does not ask: ignore it.
     * (no __builtin_memcmp: clang turns it into a libc call BPF cannot make) */
    __builtin_memcpy(&sip, arp->ar_sip, 4);
    __builtin_memcpy(&tip, arp->ar_tip, 4);
    return sip != tip;
}

static __always_inline __u32 arp_target_ip(const struct arp_eth_ipv4 *arp)
{
    __u32 ip;

    __builtin_memcpy(&ip, arp->ar_tip, 4);
    return ip;   /* network order */
}

/* Rewrite the request into "ar_tip is-at mac", addressed to the requester. */
static __always_inline void arp_make_reply(struct ethhdr *eth, struct arp_eth_ipv4 *arp,
                                           const __u8 *mac)
{
    __u8 tip[4];

    __builtin_memcpy(tip, arp->ar_tip, 4);
    __builtin_memcpy(eth->h_dest, arp->ar_sha, 6);
    __builtin_memcpy(eth->h_source, mac, 6);
    arp->ar_op = rl_htons(RL_ARPOP_REPLY);
    __builtin_memcpy(arp->ar_tha, arp->ar_sha, 6);
    __builtin_memcpy(arp->ar_tip, arp->ar_sip, 4);
    __builtin_memcpy(arp->ar_sha, mac, 6);
    __builtin_memcpy(arp->ar_sip, tip, 4);
}

#endif /* RAILAB_ARP_H */
