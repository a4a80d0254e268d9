/* railab data plane: header parsers (xdp-tutorial style).
 *
 * Each parser takes a header cursor, bounds-checks against data_end, stores a
 * pointer to the header, advances the cursor, and returns the next protocol
 * (host order) or -1 if the header is truncated or malformed.
 */
#ifndef RAILAB_PARSE_H
#define RAILAB_PARSE_H

#include "railab_consts.h"

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define rl_htons(x) ((__u16)__builtin_bswap16((__u16)(x)))
#define rl_htonl(x) ((__u32)__builtin_bswap32((__u32)(x)))
#else
#define rl_htons(x) ((__u16)(x))
#define rl_htonl(x) ((__u32)(x))
#endif
#define rl_ntohs(x) rl_htons(x)
#define rl_ntohl(x) rl_htonl(x)

struct hdr_cursor {
    void *pos;
};

/* ARP for Ethernet + IPv4 (RFC 826), 28 bytes */
struct arp_eth_ipv4 {
    __be16 ar_hrd;
    __be16 ar_pro;
    __u8   ar_hln;
    __u8   ar_pln;
    __be16 ar_op;
    __u8   ar_sha[6];
    __u8   ar_sip[4];
    __u8   ar_tha[6];
    __u8   ar_tip[4];
} __attribute__((packed));

/* InfiniBand Base Transport Header (RoCEv2 payload of UDP 4791), 12 bytes */
struct ib_bth {
    __u8   opcode;
    __u8   flags;         /* SE(1) M(1) PadCnt(2) TVer(4) */
    __be16 pkey;
    __be32 dqp_word;      /* F/B ECN + reserved (8) | destination QP (24) */
    __be32 psn_word;      /* AckReq(1) reserved(7) | PSN (24) */
};

/* What the pipeline keeps of a parsed packet (also the hash input). */
struct flow {
    __u32 saddr;          /* network order */
    __u32 daddr;          /* network order */
    __u16 sport;          /* host order, 0 if none (fragment, not TCP/UDP) */
    __u16 dport;
    __u8  proto;
    __u8  has_bth;
    __u8  bth_opcode;
    __u8  bth_flags;
    __u16 bth_pkey;       /* host order */
    __u16 _pad;
    __u32 bth_dqp;        /* host order, 24 bits */
    __u32 bth_psn;        /* host order, 24 bits */
};

static __always_inline int parse_ethhdr(struct hdr_cursor *nh, void *data_end,
                                        struct ethhdr **ethhdr)
{
    struct ethhdr *eth = nh->pos;

    if ((void *)(eth + 1) > data_end)
        return -1;
    nh->pos = eth + 1;
    *ethhdr = eth;
    return rl_ntohs(eth->h_proto);
}

static __always_inline int parse_arp(struct hdr_cursor *nh, void *data_end,
                                     struct arp_eth_ipv4 **arphdr)
{
    struct arp_eth_ipv4 *arp = nh->pos;

    if ((void *)(arp + 1) > data_end)
        return -1;
    if (arp->ar_hrd != rl_htons(RL_ARPHRD_ETHER) || arp->ar_pro != rl_htons(RL_ETH_P_IP) ||
        arp->ar_hln != 6 || arp->ar_pln != 4)
        return -1;
    nh->pos = arp + 1;
    *arphdr = arp;
    return rl_ntohs(arp->ar_op);
}

/* returns the IP protocol; options are skipped (ihl honoured). A total length shorter
 * than the header or longer than the frame is a parse error, as a router must treat it
 * (RFC 1812 5.2.2): forwarded, it would carry the next hop garbage or a cut packet.
 * Longer frames are fine (Ethernet padding). */
static __always_inline int parse_iphdr(struct hdr_cursor *nh, void *data_end,
                                       struct iphdr **iphdr)
{
    struct iphdr *iph = nh->pos;
    __u32 tot_len;
    int hdrsize;

    if ((void *)(iph + 1) > data_end)
        return -1;
    if (iph->version != 4 || iph->ihl < 5)
        return -1;
    hdrsize = iph->ihl * 4;
    if (nh->pos + hdrsize > data_end)
        return -1;
    tot_len = rl_ntohs(iph->tot_len);
    if (tot_len < (__u32)hdrsize || (void *)iph + tot_len > data_end)
        return -1;
    nh->pos += hdrsize;
    *iphdr = iph;
    return iph->protocol;
}

/* returns the UDP destination port (host order): the "next protocol" of UDP */
static __always_inline int parse_udphdr(struct hdr_cursor *nh, void *data_end,
                                        struct udphdr **udphdr)
{
    struct udphdr *h = nh->pos;

    if ((void *)(h + 1) > data_end)
        return -1;
    nh->pos = h + 1;
    *udphdr = h;
    return rl_ntohs(h->dest);
}

/* returns 0 (TCP payload has no protocol of interest) */
static __always_inline int parse_tcphdr(struct hdr_cursor *nh, void *data_end,
                                        struct tcphdr **tcphdr)
{
    struct tcphdr *h = nh->pos;
    int len;

    if ((void *)(h + 1) > data_end)
        return -1;
    len = h->doff * 4;
    if (len < (int)sizeof(*h))
        return -1;
    if (nh->pos + len > data_end)
        return -1;
    nh->pos += len;
    *tcphdr = h;
    return 0;
}

/* returns the BTH opcode */
static __always_inline int parse_bth(struct hdr_cursor *nh, void *data_end,
                                     struct ib_bth **bthhdr)
{
    struct ib_bth *b = nh->pos;

    if ((void *)(b + 1) > data_end)
        return -1;
    nh->pos = b + 1;
    *bthhdr = b;
    return b->opcode;
}

static __always_inline void flow_set_bth(struct flow *f, const struct ib_bth *b)
{
    f->has_bth = 1;
    f->bth_opcode = b->opcode;
    f->bth_flags = b->flags;
    f->bth_pkey = rl_ntohs(b->pkey);
    f->bth_dqp = rl_ntohl(b->dqp_word) & 0xffffff;
    f->bth_psn = rl_ntohl(b->psn_word) & 0xffffff;
}

#endif /* RAILAB_PARSE_H */
