/* railab data plane: compile-time sizes and shared constants.
 *
 * Sizes are overridable with -D cflags (dataplane/xdp/switch.py passes them);
 * every value here is mirrored in dataplane/xdp/abi.py and checked by
 * tests/bpf/test_abi.py -- keep the two in sync.
 */
#ifndef RAILAB_CONSTS_H
#define RAILAB_CONSTS_H

/* ---- map sizes (override with -DNAME=value) ---- */
#ifndef MAX_PORTS
#define MAX_PORTS 4096          /* switch ports of the whole lab; also the port-slot range */
#endif
#ifndef MAX_SWITCHES
#define MAX_SWITCHES 1024       /* switch ids are 0 .. MAX_SWITCHES-1 */
#endif
#ifndef MAX_GROUPS
#define MAX_GROUPS 1024         /* next-hop group ids are 0 .. MAX_GROUPS-1 (lab-wide) */
#endif
#ifndef MAX_MEMBERS
#define MAX_MEMBERS 64          /* members per group at most */
#endif
#ifndef MAX_MEMBER_ENTRIES
#define MAX_MEMBER_ENTRIES 65536 /* `members` and `member_stats` entries, all groups together
                                  * (each group a range of them: group.member_base) */
#endif
#ifndef MAX_ROUTES
#define MAX_ROUTES 65536        /* LPM entries, all switches together */
#endif
#ifndef MAX_ADDRS
#define MAX_ADDRS 16384         /* owned addresses, all switches together */
#endif
#ifndef MAX_FLOWLETS
#define MAX_FLOWLETS 65536      /* flowlet table entries (LRU), all groups together */
#endif
#ifndef MAX_LEARNED
#define MAX_LEARNED 16384       /* hosts learned from ARP (arp_learned), all switches together */
#endif
#ifndef MAX_TM
#define MAX_TM 16384            /* static traffic-matrix entries, all switches together */
#endif
#ifndef PORT_INDEX_SLOTS
#define PORT_INDEX_SLOTS 9216   /* port_index covers ifindex 0 .. PORT_INDEX_SLOTS-1 (the
                                 * agent passes 2 * max_ports + 1024); larger ifindexes
                                 * use the `ports` hash only */
#endif
#ifndef MAX_ARN_EXCL
#define MAX_ARN_EXCL 4096       /* notice exclusions (arn_excl), all switches together */
#endif
#ifndef MAX_ARN_SENT
#define MAX_ARN_SENT 16384      /* notice rate-limit entries (arn_sent, LRU), all switches together */
#endif
#ifndef ROUTE_CACHE_SLOTS
#define ROUTE_CACHE_SLOTS 8192  /* per-CPU route cache entries (power of two) */
#endif

/* ---- protocol numbers ---- */
#define RL_ETH_P_IP     0x0800
#define RL_ETH_P_ARP    0x0806
#define RL_IPPROTO_TCP  6
#define RL_IPPROTO_UDP  17
#define ROCE_V2_UDP_PORT 4791
#define RL_ARPHRD_ETHER 1
#define RL_ARPOP_REQUEST 1
#define RL_ARPOP_REPLY   2
#define RL_IP_MF        0x2000
#define RL_IP_OFFSET    0x1FFF

/* ---- drop reasons: index into port_stats.drops[] and drop_stats ---- */
#define DROP_NONE          0
#define DROP_PARSE_ERROR   1   /* truncated / malformed Ethernet, IPv4, L4 or BTH header */
#define DROP_NOT_IPV4      2   /* neither IPv4 nor ARP (IPv6, LLDP, VLAN-tagged ...) */
#define DROP_NO_ROUTE      3   /* no LPM match for (switch, dst) */
#define DROP_TTL_EXPIRED   4   /* TTL <= 1 on a packet that would be forwarded */
#define DROP_NO_MEMBER     5   /* route's group missing, empty, or picked an empty member slot */
#define DROP_PORT_DOWN     6   /* ingress port administratively down (PORT_F_DOWN) */
#define DROP_UNKNOWN_PORT  7   /* ingress ifindex not in the port map (counted globally only) */
#define DROP_NOT_UNICAST   8   /* IPv4 in an Ethernet multicast/broadcast frame */
#define DROP_QUEUE_FULL    9   /* egress virtual queue over its buffer (tail drop); counted
                                * on the EGRESS port's drops[], unlike every other reason */
#define DROP_MEMBERS_DOWN 10   /* every member of the route's group is down (PORT_F_DOWN on its
                                * egress port): local fast failover has nowhere left to go */
#define DROP_PFC_HEADROOM 11   /* lossless-priority frame over its ingress port's XOFF + headroom
                                * (PFC on): the pause came too late for the buffer it reserved */
#define DROP_REASON_MAX    16  /* array size; reasons 12..15 are reserved */

