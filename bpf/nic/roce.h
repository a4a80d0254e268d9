/* RoCEv2 wire formats the emulated NIC reads and writes, as dataplane/traffic/roce.py
 * defines them: Ethernet / IPv4 / UDP 4791 / BTH [/ RETH] / railab header ... / ICRC
 * for data, BTH / AETH for ACK and NAK, BTH (BECN) / 16 zero bytes for CNP. */
#ifndef RAILAB_NIC_ROCE_H
#define RAILAB_NIC_ROCE_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define nic_htons(x) ((__u16)__builtin_bswap16((__u16)(x)))
#define nic_htonl(x) ((__u32)__builtin_bswap32((__u32)(x)))
#define nic_ntohll(x) ((__u64)__builtin_bswap64((__u64)(x)))
#else
#define nic_htons(x) ((__u16)(x))
#define nic_htonl(x) ((__u32)(x))
#define nic_ntohll(x) ((__u64)(x))
#endif
#define nic_ntohs(x) nic_htons(x)
#define nic_ntohl(x) nic_htonl(x)

#define ROCE_UDP_PORT     4791
#define PSN_MASK          0xFFFFFF

#define OP_SEND_FIRST     0x00
#define OP_SEND_MIDDLE    0x01
#define OP_SEND_LAST      0x02
#define OP_SEND_ONLY      0x04
#define OP_WRITE_FIRST    0x06
#define OP_WRITE_MIDDLE   0x07
#define OP_WRITE_LAST     0x08
#define OP_WRITE_ONLY     0x0A
#define OP_ACK            0x11
#define OP_CNP            0x81
/* bit n set: opcode n is an RC data opcode railab sends */
#define DATA_OPCODES      ((1u << OP_SEND_FIRST) | (1u << OP_SEND_MIDDLE) | (1u << OP_SEND_LAST) | \
                           (1u << OP_SEND_ONLY) | (1u << OP_WRITE_FIRST) | (1u << OP_WRITE_MIDDLE) | \
                           (1u << OP_WRITE_LAST) | (1u << OP_WRITE_ONLY))

#define AETH_ACK          0x1F   /* ACK, credit count "invalid" (unlimited), as roce.AETH_ACK */
#define AETH_NAK_PSN_SEQ  0x60

#define BTH_F_MIGREQ      0x40   /* flags byte: SE(0x80) M(0x40) PadCnt(0x30) TVer(0x0f) */
#define BTH_BECN          0x40   /* resv8a byte: FECN(0x80) BECN(0x40) */
#define BTH_ACKREQ        0x80000000u

#define RETH_LEN          16
#define ICRC_LEN          4
#define CNP_PAD_LEN       16

struct nic_bth {
    __u8   opcode;
    __u8   flags;
    __be16 pkey;
    __u8   resv8a;           /* FECN, BECN, 6 reserved bits: masked in the ICRC */
    __u8   dqpn[3];
    __be32 apsn;             /* AckReq(1) reserved(7) PSN(24) */
} __attribute__((packed));

/* railab's own header at the start of every data packet's IB payload (roce._RL) */
struct nic_railab_hdr {
    __u8   magic[2];         /* "RL" */
    __u8   version;          /* 1 */
    __u8   flags;
    __be32 flow_id;
    __be32 src_qp;
    __be32 msg_id;
    __be32 seq;
    __be32 msg_idx;
    __be32 msg_pkts;
    __be32 msg_bytes;
    __be64 ts_ns;            /* CLOCK_MONOTONIC, = bpf_ktime_get_ns() */
    __be64 msg_start_ns;
} __attribute__((packed));

/* IP + UDP + BTH of a generated frame: what the ICRC covers (masked) before its payload */
struct nic_l4 {
    struct iphdr   ip;
    struct udphdr  udp;
    struct nic_bth bth;
} __attribute__((packed));

struct nic_ack_frame {
    struct ethhdr eth;
    struct nic_l4 l4;
    __be32        aeth;      /* syndrome(8) MSN(24) */
    __u8          icrc[ICRC_LEN];
} __attribute__((packed));   /* 62 bytes */

struct nic_cnp_frame {
    struct ethhdr eth;
    struct nic_l4 l4;
    __u8          pad[CNP_PAD_LEN];
    __u8          icrc[ICRC_LEN];
} __attribute__((packed));   /* 74 bytes */

/* A PFC frame (802.1Qbb; dataplane.wire.pfc.build_frame): MAC control, opcode 0x0101, the
 * class-enable vector (bit p: time[p] is valid), eight pause times in quanta (0: XON) */
