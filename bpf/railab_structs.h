/* railab data plane: structs shared between BPF maps and the Python agent.
 *
 * Mirrored field by field (ctypes) in dataplane/xdp/abi.py; tests/bpf/test_abi.py
 * compares sizes and offsets with the types bcc generates. Keep them in sync.
 * Byte order: fields named *_be and IPv4 addresses are network order; everything
 * else is host order.
 */
#ifndef RAILAB_STRUCTS_H
#define RAILAB_STRUCTS_H

#include "railab_consts.h"

/* value of `ports` (key: __u32 ingress ifindex, host order) and of `port_index` (key: the
 * same ifindex as an array index; those entries also carry PORT_F_VALID) */
struct port_info {
    __u32 switch_id;      /* owning switch, index into `switches` */
    __u32 slot;           /* lab-unique port slot < MAX_PORTS: index into port_stats (32 bits:
                           * a 16,384-GPU lab has 98,304 switch ports) */
    __u16 flags;          /* PORT_F_* */
    __u16 lbn;            /* LBN value of this ingress port (LB_MODE_LBN) */
    __u8  mac[6];         /* the port's MAC: ARP replies and src MAC of frames it sends */
    __u16 _pad;
    __u64 speed_bps;      /* emulated (scaled) port speed; informational, the data path uses
                           * port_queue.ps_per_byte */
};

/* value of `switches` (key: __u32 switch_id, array index) */
struct switch_cfg {
    __u32 hash_seed;      /* per-switch ECMP seed (defeats hash polarization) */
    __u32 hash_fields;    /* default HASH_F_* for groups whose hash_fields is 0 */
    __u32 flags;          /* SW_F_* (SW_F_TM: look up `tm` for this switch's packets) */
    __u32 route_gen;      /* bumped by the agent after every change of this switch's routes,
                           * avoid masks or local addresses: route_cache entries filled under
                           * another generation are stale */
    __u32 arn_gen;        /* bumped by the data path after every change of the switch's notice
                           * exclusions (arn_excl); the agent writes 0 with every route_gen it
                           * writes, so a (route_gen, arn_gen) pair never comes back */
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
    __u64 avoid_mask;     /* members (bit i = member i) to avoid for this prefix: remote
                           * failure / adaptive-routing exclusions installed by the agent.
                           * Advisory: if it would leave no live member it is ignored. */
    __u32 prefix;         /* the route's own prefix (network order) and length: what a */
    __u32 plen;           /* notice made by the data plane names (an LPM lookup returns
                           * only the value) */
};

/* value of `route_cache` (PERCPU array, key: slot = rc_slot(switch_id, dst)): the result
 * of the local-address check and the LPM lookup for one (switch, dst), filled by the data
 * path on a miss. Valid while flags has RC_F_VALID, switch_id/dst match the packet and gen
 * equals the switch's switch_cfg.route_gen. */
struct route_cache {
    __u32 switch_id;      /* host order */
    __u32 dst;            /* IPv4 destination, network order */
    __u32 gen;            /* switch_cfg.route_gen read before the lookups that filled it */
    __u32 flags;          /* RC_F_* */
    __u32 group_id;       /* route_val.group_id (RC_F_ROUTE) */
    __u32 arn_gen;        /* switch_cfg.arn_gen read with gen: no notice changed an exclusion since */
    __u64 avoid_mask;     /* route_val.avoid_mask (RC_F_ROUTE), | live exclusions (RC_F_EXCL) */
    __u64 excl_until;     /* earliest expiry (bpf_ktime_get_ns) of those exclusions; 0 = none
                           * expires: the entry is stale from then on */
};

/* value of `groups` (key: __u32 group_id, array index). Written by the agent; the
 * data path only writes `rr` (atomically). */
