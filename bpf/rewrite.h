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

#endif /* RAILAB_REWRITE_H */