#define ETH_P_MAC_CONTROL 0x8808
#define PFC_OPCODE        0x0101

struct nic_pfc_frame {
    struct ethhdr eth;
    __be16        opcode;
    __be16        vector;
    __be16        time[8];
} __attribute__((packed));

/* What the program keeps of a parsed railab data frame (host order unless noted). */
struct nic_rx {
    __u32 saddr, daddr;      /* network order */
    __u16 sport;
    __u16 pkey;
    __u8  opcode;
    __u8  ecn;
    __u8  ackreq;
    __u8  msg_last;
    __u32 dqpn;
    __u32 psn;
    __u32 flow_id;
    __u32 src_qp;
    __u32 seq;
    __u32 msg_id;
    __u32 msg_pkts;
    __u32 msg_bytes;
    __u32 frame_len;
    __u32 payload_len;
    __u64 ts_ns;
    __u64 msg_start_ns;
};

/* Why a frame is no railab data frame: NIC_C_* index, or 0 when it is one. */
static __always_inline int nic_parse(void *data, void *data_end, struct nic_rx *rx)
{
    struct ethhdr *eth = data;
    struct iphdr *ip;
    struct udphdr *udp;
    struct nic_bth *bth;
    struct nic_railab_hdr *hdr;
    __u32 reth, ib_len, overhead;

    if ((void *)(eth + 1) > data_end || eth->h_proto != nic_htons(ETH_P_IP))
        return NIC_C_NOT_ROCE;
    ip = (void *)(eth + 1);
    /* options would move every later header: railab never sends them */
    if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl != 5 ||
        ip->protocol != IPPROTO_UDP || (ip->frag_off & nic_htons(0x3FFF)))
        return NIC_C_NOT_ROCE;
    /* a cut frame (IP length beyond it) is no packet to book or answer: a NIC's ICRC
     * check would fail it */
    if ((void *)ip + nic_ntohs(ip->tot_len) > data_end)
        return NIC_C_NOT_ROCE;
    udp = (void *)(ip + 1);
    if ((void *)(udp + 1) > data_end || udp->dest != nic_htons(ROCE_UDP_PORT))
        return NIC_C_NOT_ROCE;
    bth = (void *)(udp + 1);
    if ((void *)(bth + 1) > data_end)
        return NIC_C_NOT_ROCE;
    if (bth->opcode > OP_WRITE_ONLY || !((DATA_OPCODES >> bth->opcode) & 1))
        return NIC_C_NOT_DATA;
    reth = (bth->opcode == OP_WRITE_FIRST || bth->opcode == OP_WRITE_ONLY) ? RETH_LEN : 0;
    hdr = (void *)(bth + 1) + reth;
    if ((void *)(hdr + 1) > data_end || hdr->magic[0] != 'R' || hdr->magic[1] != 'L' ||
        hdr->version != 1)
        return NIC_C_NO_RAILAB;
    /* the UDP length must hold what was parsed and fit the IP packet: else the frame was
     * cut or forged, and its payload and ICRC are not where the length says */
    ib_len = nic_ntohs(udp->len);
    if (ib_len < sizeof(*udp) + sizeof(*bth) + reth + sizeof(*hdr) + ((bth->flags >> 4) & 3) + ICRC_LEN ||
        ib_len + sizeof(*ip) > nic_ntohs(ip->tot_len))
        return NIC_C_NOT_ROCE;

    rx->saddr = ip->saddr;
    rx->daddr = ip->daddr;
    rx->sport = nic_ntohs(udp->source);
    rx->pkey = nic_ntohs(bth->pkey);
    rx->opcode = bth->opcode;
    rx->ecn = ip->tos & 3;
    rx->dqpn = ((__u32)bth->dqpn[0] << 16) | ((__u32)bth->dqpn[1] << 8) | bth->dqpn[2];
    rx->psn = nic_ntohl(bth->apsn) & PSN_MASK;
    rx->ackreq = !!(bth->apsn & nic_htonl(BTH_ACKREQ));
    rx->flow_id = nic_ntohl(hdr->flow_id);
    rx->src_qp = nic_ntohl(hdr->src_qp) & PSN_MASK;
    rx->seq = nic_ntohl(hdr->seq);
    rx->msg_id = nic_ntohl(hdr->msg_id);
    rx->msg_pkts = nic_ntohl(hdr->msg_pkts);
    rx->msg_bytes = nic_ntohl(hdr->msg_bytes);
    rx->msg_last = nic_ntohl(hdr->msg_idx) + 1 >= rx->msg_pkts;
    rx->ts_ns = nic_ntohll(hdr->ts_ns);
    rx->msg_start_ns = nic_ntohll(hdr->msg_start_ns);
    rx->frame_len = data_end - data;
    /* UDP length, not the frame: Ethernet padding is no payload */
    overhead = sizeof(*udp) + sizeof(*bth) + reth + ((bth->flags >> 4) & 3) + ICRC_LEN;
    rx->payload_len = ib_len > overhead ? ib_len - overhead : 0;
    return 0;
}