struct group {
    __u16 mode;           /* LB_MODE_* */
    __u16 n_members;      /* members 0..n-1 are valid; 0 = drop (no_member) */
    __u32 hash_fields;    /* HASH_F_*; 0 = switch default */
    __u32 member_base;    /* members n of this group are `members` entry member_base + n: each
                           * group holds a range as long as it needs (the agent allocates), not
                           * a fixed MAX_MEMBERS stride that left most of the table empty */
    __u32 flowlet_ns;     /* LB_MODE_FLOWLET: idle gap that ends a flowlet (ns) */
    __u32 busy_ns;        /* ... gap used instead while the flow's member is busy (ns) */
    __u16 busy_util;      /* ... "busy" = member utilisation above this (UTIL_ONE = 100%);
                           * 0 = never busy */
    __u16 n_wslots;       /* LB_MODE_WCMP: slots in use in wslots (0 = plain hash) */
    __u8  wslots[WCMP_SLOTS];   /* LB_MODE_WCMP: member index per slot (weights expanded) */
    __u32 eslots[WCMP_SLOTS];   /* egress port slot of members 0..63 (load-aware modes read
                                 * port_queue[eslots[i]] without a `members` lookup) */
    __u64 rr;             /* LB_MODE_SPRAY_RR: packets so far (shared, __sync_fetch_and_add) */
    __u64 down_mask;      /* bit i: member i's egress port is down (local fast failover).
                           * Every mode picks from the full member list and re-picks only when
                           * the chosen member is down, so flows on live members never move. */
};

/* value of `members` (key: __u32 group.member_base + member index) */
struct member {
    __u32 ifindex;        /* egress ifindex (in the switch's netns); 0 = empty slot */
    __u32 egress_slot;    /* egress port's slot, for tx counters */
    __u8  dmac[6];        /* next-hop (neighbour) MAC */
    __u8  smac[6];        /* egress port's MAC */
    __u16 flags;          /* reserved */
    __u16 _pad;
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
    __u64 ecn_marked;     /* frames sent out of this port with CE set by its queue */
    __u64 drops[DROP_REASON_MAX];   /* frames received here and dropped, by DROP_*; except
                                     * DROP_QUEUE_FULL: frames this port's queue refused */
};

/* value of `port_queue` (shared ARRAY, key: port slot): the emulated egress port.
 * A virtual queue: t_free is when the bytes accepted so far will have drained at
 * the port's speed, so the backlog is (t_free - now) ns worth of bytes. Frames are
 * not delayed by the model itself (XDP cannot hold them): it decides tail drop, ECN
 * and the load the load-aware modes see. With QUEUE_F_REAL the frame also goes
 * through a shaper qdisc of the same speed on the egress port, which adds the delay
 * (a real queue whose backlog follows the virtual one). Config fields are written by the
 * agent (BPF_F_LOCK); state fields only by the data path, lock-free: t_free by
 * compare-and-swap, win_busy_ns by atomic add; the CPU whose compare-and-swap of
 * win_start closes a window takes win_busy_ns (atomic exchange) and writes util.
 * placed / placed_prev: flowlets placed on the port that its meter has not (fully) seen
 * yet; the same CPU rolls placed into placed_prev. */
struct port_queue {
    struct bpf_spin_lock lock;
    __u32 ps_per_byte;    /* config: 8e12 / scaled speed (picoseconds per byte); 0 = no model */
    __u64 buf_ns;         /* config: buffer size as drain time (ns); tail drop beyond */
    __u64 ecn_ns;         /* config: mark CE on ECT frames when the backlog exceeds this (ns) */
    __u32 win_ns;         /* config: utilisation sample window (ns) */
    __u32 util;           /* state: EWMA (1/4) of per-window busy fraction, UTIL_ONE = 100% */
    __u64 t_free;         /* state: bpf_ktime_get_ns() at which the queue is empty */
    __u64 win_start;      /* state: start of the current utilisation window (ns) */
    __u64 win_busy_ns;    /* state: transmit time of frames accepted in this window (ns) */
    __u32 flags;          /* config: QUEUE_F_* */
    __u32 _pad;
    __u64 ecn_max_ns;     /* config: RED Kmax as drain time (ns): every ECT frame above it is
                           * marked, between ecn_ns (Kmin) and it with a probability rising to
                           * ecn_pmax; <= ecn_ns: a step at ecn_ns (bpf/ecn.h) */
    __u32 ecn_pmax;       /* config: RED Pmax, ECN_P_ONE = 1 */
    __u32 _pad2;
    __u64 placed;         /* state: first-frame bytes (each up to LB_PLACED_FRAME) of the
                           * flowlets a load-aware pick put here in this window */
    __u64 placed_prev;    /* state: ... in the window before (the meter has seen part of them) */
};

/* What rl_handoff writes into a frame for tc_handoff, right after the frame's Ethernet
 * header (the frame grows by HANDOFF_GAP = its size): XDP has decided and rewritten the
 * frame, the egress port's qdisc sends it. */
struct handoff {
    __u32 magic;          /* HANDOFF_MAGIC */
    __u32 ifindex;        /* egress ifindex (host order) */
    __u32 tc_class;       /* skb->priority for the egress qdisc (PFC_TC_*), 0 = leave it */
    __u32 _pad;
    __u64 key;            /* handoff_key: only this program's handoffs are obeyed */
};

