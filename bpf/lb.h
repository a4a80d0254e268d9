/* railab data plane: load-balancing member selection.
 *
 * Pure functions; the caller (switch.c, where bcc rewrites map accesses) owns the
 * map lookups and the per-mode dispatch (lb_select). The flow hash is a seeded
 * murmur3_32 over fixed 32-bit words (unselected fields contribute 0, so the
 * word count and therefore the mixing are the same for every field choice).
 */
#ifndef RAILAB_LB_H
#define RAILAB_LB_H

#include "parse.h"
#include "railab_structs.h"

/* Hide a value from the compiler's pattern matching: a mask computed with shifts stays
 * arithmetic instead of becoming a compare and a branch (BPF has no conditional move, and
 * every branch doubles what the verifier walks through in an unrolled scan). */
#define RL_OPAQUE(x) asm volatile("" : "+r"(x))

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

/* x % n (n > 0) without the division (tens of cycles) when n is a power of two. */
static __always_inline __u32 rl_mod(__u64 x, __u32 n)
{
    if (!(n & (n - 1)))
        return (__u32)x & (n - 1);
    if (!(x >> 32))
        return (__u32)x % n;      /* 32-bit division: cheaper than 64-bit */
    return x % n;
}

/* ---- liveness (local fast failover, remote-failure / ARN exclusions) ----
 * A group has a "dead" mask (bit i = member i unusable). Every mode first picks from
 * the FULL member list exactly as without failures; only if that pick is dead does
 * lb_repick choose among the live members, by a second, independent hash. So flows
 * whose member is alive never move, and the flows of a dead member spread evenly. */
static __always_inline __u32 rl_popcount64(__u64 x)
{
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
    return (__u32)((x * 0x0101010101010101ULL) >> 56);
}

/* Mask of members 0..n-1 (n capped at DOWN_MASK_BITS). */
static __always_inline __u64 rl_member_mask(__u32 n)
{
    return n >= DOWN_MASK_BITS ? ~0ULL : ((1ULL << n) - 1);
}

/* Index of the k-th (0-based) set bit of x (k < popcount(x)): a six-step binary search,
 * no loop. */
static __always_inline __u32 rl_kth_bit(__u64 x, __u32 k)
{
    __u32 pos = 0, c;

#define RL_KTH_STEP(w)                                      \
    c = rl_popcount64(x & ((1ULL << (w)) - 1));             \
    if (k >= c) { k -= c; x >>= (w); pos += (w); }
    RL_KTH_STEP(32)
    RL_KTH_STEP(16)
    RL_KTH_STEP(8)
    RL_KTH_STEP(4)
    RL_KTH_STEP(2)
    RL_KTH_STEP(1)
#undef RL_KTH_STEP
    return pos;
}

/* A live member chosen by r among the set bits of live (live != 0). */
static __always_inline __u32 lb_repick(__u64 live, __u32 r)
{
    return rl_kth_bit(live, rl_reduce(r, rl_popcount64(live)));
}

static __always_inline int lb_is_dead(__u64 dead, __u32 idx)
{
    return idx < DOWN_MASK_BITS && ((dead >> idx) & 1);
}

/* RoCEv2 data packets for SprayLink: SEND and RDMA WRITE first/middle/last/only (with
 * or without immediate), on RC (opcode bits 7..5 = 000) or UC (001) transport: the low
 * five bits are 0x00..0x0b. Everything else -- ACK 0x11, CNP 0x81, READ request and
 * responses, atomics, UD, connection management -- is a protocol packet. */
static __always_inline int roce_is_data(__u8 opcode)
{
    return (opcode >> 5) <= 1 && (opcode & 0x1f) <= 0x0b;
}

/* Utilisation of an emulated port as the load-aware modes see it: a stale EWMA (no
 * transmit for 4 windows) means the port has been idle. */
static __always_inline __u32 queue_util(const struct port_queue *q, __u64 now)
{
    if (now - q->win_start > 4 * (__u64)q->win_ns)
        return 0;
    return q->util;
}

/* Load score of an emulated port: backlog (ns to drain) plus utilisation expressed as
 * ns of one window, graded in bands of 1 / LB_LOAD_BANDS window, plus LB_PLACED_BANDS for
 * every flowlet placed on it in this window or the one before (in proportion to its first
 * frame's length, up to LB_PLACED_FRAME bytes): lower is better. As DLB
 * hardware grades its ports in a few quality levels, members whose loads differ by less
 * than a band tie (the scan keeps the first it met). The placed flowlets count
 * because the meter lags: flowlets that start inside one window all read the same
 * utilisation and, without them, all pile onto whichever member reads idle. They stop
 * counting when the port has carried nothing for two windows. Read without the lock: a
 * racy snapshot is fine. */
static __always_inline __u64 queue_load(const struct port_queue *q, __u64 now)
{
    __u64 backlog = q->t_free - now;
    __u64 stale = 4 * (__u64)q->win_ns - (now - q->win_start);
    __u64 recent = 2 * (__u64)q->win_ns - (now - q->win_start);
    __u64 util = q->util;
    __u64 band = q->win_ns / LB_LOAD_BANDS;
    __u64 placed = q->placed + q->placed_prev;
    __u64 load;

    /* branch-free (see lb_consider): negative differences (as s64) count as 0 */
    backlog = (__u64)((__s64)backlog >> 63);
    stale = (__u64)((__s64)stale >> 63);
    recent = (__u64)((__s64)recent >> 63);
    RL_OPAQUE(backlog);
    RL_OPAQUE(stale);
    RL_OPAQUE(recent);
    backlog = (q->t_free - now) & ~backlog;
    util &= ~stale;
    placed &= ~recent;
    load = backlog + ((util * q->win_ns) >> 10);
    return load / (band | 1) + ((placed * LB_PLACED_BANDS) >> LB_PLACED_FRAME_SHIFT);
}

#endif /* RAILAB_LB_H */