/* ---- next-hop group modes (struct group.mode) ---- */
#define LB_MODE_ECMP         0   /* hash of selected fields, seeded per switch */
#define LB_MODE_LBN          1   /* ingress port's lbn value mod n_members */
#define LB_MODE_SPRAY_RANDOM 2   /* per packet, bpf_get_prandom_u32 */
#define LB_MODE_SPRAY_RR     3   /* per packet, round robin on the group's shared counter */
#define LB_MODE_FLOWLET      4   /* per flowlet: a gap > timeout re-picks the least-loaded member */
#define LB_MODE_SPRAYLINK    5   /* RoCE data packets by live member load, the rest as ECMP */
#define LB_MODE_WCMP         6   /* hash onto the group's weighted slot table (wslots) */
#define LB_MODE_MAX          7   /* unknown modes behave as ECMP */

#define WCMP_SLOTS   64          /* size of struct group.wslots (power of two) */
#define DOWN_MASK_BITS 64        /* group.down_mask / route_val.avoid_mask cover members 0..63 */
#define LB_SCAN_MAX  8           /* load-aware modes compare at most this many members */
#define UTIL_ONE     1024        /* port_queue.util fixed point: 1024 = 100% */
#define LB_LOAD_BANDS 4          /* load-aware picks grade ports in quarters of a window */
#define LB_PLACED_BANDS 2        /* a flowlet placed on a port that its meter has not seen yet
                                  * counts as this many bands (half a port) ... */
#define LB_PLACED_FRAME 1024     /* ... if its first frame is this long; less if shorter */
#define LB_PLACED_FRAME_SHIFT 10 /* log2(LB_PLACED_FRAME) */
#define ECN_P_ONE    65536       /* port_queue.ecn_pmax fixed point: 65536 = probability 1 */

/* ---- hash field selection flags (struct group.hash_fields / switch_cfg.hash_fields) ---- */
#define HASH_F_SRC_IP       (1U << 0)
#define HASH_F_DST_IP       (1U << 1)
#define HASH_F_PROTO        (1U << 2)
#define HASH_F_SRC_PORT     (1U << 3)
#define HASH_F_DST_PORT     (1U << 4)
#define HASH_F_BTH_DQP      (1U << 5)   /* RoCEv2 BTH destination QP (only if a BTH was parsed) */
#define HASH_F_INGRESS_PORT (1U << 6)   /* ingress ifindex */
#define HASH_FIELDS_5TUPLE  0x1fU
/* group.hash_fields == 0 -> use the switch's; switch's == 0 -> HASH_FIELDS_5TUPLE */

/* ---- flags ---- */
#define PORT_F_DOWN       (1U << 0)   /* port is down: drop everything received on it, and
                                       * every group skips members egressing here (the agent
                                       * mirrors this into group.down_mask) */
#define PORT_F_PROXY_ARP  (1U << 1)   /* answer ARP for any target the switch has a route to */
#define PORT_F_ARP_XDP_TX (1U << 2)   /* send ARP replies with XDP_TX instead of a redirect to
                                       * the ingress port; on veth XDP_TX only reaches the peer
                                       * if the peer has an XDP program (GRO is not enough) */
#define PORT_F_LEARN      (1U << 3)   /* host-facing: record ARP senders into `arp_learned` */
#define PORT_F_VALID      (1U << 15)  /* set in `port_index` entries only: this ifindex is a
                                       * switch port (a zeroed entry is not) */

#define SW_F_TM           (1U << 0)   /* switch_cfg.flags: the switch has traffic-matrix entries */

#define RC_F_VALID        (1U << 0)   /* route_cache.flags: the entry was filled */
#define RC_F_LOCAL        (1U << 1)   /* ... dst is owned by the switch (in local_addrs) */
#define RC_F_ROUTE        (1U << 2)   /* ... the LPM had a route (group_id, avoid_mask valid) */
#define RC_F_TM           (1U << 3)   /* ... the switch has `tm` entries for dst (tm_dsts) */

#define QUEUE_F_REAL      (1U << 0)   /* port_queue.flags: frames for this egress port leave the
                                       * XDP program with XDP_PASS and a handoff in the frame;
                                       * tc_handoff redirects them through the port's qdisc (a
                                       * shaper at the port's speed), so the queue delays them */

/* verdict_stats keys: the XDP actions, then railab's own outcomes */
#define RL_VERDICT_QUEUED 5           /* XDP_PASS to tc_handoff, into a real queue */
#define RL_XDP_ACTION_MAX 6           /* XDP_ABORTED .. XDP_REDIRECT, RL_VERDICT_QUEUED */

/* ---- PFC (bpf/pfc.h) ---- */
#define RL_ETH_P_MAC_CONTROL 0x8808   /* PFC / PAUSE frames */
#define PFC_RING      64              /* frames of one ingress port tracked until they leave */
#define PFC_POPS      4               /* departed ring entries retired per arriving frame */
#define PFC_F_ON      (1U << 0)       /* pfc_cfg.flags: lossless priority accounted, never tail-dropped */
#define PFC_HELD      (1ULL << 63)    /* pfc_port.t_dep: held by a pause on egress slot (low 32 bits),
                                       * leaves when that port's pause ends */
