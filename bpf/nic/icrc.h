/* RoCEv2 invariant CRC (IBTA Annex A17), as roce.compute_icrc: CRC-32 (zlib) over
 * 8 bytes of 0xff (the absent LRH), IPv4 with TOS, TTL and checksum all ones, UDP with
 * the checksum all ones, the BTH with resv8a all ones, then the rest up to the ICRC;
 * on the wire least significant byte first.
 *
 * Table driven and fully unrolled over the generated frame's few constant-length
 * pieces (52 bytes for an ACK, 64 for a CNP): straight-line code the verifier walks
 * once, where a bitwise CRC's per-bit branches blow past its 1M-instruction budget.
 * The table comes from a map (bcc loads no .rodata). */
#ifndef RAILAB_NIC_ICRC_H
#define RAILAB_NIC_ICRC_H

#include "nic.h"
#include "roce.h"

static __always_inline __u32 nic_crc_bytes(const struct nic_crc_table *t, __u32 crc,
                                           const __u8 *p, const int len)
{
#pragma unroll
    for (int i = 0; i < len; i++)
        crc = t->t[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return crc;
}

/* ICRC input bytes masked to all ones: IPv4 TOS (1), TTL (8), checksum (10, 11); UDP
 * checksum (26, 27); BTH resv8a (32), as offsets in struct nic_l4. The loop is unrolled,
 * so the test folds away and the frame is read in place, with no masked copy. */
#define NIC_ICRC_MASKED(i) ((i) == 1 || (i) == 8 || (i) == 10 || (i) == 11 || \
                            (i) == 26 || (i) == 27 || (i) == 32)

/* Running CRC (not yet inverted) over the LRH stand-in and the masked IP/UDP/BTH. */
static __always_inline __u32 nic_icrc_head(const struct nic_crc_table *t, const struct nic_l4 *h)
{
    const __u8 *p = (const __u8 *)h;
    __u32 crc = 0xFFFFFFFF;

#pragma unroll
    for (int i = 0; i < 8; i++)
        crc = t->t[(crc ^ 0xFF) & 0xFF] ^ (crc >> 8);
#pragma unroll
    for (int i = 0; i < (int)sizeof(*h); i++)
        crc = t->t[(crc ^ (NIC_ICRC_MASKED(i) ? 0xFF : p[i])) & 0xFF] ^ (crc >> 8);
    return crc;
}

static __always_inline void nic_put_icrc(__u8 *out, __u32 crc)
{
    crc = ~crc;
    out[0] = crc;
    out[1] = crc >> 8;
    out[2] = crc >> 16;
    out[3] = crc >> 24;
}

#endif
