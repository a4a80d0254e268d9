/* railab data plane: header rewrites and checksum fix-ups. */
#ifndef RAILAB_REWRITE_H
#define RAILAB_REWRITE_H

#include "parse.h"

static __always_inline void rewrite_macs(struct ethhdr *eth, const __u8 *dmac, const __u8 *smac)
{
    __builtin_memcpy(eth->h_dest, dmac, 6);
    __builtin_memcpy(eth->h_source, smac, 6);
}

/* TTL -= 1 with an incremental header checksum update (RFC 1624; the same
 * arithmetic as the kernel's ip_decrease_ttl): TTL is the high byte of its
 * 16-bit word, so the word drops by 0x0100 and the checksum rises by it. */
static __always_inline void ip_decrease_ttl(struct iphdr *iph)
{
    __u32 check = iph->check;

    check += rl_htons(0x0100);
    iph->check = (__u16)(check + (check >= 0xFFFF));
    iph->ttl--;
}

/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') for one 16-bit word changing m -> m'. */
static __always_inline void rl_csum_replace2(__u16 *check, __u16 old, __u16 new)
{
    __u32 sum = (__u16)~*check;

    sum += (__u16)~old;
    sum += new;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    *check = (__u16)~sum;
}

/* Congestion Experienced: set ECN = 11 on an ECT(0)/ECT(1) packet, fixing the header
 * checksum incrementally. Returns 1 if the packet was marked, 0 if it is not ECN-capable
 * (or already CE). tos shares its 16-bit word with version/ihl. */
static __always_inline int ip_set_ce(struct iphdr *iph)
{
    __u8 tos = iph->tos;
    __u8 *first = (__u8 *)iph;   /* version/ihl byte */
    __u16 old, new;

    if ((tos & 3) == 0 || (tos & 3) == 3)
        return 0;
    /* the word as it sits in memory (network order), built from values, not re-read */
    old = rl_htons(((__u16)first[0] << 8) | tos);
    new = rl_htons(((__u16)first[0] << 8) | (tos | 3));
    iph->tos = tos | 3;
    rl_csum_replace2(&iph->check, old, new);
    return 1;
}

/* Header checksum of a 20-byte IPv4 header (no options) whose check field is 0. */
static __always_inline __u16 rl_ip_csum(const struct iphdr *iph)
{
    const __u16 *w = (const __u16 *)iph;
    __u32 sum = 0;
    int i;

#pragma unroll
    for (i = 0; i < 10; i++)
        sum += w[i];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return (__u16)~sum;
}

#endif /* RAILAB_REWRITE_H */