/* What the program keeps of an ACK, NAK or CNP addressed to one of our requesters. */
struct nic_fb {
    __u32 daddr;             /* our address, network order */
    __u32 dqpn;              /* our QP */
    __u32 psn;
    __u8  opcode;            /* OP_ACK or OP_CNP */
    __u8  syndrome;          /* AETH syndrome of an ACK/NAK */
    __u8  becn;
    __u8  _pad;
};

/* A frame nic_parse called NIC_C_NOT_DATA: 1 when it is an ACK/NAK (with its AETH) or a
 * CNP, as roce.build_ack / build_cnp make them; 0 otherwise. */
static __always_inline int nic_parse_feedback(void *data, void *data_end, struct nic_fb *fb)
{
    struct ethhdr *eth = data;
    struct iphdr *ip = (void *)(eth + 1);
    struct udphdr *udp = (void *)(ip + 1);
    struct nic_bth *bth = (void *)(udp + 1);
    __be32 *aeth = (void *)(bth + 1);

    /* nic_parse has checked Ethernet, IPv4 without options, UDP to 4791 and the BTH */
    if ((void *)(bth + 1) > data_end)
        return 0;
    if (bth->opcode == OP_ACK) {
        if ((void *)(aeth + 1) > data_end)
            return 0;
        fb->syndrome = nic_ntohl(*aeth) >> 24;
    } else if (bth->opcode != OP_CNP) {
        return 0;
    }
    fb->opcode = bth->opcode;
    fb->daddr = ip->daddr;
    fb->dqpn = ((__u32)bth->dqpn[0] << 16) | ((__u32)bth->dqpn[1] << 8) | bth->dqpn[2];
    fb->psn = nic_ntohl(bth->apsn) & PSN_MASK;
    fb->becn = !!(bth->resv8a & BTH_BECN);
    return 1;
}

static __always_inline __u16 nic_ip_csum(const struct iphdr *ip)
{
    const __u16 *w = (const __u16 *)ip;
    __u32 sum = 0;

#pragma unroll
    for (int i = 0; i < (int)(sizeof(*ip) / 2); i++)
        sum += w[i];
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    return ~sum;
}

/* IP/UDP/BTH of a frame from us (daddr) back to the sender (saddr), as
 * roce.build_packet makes them: DF, id 0, TTL 64, UDP checksum 0. */
static __always_inline void nic_fill_l4(struct nic_l4 *h, const struct nic_rx *rx,
                                        __u8 dscp, __u16 sport, __u16 l4_len,
                                        __u8 opcode, __u8 flags, __u8 resv8a, __u32 psn)
{
    h->ip.version = 4;
    h->ip.ihl = 5;
    h->ip.tos = dscp << 2;                    /* not ECT: RoCE NICs send ACKs and CNPs so */
    h->ip.tot_len = nic_htons(sizeof(struct iphdr) + l4_len);
    h->ip.id = 0;
    h->ip.frag_off = nic_htons(0x4000);
    h->ip.ttl = 64;
    h->ip.protocol = IPPROTO_UDP;
    h->ip.check = 0;
    h->ip.saddr = rx->daddr;
    h->ip.daddr = rx->saddr;
    h->ip.check = nic_ip_csum(&h->ip);
    h->udp.source = nic_htons(sport);
    h->udp.dest = nic_htons(ROCE_UDP_PORT);
    h->udp.len = nic_htons(l4_len);
    h->udp.check = 0;
    h->bth.opcode = opcode;
    h->bth.flags = flags;
    h->bth.pkey = nic_htons(rx->pkey);
    h->bth.resv8a = resv8a;
    h->bth.dqpn[0] = rx->src_qp >> 16;
    h->bth.dqpn[1] = rx->src_qp >> 8;
    h->bth.dqpn[2] = rx->src_qp;
    h->bth.apsn = nic_htonl(psn & PSN_MASK);
}

#endif
