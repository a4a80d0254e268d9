/* railab data plane: every BPF map. One object serves every switch of a lab.
 *
 * bcc rewrites `map.lookup()` only inside the main file, so this header only
 * declares maps; all accesses live in switch.c. Host order unless noted.
 */
#ifndef RAILAB_MAPS_H
#define RAILAB_MAPS_H

#include "railab_structs.h"

/* ports: key __u32 ingress ifindex (lab-unique, host order) -> struct port_info
 * (which switch the port belongs to, its slot, MAC, flags). */
BPF_HASH(ports, __u32, struct port_info, MAX_PORTS);

/* port_index: key __u32 ingress ifindex (host order) used as the array index -> struct
 * port_info, a copy of the `ports` entry with PORT_F_VALID set (zeroed = not a port).
 * The agent keeps every port with ifindex < PORT_INDEX_SLOTS here, so the data path
 * reads this array (inlined lookup) and falls back to the hash only for larger ifindexes. */
BPF_ARRAY(port_index, struct port_info, PORT_INDEX_SLOTS);

/* switches: key __u32 switch_id (array index) -> struct switch_cfg (hash seed, default fields,
 * SW_F_* flags, route_gen: the generation that validates this switch's route_cache entries). */
BPF_ARRAY(switches, struct switch_cfg, MAX_SWITCHES);

/* routes: LPM trie, key struct route_key {prefixlen = 32 + plen, switch_id big-endian,
 * IPv4 dst big-endian} -> struct route_val {group_id}. Per-switch routing tables. */
BPF_LPM_TRIE(routes, struct route_key, struct route_val, MAX_ROUTES);

/* route_cache: PERCPU (no locking, no torn entries), direct-mapped: key __u32 slot =
 * rc_slot(switch_id, dst) -> struct route_cache {switch_id host order, dst big-endian,
 * generation, RC_F_* (local / has route), group_id, avoid_mask}. Caches local_addrs + routes
 * per (switch, dst); an entry is used only if switch_id, dst and switch_cfg.route_gen match. */
BPF_PERCPU_ARRAY(route_cache, struct route_cache, ROUTE_CACHE_SLOTS);

/* groups: key __u32 group_id (array index, lab-wide) -> struct group {mode, n_members,
 * hash_fields, flowlet/busy timeouts, WCMP slot table, round-robin counter}. */
BPF_ARRAY(groups, struct group, MAX_GROUPS);

/* members: key __u32 group.member_base + i -> struct member {egress ifindex,
 * egress slot, next-hop MAC, egress port MAC}. */
BPF_ARRAY(members, struct member, MAX_MEMBER_ENTRIES);

/* port_addrs: key struct port_addr_key {ifindex host order, IPv4 big-endian} -> __u32 flags.
 * ARP requests for ip arriving on ifindex are answered with the port's MAC, sent back out
 * of that port (redirected to it; XDP_TX on PORT_F_ARP_XDP_TX ports). */
BPF_HASH(port_addrs, struct port_addr_key, __u32, MAX_ADDRS);

/* local_addrs: key struct local_addr_key {switch_id host order, IPv4 big-endian} -> __u32
 * refcount. IPv4 to one of these is XDP_PASS (the switch's own kernel stack). */
BPF_HASH(local_addrs, struct local_addr_key, __u32, MAX_ADDRS);

/* port_queue: shared (not per-CPU: every CPU must see one queue), key __u32 port slot ->
 * struct port_queue {speed as ps/byte, buffer and ECN threshold as drain ns, virtual queue
 * end time, utilisation EWMA}, updated on every transmit with atomics (lock-free; the
 * bpf_spin_lock serves the agent's BPF_F_LOCK config writes). */
BPF_ARRAY(port_queue, struct port_queue, MAX_PORTS);

/* flowlets: LRU hash, key struct flowlet_key {group_id host order, flow hash} ->
 * struct flowlet {last packet ns, member of the current flowlet, flowlet count}. */
BPF_TABLE("lru_hash", struct flowlet_key, struct flowlet, flowlets, MAX_FLOWLETS);

/* tm: static traffic matrix, key struct tm_key {switch_id host order, saddr/daddr network
 * order, ports host order, proto} -> struct tm_entry {member to use, match counters}.
 * Only looked up for switches whose switch_cfg.flags has SW_F_TM. */
BPF_HASH(tm, struct tm_key, struct tm_entry, MAX_TM);

/* tm_dsts: key struct tm_dst_key {switch_id host order, daddr network order} -> __u32
 * number of `tm` entries of that switch with that destination. Read only when a
 * route_cache entry is filled (RC_F_TM), so packets to other destinations skip `tm`. */
