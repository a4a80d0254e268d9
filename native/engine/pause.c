/* railab send engine, PFC: a flow's data frames wait while its switch port pauses its
 * priority, as dataplane.traffic.sender.send_flows and reliable.run do behind a
 * dataplane.wire.pfc.PauseListener (the rules are PauseState's).
 *
 * The pauses come from the XDP NIC on the host ports: nic_pauses (bpf/nic/nic.h), a
 * memory-mapped array the program writes (per priority: until when, since when, closed
 * totals; frames and XONs) and the engine only reads (--pause-fd, --pause-slots). Before a
 * flow's frame goes out, gate() looks at its priority's until on its port:
 *   - paused: the flow waits until the pause ends, looking again at least every
 *     PAUSE_RECHECK_NS (an XON ends it early); other priorities go on;
 *   - the PFC watchdog (SONiC pfcwd, PauseState.verdict): a priority paused without a break
 *     for longer than watchdog_ns is not held for restore_ns: its frames are dropped (they
 *     consume their PSNs and pacing, and are not transmitted). The storm state is the
 *     engine's; a pause still in force when the storm ends counts from its end.
 *
 * PFC section of the schedule (little-endian, pfc_len bytes, load_pfc):
 *   u64 watchdog_ns (0: no watchdog), u64 restore_ns, u8 priority[64] (by DSCP),
 *   then nports x u32 slot (the port's nic_pauses slot; 0xffffffff: never paused).
 */
#include "engine.h"      /* first: it defines _GNU_SOURCE */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PFC_HEAD_LEN 80
#define NO_SLOT UINT32_MAX
#define PRIOS 8

/* nic.h's struct nic_pause */
struct nic_pause {
    uint64_t until_ns[PRIOS], opened_ns[PRIOS], paused_ns[PRIOS];
    uint64_t frames, xon, quantum_ps, pad[5];
};

struct port_pause {
    uint32_t slot;
    int64_t storm_until[PRIOS];      /* the watchdog tripped: dropped until then */
    uint64_t waits, drops, trips;
    uint64_t frames0, xon0, paused0[PRIOS];   /* the slot's totals at the start */
};

int pfc_on;
static uint64_t watchdog_ns, restore_ns;
static uint8_t prio_of[64];
static struct port_pause *pp;
static const volatile struct nic_pause *pauses;

void load_pfc(const uint8_t *p, size_t len, const char *path)
{
    if (len != PFC_HEAD_LEN + 4 * (size_t)nports)
        die("%s: PFC section of %zu bytes, %zu expected for %u ports", path, len,
            PFC_HEAD_LEN + 4 * (size_t)nports, nports);
    watchdog_ns = le64(p);
    restore_ns = le64(p + 8);
    memcpy(prio_of, p + 16, 64);
    for (int d = 0; d < 64; d++)
        if (prio_of[d] >= PRIOS)
            die("%s: DSCP %d: priority %u (0..7)", path, d, prio_of[d]);
    if (watchdog_ns > (1ull << 62) || restore_ns > (1ull << 62))
        die("%s: PFC watchdog %llu ns / restore %llu ns", path, (unsigned long long)watchdog_ns,
            (unsigned long long)restore_ns);
    pp = calloc(nports ? nports : 1, sizeof *pp);
    if (!pp)
        die("out of memory");
    for (uint32_t i = 0; i < nports; i++)
        pp[i].slot = le32(p + PFC_HEAD_LEN + 4 * i);
    pfc_on = 1;
}

int pfc_needs_pauses(void)
{
    for (uint32_t i = 0; pfc_on && i < nports; i++)
        if (pp[i].slot != NO_SLOT)
            return 1;
    return 0;
}

void map_pauses(int fd, uint32_t slots)
{
    pauses = map_readonly(fd, slots, sizeof(struct nic_pause), "--pause-fd");
    for (uint32_t i = 0; i < nports; i++) {
        struct port_pause *s = &pp[i];
        if (s->slot == NO_SLOT)
            continue;
        if (s->slot >= slots)
            die("port %s:%s: pause slot %u of %u", ports[i].netns, ports[i].ifname, s->slot, slots);
        /* a slot the NIC used before: this run's figures count from here */
        s->frames0 = pauses[s->slot].frames;
        s->xon0 = pauses[s->slot].xon;
        for (int q = 0; q < PRIOS; q++)
            s->paused0[q] = pauses[s->slot].paused_ns[q];
    }
}

int64_t gate(uint32_t port, uint8_t dscp, int64_t now)
{
    if (!pfc_on || !pauses || pp[port].slot == NO_SLOT)
        return 0;
    struct port_pause *s = &pp[port];
    uint32_t q = prio_of[dscp & 63];
    if (s->storm_until[q] > now) {
        s->drops++;
        return -1;
    }
    const volatile struct nic_pause *m = &pauses[s->slot];
    int64_t until = (int64_t)m->until_ns[q];
    if (until <= now)
        return 0;
    int64_t opened = (int64_t)m->opened_ns[q];
    if (opened < s->storm_until[q])
        opened = s->storm_until[q];
    if (watchdog_ns && opened && now - opened > (int64_t)watchdog_ns) {
        s->trips++;
        s->drops++;
        s->storm_until[q] = now + (int64_t)restore_ns;
        return -1;
    }
    s->waits++;
    return until;
}

/* The ports' PFC figures, as the Python senders report them under a port's "pfc" (and
 * paused_waits, watchdog_drops beside): "pfc": {"<port index>": {...}, ...}. paused_ns
 * is the time the switch held each priority (closed pauses, and the one in force up to
 * now), counted by the NIC: it goes on during a watchdog storm, which PauseState stops. */
void print_pfc(int64_t now)
{
    printf("\"pfc\": {");
    int first = 1;
    for (uint32_t i = 0; pfc_on && i < nports; i++) {
        struct port_pause *s = &pp[i];
        uint64_t frames = 0, xon = 0, paused[PRIOS] = {0};
        if (pauses && s->slot != NO_SLOT) {
            const volatile struct nic_pause *m = &pauses[s->slot];
            frames = m->frames - s->frames0;
            xon = m->xon - s->xon0;
            for (int q = 0; q < PRIOS; q++) {
                int64_t opened = (int64_t)m->opened_ns[q], until = (int64_t)m->until_ns[q];
                int64_t open = opened ? (until < now ? until : now) - opened : 0;
                paused[q] = m->paused_ns[q] - s->paused0[q] + (uint64_t)(open > 0 ? open : 0);
            }
        }
        printf("%s\"%u\": {\"pause_frames_received\": %llu, \"xon_received\": %llu, "
               "\"watchdog_trips\": %llu, \"paused_waits\": %llu, \"watchdog_drops\": %llu, "
               "\"paused_ns\": {", first ? "" : ", ", i, (unsigned long long)frames,
               (unsigned long long)xon, (unsigned long long)s->trips, (unsigned long long)s->waits,
               (unsigned long long)s->drops);
        first = 0;
        int f2 = 1;
        for (int q = 0; q < PRIOS; q++) {
            if (!paused[q])
                continue;
            printf("%s\"%d\": %llu", f2 ? "" : ", ", q, (unsigned long long)paused[q]);
            f2 = 0;
        }
        printf("}}");
    }
    printf("}, ");
}
