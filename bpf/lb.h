/* railab data plane: load-balancing member selection.
 *
 * Pure functions; the caller owns the map lookups. The flow hash is a seeded
 * murmur3_32 over fixed 32-bit words (unselected fields contribute 0, so the
 * word count and therefore the mixing are the same for every field choice).
 */
#ifndef RAILAB_LB_H
#define RAILAB_LB_H

#include "parse.h"

static __always_inline __u32 rl_rotl32(__u32 x, int r)
{
    return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 rl_mix(__u32 h, __u32 k)
{
    k *= 0xcc9e2d51;
    k = rl_rotl32(k, 15);
    k *= 0x1b873593;
    h ^= k;
    h = rl_rotl32(h, 13);
    return h * 5 + 0xe6546b64;
}

static __always_inline __u32 rl_fmix(__u32 h)
{
    h ^= h >> 16;
    h *= 0x85ebca6b;
    h ^= h >> 13;
    h *= 0xc2b2ae35;
    h ^= h >> 16;
    return h;
}

static __always_inline __u32 flow_hash(const struct flow *f, __u32 fields, __u32 seed,
                                       __u32 ingress_ifindex)
{
    __u32 h = seed;

    h = rl_mix(h, (fields & HASH_F_SRC_IP) ? f->saddr : 0);
    h = rl_mix(h, (fields & HASH_F_DST_IP) ? f->daddr : 0);
    h = rl_mix(h, (fields & HASH_F_PROTO) ? f->proto : 0);
    h = rl_mix(h, (((fields & HASH_F_SRC_PORT) ? (__u32)f->sport : 0) << 16) |
                  ((fields & HASH_F_DST_PORT) ? (__u32)f->dport : 0));
    h = rl_mix(h, ((fields & HASH_F_BTH_DQP) && f->has_bth) ? f->bth_dqp : 0);
    h = rl_mix(h, (fields & HASH_F_INGRESS_PORT) ? ingress_ifindex : 0);
    return rl_fmix(h ^ 24);   /* 24 = bytes hashed, as murmur3 finalizes */
}

/* Map a 32-bit value uniformly onto [0, n) without a division (Lemire). */
static __always_inline __u32 rl_reduce(__u32 x, __u32 n)
{
    return (__u32)(((__u64)x * n) >> 32);
}

/* Member index for a packet of a group with n (> 0) members. */
static __always_inline __u32 lb_pick(__u16 mode, __u32 n, const struct flow *f, __u32 fields,
                                     __u32 seed, __u32 ingress_ifindex, __u16 lbn)
{
    /* if-chain, not switch: bcc/llvm may emit a jump table, which BPF lacks */
    if (mode == LB_MODE_LBN)
        return (__u32)lbn % n;
    if (mode == LB_MODE_SPRAY_RANDOM)
        return rl_reduce(bpf_get_prandom_u32(), n);
    return rl_reduce(flow_hash(f, fields, seed, ingress_ifindex), n);
}

#endif /* RAILAB_LB_H */