BPF_HASH(tm_dsts, struct tm_dst_key, __u32, MAX_TM);

/* arp_learned: key struct learn_key {switch_id host order, IPv4 big-endian} -> struct
 * learn_val {port ifindex, sender MAC, last seen}: hosts learned from ARP on PORT_F_LEARN
 * ports. learn_gen[0] counts changes (new host, moved port/MAC) so the agent polls one word. */
BPF_HASH(arp_learned, struct learn_key, struct learn_val, MAX_LEARNED);
BPF_ARRAY(learn_gen, __u64, 1);

/* handoff_key: key 0 -> a random __u64 the loader sets (dataplane.xdp.switch), written into
 * every handoff and checked by tc_handoff, so a frame from outside cannot pose as one */
BPF_ARRAY(handoff_key, __u64, 1);

/* port_stats: PERCPU, key __u32 port slot -> struct port_stats (rx/tx/drops by reason). */
BPF_PERCPU_ARRAY(port_stats, struct port_stats, MAX_PORTS);

/* member_stats: PERCPU, key as `members` -> struct pkt_count (frames sent via that member). */
BPF_PERCPU_ARRAY(member_stats, struct pkt_count, MAX_MEMBER_ENTRIES);

/* verdict_stats: PERCPU, key __u32 XDP action (0 aborted .. 4 redirect) or 5 queued
 * (XDP_PASS into a real queue) -> struct pkt_count. */
BPF_PERCPU_ARRAY(verdict_stats, struct pkt_count, RL_XDP_ACTION_MAX);

/* drop_stats: PERCPU, key __u32 DROP_* reason -> __u64 frames, all ports together
 * (the only place DROP_UNKNOWN_PORT is counted). */
BPF_PERCPU_ARRAY(drop_stats, __u64, DROP_REASON_MAX);

/* pfc_cfg: key __u32 0 -> struct pfc_cfg (PFC on, the lossless DSCP and priority). */
BPF_ARRAY(pfc_cfg, struct pfc_cfg, 1);

/* pfc_port: key __u32 ingress port slot -> struct pfc_port (lossless-priority ingress
 * accounting ring, headroom limit, PFC frames received and the pause times they set). */
BPF_ARRAY(pfc_port, struct pfc_port, MAX_PORTS);

/* Notices in the data plane (switch.c rl_notice_tx / rl_notice_rx; docs/manual/faults.md).
 * arn_cfg: key 0 -> struct arn_cfg (generate / consume, hold, rate limit).
 * arn_ports: key port slot -> struct arn_port (fabric link?, the notice's addresses, the neighbour).
 * arn_switch: key switch id -> struct arn_switch (exclusion count, notice seq).
 * arn_sent: LRU, struct arn_sent_key {switch, prefix, plen, ingress ifindex} -> __u64 ns of
 *   the last notice sent for it (the rate limit).
 * arn_excl: LPM trie, struct route_key {32 + plen, switch id big-endian, prefix} -> struct
 *   arn_excl {group, members to avoid, expiry per member}.
 * arn_stats: PERCPU, key ARN_S_* -> __u64.
 * arn_stamps: key switch id -> struct arn_stamps (first-event times; the agent clears). */
BPF_ARRAY(arn_cfg, struct arn_cfg, 1);
BPF_ARRAY(arn_ports, struct arn_port, MAX_PORTS);
BPF_ARRAY(arn_switch, struct arn_switch, MAX_SWITCHES);
BPF_TABLE("lru_hash", struct arn_sent_key, __u64, arn_sent, MAX_ARN_SENT);
BPF_LPM_TRIE(arn_excl, struct route_key, struct arn_excl, MAX_ARN_EXCL);
BPF_PERCPU_ARRAY(arn_stats, __u64, ARN_STAT_MAX);
BPF_ARRAY(arn_stamps, struct arn_stamps, MAX_SWITCHES);
/* arn_progs: the notice programs xdp_switch tail-calls (ARN_PROG_*), installed by the agent
 * (dataplane/xdp/switch.py) after the load: each has a stack and verifier budget of its own. */
BPF_PROG_ARRAY(arn_progs, ARN_PROGS);
/* link_watch: PERCPU, key 0 -> struct link_watch: xdp_switch's question to xdp_link_scan
 * and its answer, for the one packet this CPU is running. */
BPF_PERCPU_ARRAY(link_watch, struct link_watch, 1);

#endif /* RAILAB_MAPS_H */
