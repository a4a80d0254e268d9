/* railab data plane: flow visibility -- which flows leave by each egress port, and how
 * many bytes each has sent there. The path-navigation controller (dataplane/agent/nav.py)
 * and `railab counters --flows` read it through the agent.
 *
 * Sampled, like sFlow: a frame is accounted with probability 1 / (flow_cfg.sample_mask + 1)
 * (decided from this CPU's frame counter, hashed, so interleaved flows do not alias with
 * the sampling stride) and then credited with (sample_mask + 1) x its length. Unsampled
 * frames cost one inlined per-CPU array read and a hash of the counter; a sampled one adds
 * an LRU hash lookup and two atomic adds. Offered bytes are counted (before the egress
 * queue's drop decision): the controller plans by demand, not by what a full port let
 * through.
 *
 * Mirrored in dataplane/xdp/abi.py (FlowSeenKey, FlowSeen, FlowCfg); tests/bpf/test_abi.py
 * checks the layouts and the #defines below.
 */
#ifndef RAILAB_FLOWS_H
#define RAILAB_FLOWS_H

#ifndef MAX_FLOWS_SEEN
#define MAX_FLOWS_SEEN 16384    /* (egress port, 5-tuple) entries (LRU), all switches together */
#endif
#define FLOW_CFG_F_ON (1U << 0) /* flow_cfg.flags: account frames in flow_seen */

/* key of `flow_seen` */
struct flow_seen_key {
    __u32 slot;           /* egress port slot (host order; lab-unique, see port_info.slot) */
    __u32 saddr;          /* network order */
    __u32 daddr;          /* network order */
    __u16 sport;          /* host order */
    __u16 dport;          /* host order */
    __u8  proto;
    __u8  _pad[3];
};

/* value of `flow_seen` (shared: updated with __sync_fetch_and_add) */
struct flow_seen {
    __u64 bytes;          /* estimated bytes sent (sampled frames x (sample_mask + 1)) */
    __u64 packets;        /* estimated frames */
    __u64 first_ns;       /* bpf_ktime_get_ns() of the first sampled frame */
    __u64 last_ns;        /* ... of the latest sampled frame */
};

/* value of flow_cfg[0] */
struct flow_cfg {
    __u32 flags;          /* FLOW_CFG_F_* */
    __u32 sample_mask;    /* 2^k - 1: one frame in 2^k is accounted */
};

/* flow_seen: LRU hash, key struct flow_seen_key {egress slot host order, addresses network
 * order, ports host order, proto} -> struct flow_seen {bytes, frames, first/last ns}. */
BPF_TABLE("lru_hash", struct flow_seen_key, struct flow_seen, flow_seen, MAX_FLOWS_SEEN);

/* flow_cfg: key __u32 0 -> struct flow_cfg (on/off, sampling), written by the agent. */
BPF_ARRAY(flow_cfg, struct flow_cfg, 1);

/* flow_sample: PERCPU, key __u32 0 -> __u64 frames this CPU has considered (the
 * sampling decision hashes it). */
BPF_PERCPU_ARRAY(flow_sample, __u64, 1);

#endif /* RAILAB_FLOWS_H */