/* skb->priority (an HTB class id, "1:10" / "1:20") tc_handoff gives a frame on a PFC port:
 * the lossless class can be held for a pause while the other keeps sending */
#define PFC_TC_LOSSLESS   0x10010U
#define PFC_TC_OTHER      0x10020U
#define PFC_TC_CNP        0x10030U    /* CNPs: a class of their own, first to send */
#define PFC_CNP_DSCP      48          /* DSCP of CNPs (CS6, priority 6; dataplane.wire.pfc) */

/* ---- ARN / FGLB notices in the data plane (switch.c: rl_notice_tx, rl_notice_rx) ----
 * The notice is the 40-byte "RARN" header of dataplane/agent/monitor.py in UDP to port
 * ARN_UDP_PORT; the data plane sends it as one 82-byte frame (ARN_FRAME_LEN). */
#define ARN_UDP_PORT      4792
#define ARN_MAGIC         0x5241524eU  /* "RARN" as a big-endian word */
#define ARN_VERSION       1
#define ARN_T_WITHDRAW    1            /* avoid me for the prefix */
#define ARN_T_RESTORE     2            /* use me again */
#define ARN_R_LINK_DOWN   1            /* reason: no live member left for the prefix */
#define ARN_HDR_LEN       40
#define ARN_FRAME_LEN     82           /* Ethernet 14 + IPv4 20 + UDP 8 + ARN_HDR_LEN */
#define ARN_TOS           0xc0         /* IPv4 TOS of a notice: DSCP CS6 (network control) */
#define ARN_NF_FLOWS      0x1          /* header flags: a flow list follows (agent path only:
                                        * the data plane leaves such notices to the agent) */
#define ARN_NF_XDP        0x2          /* header flags: made by a switch's XDP program */
#define ARN_F_GENERATE    (1U << 0)    /* arn_cfg.flags: turn data packets into a dead group
                                        * into notices back out of their ingress port */
#define ARN_F_CONSUME     (1U << 1)    /* arn_cfg.flags: notices arriving on fabric ports set
                                        * exclusions (arn_excl) and are dropped ... */
#define ARN_F_PASS        (1U << 2)    /* ... or, with this, passed up the switch's stack after
                                        * that, so that tcpdump on the port sees them */
#define ARN_F_WATCH       (1U << 3)    /* arn_cfg.flags: before sending into a fabric link, check
                                        * in the switch's FIB that the link is up (link watch) */
#define ARN_PORT_F_FABRIC (1U << 0)    /* arn_ports.flags: a switch-switch link: notices are
                                        * sent out of it and accepted from it */
#define ARN_PORT_F_WATCHED (1U << 1)   /* ... and the link watch may ask the FIB about it: the
                                        * port's address has a prefix holding dst_ip */
/* arn_stats keys (PERCPU array of __u64) */
#define ARN_S_SENT        0            /* notices sent (XDP_TX, not a redirect) */
#define ARN_S_SUPPRESSED  1            /* data packets into a dead group within the rate limit */
#define ARN_S_TX_FAILED   2            /* the frame could not be resized into a notice */
#define ARN_S_WITHDRAW_RX 3            /* WITHDRAW notices consumed */
#define ARN_S_RESTORE_RX  4            /* RESTORE notices consumed */
#define ARN_S_MALFORMED   5            /* bad magic/version/type/plen/length: dropped */
#define ARN_S_NOT_FABRIC  6            /* notices on a port that is no switch-switch link: dropped */
#define ARN_S_IGNORED     7            /* well-formed, but no route or no member by that port */
#define ARN_S_WATCH_DEAD  8            /* packets whose member the link watch found down: re-picked
                                        * or, with no live member left, a dead group */
#define ARN_S_WATCH_BLIND 9            /* link watch lookups the FIB refused (forwarding off on lo) */
#define ARN_STAT_MAX      10
#define RL_LOOPBACK_IFINDEX 1       /* lo: the link watch's FIB lookups enter there */
#define ARN_PROG_TX       0            /* arn_progs slots: xdp_notice_tx */
#define ARN_PROG_RX       1            /* ... xdp_notice_rx */
#define ARN_PROG_LINK_SCAN 2           /* ... xdp_link_scan (the link watch's rescan) */
#define ARN_PROG_SWITCH   3            /* ... xdp_switch itself, run again after the rescan */
#define ARN_PROGS         4

/* struct handoff.magic: "rail" (its first byte is not an IPv4 header's, so a handoff is
 * never taken for the IP header it stands in front of) */
#define HANDOFF_MAGIC     0x7261696cU
#define HANDOFF_GAP       24          /* sizeof(struct handoff): what a handed-off frame grows by */

#endif /* RAILAB_CONSTS_H */