/* key of `flowlets` (LRU hash) */
struct flowlet_key {
    __u32 group_id;       /* host order */
    __u32 hash;           /* flow hash (group's fields, switch's seed) */
};

/* value of `flowlets` */
struct flowlet {
    __u64 last_ns;        /* bpf_ktime_get_ns() of the flow's last packet */
    __u32 member;         /* member index the current flowlet uses */
    __u32 flowlets;       /* flowlets this flow has had (1 = never re-decided) */
};

/* key of `tm` (hash): a 5-tuple of one switch. Padding must be zero. */
struct tm_key {
    __u32 switch_id;      /* host order */
    __u32 saddr;          /* network order */
    __u32 daddr;          /* network order */
    __u16 sport;          /* host order */
    __u16 dport;          /* host order */
    __u8  proto;
    __u8  _pad[3];
};

/* key of `tm_dsts`: a destination that has traffic-matrix entries on a switch */
struct tm_dst_key {
    __u32 switch_id;      /* host order */
    __u32 daddr;          /* network order */
};

/* value of `tm`: where the flow goes, overriding the route's group and mode */
struct tm_entry {
    struct member m;      /* egress ifindex, slot, MACs as in `members` */
    __u64 packets;        /* frames that matched (shared, __sync_fetch_and_add) */
    __u64 bytes;
};

/* key of `arp_learned`: a host address seen as an ARP sender on a PORT_F_LEARN port */
struct learn_key {
    __u32 switch_id;      /* host order */
    __u32 ip;             /* network order */
};

/* value of `arp_learned` */
struct learn_val {
    __u32 ifindex;        /* port it was seen on (host order) */
    __u8  mac[6];         /* sender MAC */
    __u16 _pad;
    __u64 last_ns;        /* bpf_ktime_get_ns() of the last ARP from it */
};

/* value of `member_stats` (PERCPU array, same key as `members`) and of
 * `verdict_stats` (PERCPU array, key: XDP action or RL_VERDICT_*) */
struct pkt_count {
    __u64 packets;
    __u64 bytes;
};

/* value of `pfc_cfg` (ARRAY, key 0): the lab's PFC settings */
struct pfc_cfg {
    __u32 flags;          /* PFC_F_* */
    __u8  lossless_dscp;  /* frames with this DSCP are in the lossless priority */
    __u8  lossless_prio;  /* that priority (0..7), informational for the data path */
    __u16 _pad;
};

/* value of `pfc_port` (ARRAY, key: ingress port slot): ingress accounting of the lossless
 * priority. The frames of this ingress port that wait in egress queues, as a ring of
 * (departure time, length): an entry is pushed when a frame is queued (its departure is the
 * egress queue's t_free after it), retired when that time has passed. bytes = what the
 * ring holds; the agent sums the entries still to leave (the exact occupancy) to decide
 * XOFF/XON. One rx queue per veth: one CPU at a time updates a port's ring (no lock). */
struct pfc_port {
    __u32 limit_bytes;    /* config: XOFF + headroom; a frame beyond it is dropped (0 = off) */
    __u32 head;           /* state: next entry to fill (mod PFC_RING) */
    __u32 tail;           /* state: oldest entry still held */
    __u32 bytes;          /* state: bytes of the entries tail..head */
    __u32 peak;           /* state: largest `bytes` seen (headroom used = peak - XOFF) */
    __u32 _pad;
    __u64 headroom_drops; /* state: frames dropped at limit_bytes */
    __u64 pause_rx;       /* state: PFC frames received on this port (from the neighbour) */
    __u64 pause_until[8]; /* state: per priority, bpf_ktime_get_ns() + the last pause's time
                           * as bit-time quanta converted at pause_ns_per_quantum */
    __u64 ns_per_quantum; /* config: wall ns of one quantum (512 bit times at the nominal
                           * speed, stretched by the lab's scale) */
    __u64 t_dep[PFC_RING];   /* state: departure time (ns) of each held frame, or PFC_HELD |
                              * egress slot: waiting for that port's pause to end */
    __u32 len[PFC_RING];     /* state: its length (bytes) */
};

/* value of `arn_cfg` (ARRAY, key 0): notices in the data plane, written by the agent */
struct arn_cfg {
    __u32 flags;          /* ARN_F_GENERATE, ARN_F_CONSUME */
    __u32 hold_ms;        /* hold_ms written into generated notices (wall ms, >= 1) */
    __u64 interval_ns;    /* rate limit: at most one notice per (switch, prefix, ingress port)
                           * per interval (wall ns) */
};

