/* railab data plane: structs shared between BPF maps and the Python agent.
 *
 * Mirrored field by field (ctypes) in dataplane/bpf_abi.py; tests/bpf/test_abi.py
 * compares sizes and offsets with the types bcc generates. Keep them in sync.
 * Byte order: fields named *_be and IPv4 addresses are network order; everything
 * else is host order.
 */
#ifndef RAILAB_STRUCTS_H
#define RAILAB_STRUCTS_H

#include "railab_consts.h"

/* value of `ports` (key: __u32 ingress ifindex, host order) */
struct port_info {
    __u32 switch_id;      /* owning switch, index into `switches` */
    __u16 slot;           /* lab-unique port slot < MAX_PORTS: index into port_stats */
    __u16 flags;          /* PORT_F_* */
    __u8  mac[6];         /* the port's MAC: ARP replies and src MAC of frames it sends */
    __u16 lbn;            /* LBN value of this ingress port (LB_MODE_LBN) */
    __u64 speed_bps;      /* emulated port speed, 0 = unset (reserved for shaping modes) */
};

/* value of `switches` (key: __u32 switch_id, array index) */
struct switch_cfg {
    __u32 hash_seed;      /* per-switch ECMP seed (defeats hash polarization) */
    __u32 hash_fields;    /* default HASH_F_* for groups whose hash_fields is 0 */
    __u32 flags;          /* reserved */
    __u32 _pad;
};

/* key of `routes` (LPM trie). prefixlen counts bits of (switch_id_be, dst):
 * 32 + IPv4 prefix length. Both data words are big-endian so that the trie's
 * bytewise prefix match covers the switch id first. */
struct route_key {
    __u32 prefixlen;
    __u32 switch_id_be;   /* switch id, network byte order */
    __u32 dst;            /* IPv4 destination, network byte order */
};

/* value of `routes` */
struct route_val {
    __u32 group_id;       /* next-hop group, index into `groups` */
    __u32 flags;          /* reserved */
};

/* value of `groups` (key: __u32 group_id, array index) */
struct group {
    __u16 mode;           /* LB_MODE_* */
    __u16 n_members;      /* members 0..n-1 are valid; 0 = drop (no_member) */
    __u32 hash_fields;    /* HASH_F_*; 0 = switch default */
    __u32 flags;          /* reserved */
    __u32 _pad;
};

/* value of `members` (key: __u32 group_id * MAX_MEMBERS + member index) */
struct member {
    __u32 ifindex;        /* egress ifindex (in the switch's netns); 0 = empty slot */
    __u16 egress_slot;    /* egress port's slot, for tx counters */
    __u16 flags;          /* reserved */
    __u8  dmac[6];        /* next-hop (neighbour) MAC */
    __u8  smac[6];        /* egress port's MAC */
};

/* key of `port_addrs`: an address the switch answers ARP for on one port.
 * value: __u32 flags (reserved, 0) */
struct port_addr_key {
    __u32 ifindex;        /* host order */
    __u32 ip;             /* network order */
};

/* key of `local_addrs`: an address owned by a switch (IPv4 to it is XDP_PASS).
 * value: __u32 number of ports carrying it (maintained by the agent) */
struct local_addr_key {
    __u32 switch_id;      /* host order */
    __u32 ip;             /* network order */
};

/* value of `port_stats` (PERCPU array, key: port slot) */
struct port_stats {
    __u64 rx_packets;
    __u64 rx_bytes;
    __u64 tx_packets;     /* frames sent out of this port by redirect or XDP_TX */
    __u64 tx_bytes;
    __u64 drops[DROP_REASON_MAX];   /* frames received here and dropped, by DROP_* */
};

/* value of `member_stats` (PERCPU array, same key as `members`) and of
 * `verdict_stats` (PERCPU array, key: XDP action) */
struct pkt_count {
    __u64 packets;
    __u64 bytes;
};

#endif /* RAILAB_STRUCTS_H */