/* value of `arn_ports` (ARRAY, key: port slot) */
struct arn_port {
    __u32 flags;          /* ARN_PORT_F_FABRIC */
    __u32 src_ip;         /* notice source: the switch's address on this port (network
                           * order; 0 = none, sent as 0.0.0.0) */
    __u32 dst_ip;         /* notice destination: the neighbour's address on this link (0 =
                           * unknown, sent to 255.255.255.255) */
    __u32 peer_switch;    /* the neighbour's switch id (0 = unknown): a notice received on
                           * one of several parallel links to it excludes all of them */
};

/* value of `arn_switch` (ARRAY, key: switch id): written by the data path only */
struct arn_switch {
    __u32 excl;           /* arn_excl entries of the switch (0: a cache fill skips the lookup) */
    __u32 _pad;
    __u64 seq;            /* last notice sequence number sent by the switch */
};

/* value of `arn_stamps` (ARRAY, key: switch id): when the switch first did each step of a
 * reaction to a remote failure, bpf_ktime_get_ns() (CLOCK_MONOTONIC); 0 = not since the
 * agent last cleared the entry (the data path writes only a 0, so the first one stays).
 * The same stamps serve both notice paths: the reaction time is the upstream's avoid_ns
 * minus the reporter's dead_ns (dataplane/report/faultruns.py reaction_from_stamps). */
struct arn_stamps {
    __u64 dead_ns;        /* a packet met a group with no live member (DROP_MEMBERS_DOWN) */
    __u64 notice_ns;      /* xdp_notice_tx sent a notice */
    __u64 excl_ns;        /* xdp_notice_rx installed an exclusion (a WITHDRAW) */
    __u64 avoid_ns;       /* a packet was forwarded under an avoid mask that took a live
                           * member away (the agent's route avoid mask or an exclusion) */
};

/* value of `link_watch` (PERCPU ARRAY, key 0) */
struct link_watch {
    __u32 gid;            /* the group whose member's link was found down ... */
    __u32 member;         /* ... that member */
    __u64 down;           /* xdp_link_scan's answer: members (bits) whose links are down */
    __u32 pending;        /* the answer waits for xdp_switch's second run of the packet */
    __u32 _pad;
};

/* key of `arn_sent` (LRU hash) -> __u64 bpf_ktime_get_ns() of the last notice sent */
struct arn_sent_key {
    __u32 switch_id;      /* host order */
    __u32 prefix;         /* network order: the route of the dead group */
    __u32 plen;
    __u32 ifindex;        /* the port the notice left by (the data packet's ingress) */
};

/* value of `arn_excl` (LPM trie, key struct route_key {32 + plen, switch id, prefix}: the
 * notice's prefix on the receiving switch). Members of group_id to avoid for destinations
 * in the prefix. Written by the data path (notices). */
struct arn_excl {
    __u32 group_id;       /* group of the route covering the prefix when the notice came */
    __u32 prefix;         /* the key's prefix (network order) and length: the trie's */
    __u32 plen;           /* lookup may answer with a shorter, covering entry */
    __u32 _pad;
    __u64 avoid;          /* bit i: member i is excluded ... */
    __u64 until;          /* ... until this bpf_ktime_get_ns() (0 = until RESTORE); one expiry
                           * for the entry, the latest asked for (switch.c rl_excl_set) */
};

/* The notice's UDP payload (dataplane/agent/monitor.py FMT), network byte order. */
struct arn_hdr {
    __be32 magic;         /* ARN_MAGIC */
    __u8   version;       /* ARN_VERSION */
    __u8   type;          /* ARN_T_* */
    __u8   reason;        /* ARN_R_* (1 link down, 2 utilisation, 3 queue, 4 cleared) */
    __u8   flags;         /* ARN_NF_* */
    __be32 seq;           /* per reporting switch */
    __be32 reporter;      /* switch id of the sender */
    __be32 nexthop;       /* switch id of the affected next hop, 0 = n/a */
    __u32  prefix;        /* IPv4 prefix (network order) */
    __u8   plen;
    __u8   _pad[3];
    __be32 hold_ms;       /* receiver keeps the exclusion this long (0 = until RESTORE) */
    __be32 metric;
    __be32 port;          /* data plane: the sender's port the notice left by */
};

#endif /* RAILAB_STRUCTS_H */
