/* railab send engine: the send side of the kernel NIC for open-loop workloads.
 *
 * One process sends for the host ports its schedule names (a run has one per CPU it can
 * keep busy: dataplane/nic/shards.py). It reads a binary schedule written by
 * dataplane/nic/engine.py (format below), opens one AF_PACKET socket per port inside the
 * port's network namespace, builds every RoCEv2 frame itself (byte for byte what
 * dataplane.traffic.sender.FlowFramer / roce.FrameTemplate.fill make) and paces every
 * flow with send_flows' rule (GCRA per flow, earliest due first):
 *
 *   t_next = max(due + interval, start + next_msg_offset, now - max(burst*interval, burst_ns))
 *
 * busy-waiting on CLOCK_MONOTONIC (clock_nanosleep for waits longer than the spin window),
 * frames due together leave in one sendmmsg() per port.
 *
 * Protocol: prints "ready" once the sockets are open, waits for "go <start_ns>" on stdin
 * (CLOCK_MONOTONIC ns: the common start; "go" or 0: now), sends, prints one JSON line (the report) and
 * exits 0. stdin closed or SIGTERM before "go": exits 0, nothing sent. SIGTERM while
 * sending: stops, reports. Errors: one line on stderr, exit 2.
 *
 * --dump FILE [--start NS]: no sockets, no waiting: a virtual clock that jumps to each due
 * time; every frame is written to FILE (records below) for the tests to compare with Python.
 *
 * Closed loop (closed.c): a schedule with a transport section makes every flow a reliable
 * QP (go-back-N or selective repeat, with DCQCN if asked); the XDP NIC on the host ports
 * books the ACKs, NAKs and CNPs in nic_reqs, which the engine maps (--feedback-fd, an
 * inherited fd of the map, --feedback-slots its entries) and reads without system calls.
 *
 * PFC (pause.c): a schedule with a PFC section holds a flow's data frames while its
 * switch port pauses its priority (DSCP -> priority), as the XDP NIC books the pause frames
 * in nic_pauses (--pause-fd, --pause-slots), with the PFC watchdog; the burst credit is
 * then one packet (a NIC cannot make up for a pause above its line rate).
 *
 * Schedule file (little-endian), version 2:
 *   header  48 B: "RLENGSCH", u32 version, u32 nports, u32 nflows, u32 burst,
 *                 u64 burst_ns, u64 duration_ns (0: none), u32 transport_len (0: open
 *                 loop), u32 pfc_len (0: no PFC)
 *   port   288 B: char netns[256] (""=this namespace, "/..."=a path, else /var/run/netns/NAME),
 *                 char ifname[32]
 *   flow    68 B: u32 port, u32 flow_id, u8 src_mac[6], u8 dst_mac[6], u8 src_ip[4],
 *                 u8 dst_ip[4] (network order), u16 sport, u8 kind (0 send, 1 write),
 *                 u8 dscp, u8 ecn, u8 pad[3], u32 dst_qp, u32 src_qp, u32 psn0, u32 mtu,
 *                 f64 rate_bps (Ethernet frame bits/s; 0: unpaced), u32 nmsgs, u32 fb_slot
 *                 (closed loop: its nic_reqs slot),
 *           then nmsgs x 16 B: u32 msg_id, u32 size, u64 start_ns (offset from the start)
 *   transport (transport_len bytes, closed.c's load_transport)
 *   PFC (pfc_len bytes, pause.c's load_pfc)
 * Dump file: "RLENGDMP", u32 version 1, u32 0, then per frame: u32 port, u32 flow index,
 *            i64 due_ns, i64 ts_ns, u32 length, frame bytes.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "engine.h"

const char *prog = "railab-engine";
volatile sig_atomic_t stop_flag;

struct port *ports;
struct flow *flows;
uint32_t nports, nflows, burst;
uint64_t burst_ns, duration_ns;

static uint64_t hist[HIST_SLOTS];
static uint64_t late_count, late_max;
uint64_t n_packets, n_bytes, n_errors, n_batches;
static uint64_t n_syscalls, n_retries, n_sleeps;
static int last_errno;

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static inline int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void on_term(int sig)
{
    (void)sig;
    stop_flag = 1;
}

/* ---------------------------------------------------------------- schedule */

struct reader {
    const uint8_t *p;
    size_t len, off;
    const char *path;
};

static const uint8_t *take(struct reader *r, size_t n, const char *what)
{
    if (r->len - r->off < n)
        die("%s: truncated schedule (%s at byte %zu)", r->path, what, r->off);
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}

uint32_t le32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
uint64_t le64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint16_t le16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }

static void load_schedule(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die("%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0)
        die("%s: %s", path, strerror(errno));
    size_t len = (size_t)st.st_size;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        die("out of memory");
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n <= 0)
            die("%s: read: %s", path, n < 0 ? strerror(errno) : "short read");
        got += (size_t)n;
    }
    close(fd);
    struct reader r = {buf, len, 0, path};
    const uint8_t *h = take(&r, HDR_LEN, "header");
    if (memcmp(h, SCHED_MAGIC, 8) != 0)
        die("%s: not a railab engine schedule (no RLENGSCH magic)", path);
    if (le32(h + 8) != SCHED_VERSION)
        die("%s: schedule version %u, this engine reads version %u", path, le32(h + 8), SCHED_VERSION);
    nports = le32(h + 12);
    nflows = le32(h + 16);
    burst = le32(h + 20);
    burst_ns = le64(h + 24);
    duration_ns = le64(h + 32);
    uint32_t transport_len = le32(h + 40), pfc_len = le32(h + 44);
    if (nports > 4096 || nflows > (1u << 24))
        die("%s: %u ports, %u flows: too many", path, nports, nflows);
    ports = calloc(nports ? nports : 1, sizeof *ports);
    flows = calloc(nflows ? nflows : 1, sizeof *flows);
    if (!ports || !flows)
        die("out of memory");
    for (uint32_t i = 0; i < nports; i++) {
        const uint8_t *p = take(&r, PORT_LEN, "port");
        memcpy(ports[i].netns, p, 256);
        memcpy(ports[i].ifname, p + 256, 32);
        if (ports[i].netns[255] || ports[i].ifname[31])
            die("%s: port %u: name not NUL-terminated", path, i);
        if (!ports[i].ifname[0] || strlen(ports[i].ifname) >= IFNAMSIZ)
            die("%s: port %u: bad interface name '%s'", path, i, ports[i].ifname);
        ports[i].fd = -1;
    }
    for (uint32_t i = 0; i < nflows; i++) {
        struct flow *f = &flows[i];
        const uint8_t *p = take(&r, FLOW_LEN, "flow");
        f->port = le32(p);
        f->flow_id = le32(p + 4);
        memcpy(f->smac, p + 8, 6);
        memcpy(f->dmac, p + 14, 6);
        memcpy(f->sip, p + 20, 4);
        memcpy(f->dip, p + 24, 4);
        f->sport = le16(p + 28);
        f->kind = p[30];
        f->dscp = p[31];
        f->ecn = p[32];
        f->dqp = le32(p + 36);
        f->sqp = le32(p + 40);
        f->psn0 = le32(p + 44);
        f->mtu = le32(p + 48);
        memcpy(&f->rate, p + 52, 8);
        f->nmsgs = le32(p + 60);
        f->fb_slot = le32(p + 64);
        if (f->port >= nports)
            die("%s: flow %u: port %u of %u", path, f->flow_id, f->port, nports);
        if (f->kind > 1)
            die("%s: flow %u: opcode kind %u (0 send, 1 write)", path, f->flow_id, f->kind);
        if (f->dscp > 63 || f->ecn > 3)
            die("%s: flow %u: dscp %u / ecn %u out of range", path, f->flow_id, f->dscp, f->ecn);
        if (f->mtu < MTU_MIN || f->mtu > MTU_MAX)
            die("%s: flow %u: mtu %u (%u..%u)", path, f->flow_id, f->mtu, MTU_MIN, MTU_MAX);
        if (!(f->rate >= 0) || f->rate > 1e15)
            die("%s: flow %u: rate %g bit/s", path, f->flow_id, f->rate);
        if ((size_t)f->nmsgs > (r.len - r.off) / MSG_LEN)
            die("%s: truncated schedule (flow %u: %u messages)", path, f->flow_id, f->nmsgs);
        f->msgs = calloc(f->nmsgs ? f->nmsgs : 1, sizeof *f->msgs);
        if (!f->msgs)
            die("out of memory");
        for (uint32_t m = 0; m < f->nmsgs; m++) {
            const uint8_t *q = take(&r, MSG_LEN, "message");
            f->msgs[m].msg_id = le32(q);
            f->msgs[m].size = le32(q + 4);
            f->msgs[m].start_ns = le64(q + 8);
            if (f->msgs[m].start_ns > (1ull << 62))
                die("%s: flow %u: message %u starts at %llu ns", path, f->flow_id, m,
                    (unsigned long long)f->msgs[m].start_ns);
        }
        size_t slot = ETH_HLEN_ + IP_HLEN + UDP_HLEN + BTH_LEN + RETH_LEN + f->mtu + 3 + ICRC_LEN;
        if (slot > ports[f->port].slot)
            ports[f->port].slot = slot;
    }
    if (transport_len)
        load_transport(take(&r, transport_len, "transport"), transport_len, path);
    if (pfc_len)
        load_pfc(take(&r, pfc_len, "PFC"), pfc_len, path);
    if (r.off != r.len)
        die("%s: %zu bytes after the last flow", path, r.len - r.off);
    free(buf);
}

/* ---------------------------------------------------------------- segmentation */

/* packets of a message: roce.segment_message */
uint32_t msg_packets(uint32_t size, uint32_t mtu)
{
    uint64_t s = size < RAILAB_HLEN ? RAILAB_HLEN : size;
    return (uint32_t)((s + mtu - 1) / mtu);
}

/* IB payload length of packet i of n */
static uint32_t chunk_len(uint32_t size, uint32_t mtu, uint32_t i, uint32_t n)
{
    uint64_t s = size < RAILAB_HLEN ? RAILAB_HLEN : size;
    uint64_t last = s - (uint64_t)(n - 1) * mtu;
    uint32_t shortfall = (n > 1 && last < RAILAB_HLEN) ? (uint32_t)(RAILAB_HLEN - last) : 0;
    if (i == n - 1)
        return shortfall ? RAILAB_HLEN : (uint32_t)last;
    if (i == n - 2)
        return mtu - shortfall;
    return mtu;
}

/* roce.message_opcodes: first/middle/last/only of send (0) or write (1) */
static uint8_t opcode_of(uint8_t kind, uint32_t i, uint32_t n)
{
    static const uint8_t ops[2][4] = {{0x00, 0x01, 0x02, 0x04}, {0x06, 0x07, 0x08, 0x0A}};
    if (n == 1)
        return ops[kind][3];
    return ops[kind][i == 0 ? 0 : (i == n - 1 ? 2 : 1)];
}

/* ---------------------------------------------------------------- frames */

static inline void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = (uint8_t)v; }
static inline void put32(uint8_t *p, uint32_t v) { v = htonl(v); memcpy(p, &v, 4); }
static inline void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }

static uint16_t ip_csum(const uint8_t *h)
{
    uint32_t s = 0;
    for (int i = 0; i < IP_HLEN; i += 2)
        s += ((uint32_t)h[i] << 8) | h[i + 1];
    while (s >> 16)
        s = (s & 0xFFFF) + (s >> 16);
    return (uint16_t)~s;
}

/* Writes the frame of flow f's next packet into b; returns its length. */
static const struct tail_crc *tail_crc(struct flow *f, uint32_t plen, const uint8_t *tail, size_t n)
{
    for (int i = 0; i < TAIL_CACHE; i++)
        if (f->tails[i].plen == plen)
            return &f->tails[i];
    struct tail_crc *c = &f->tails[f->tail_next++ % TAIL_CACHE];
    c->plen = plen;
    c->crc = crc32(0L, tail, (uInt)n);
    c->op = crc32_combine_gen((z_off_t)n);
    return c;
}

size_t build_frame(struct flow *f, uint8_t *b, int64_t ts, int64_t msg_start)
{
    const struct msg *m = &f->msgs[f->mi];
    uint32_t plen = chunk_len(m->size, f->mtu, f->pi, f->npk);
    uint8_t op = opcode_of(f->kind, f->pi, f->npk);
    int reth = (op == 0x06 || op == 0x0A);
    uint32_t pad = (-plen) & 3;
    uint32_t ulen = UDP_HLEN + BTH_LEN + (reth ? RETH_LEN : 0) + plen + pad + ICRC_LEN;
    size_t len = ETH_HLEN_ + IP_HLEN + ulen;
    int ackreq = f->pi == f->npk - 1;
    uint32_t psn = (f->psn0 + f->seq) & PSN_MASK;

    memcpy(b, f->dmac, 6);
    memcpy(b + 6, f->smac, 6);
    b[12] = 0x08; b[13] = 0x00;
    uint8_t *ip = b + ETH_HLEN_;
    ip[0] = 0x45;
    ip[1] = (uint8_t)((f->dscp << 2) | f->ecn);
    put16(ip + 2, (uint16_t)(IP_HLEN + ulen));
    put16(ip + 4, 0);
    put16(ip + 6, 0x4000);          /* DF */
    ip[8] = 64;
    ip[9] = 17;
    put16(ip + 10, 0);
    memcpy(ip + 12, f->sip, 4);
    memcpy(ip + 16, f->dip, 4);
    put16(ip + 10, ip_csum(ip));
    uint8_t *udp = ip + IP_HLEN;
    put16(udp, f->sport);
    put16(udp + 2, ROCE_PORT);
    put16(udp + 4, (uint16_t)ulen);
    put16(udp + 6, 0);
    uint8_t *bth = udp + UDP_HLEN;
    bth[0] = op;
    bth[1] = (uint8_t)(0x40 | (pad << 4));    /* MigReq, padcount, version 0 */
    bth[2] = 0xFF; bth[3] = 0xFF;             /* pkey */
    put32(bth + 4, f->dqp & PSN_MASK);        /* FECN/BECN/resv 0, dest QP */
    put32(bth + 8, psn | (ackreq ? 0x80000000u : 0));
    uint8_t *p = bth + BTH_LEN;
    if (reth) {
        put64(p, 0);
        put32(p + 8, f->dqp);                  /* rkey: FlowFramer's rkey = dst_qp */
        put32(p + 12, m->size);                /* dmalen */
        p += RETH_LEN;
    }
    p[0] = 'R'; p[1] = 'L'; p[2] = 1; p[3] = 0;
    put32(p + 4, f->flow_id);
    put32(p + 8, f->sqp);
    put32(p + 12, m->msg_id);
    put32(p + 16, f->seq);
    put32(p + 20, f->pi);
    put32(p + 24, f->npk);
    put32(p + 28, m->size);
    put64(p + 32, (uint64_t)ts);
    put64(p + 40, (uint64_t)msg_start);
    memset(p + RAILAB_HLEN, FILLER, plen - RAILAB_HLEN);
    memset(p + plen, 0, pad);

    /* ICRC: 8 x 0xff, IP with TOS/TTL/checksum all ones, UDP with checksum all ones,
     * BTH[0:8] with resv8a all ones, then BTH[8:] to the end (roce.icrc_masked_prefix) */
    uint8_t pre[8 + IP_HLEN + UDP_HLEN + 8];
    memset(pre, 0xFF, 8);
    memcpy(pre + 8, ip, IP_HLEN);
    pre[8 + 1] = 0xFF;
    pre[8 + 8] = 0xFF;
    pre[8 + 10] = pre[8 + 11] = 0xFF;
    memcpy(pre + 8 + IP_HLEN, udp, UDP_HLEN);
    pre[8 + IP_HLEN + 6] = pre[8 + IP_HLEN + 7] = 0xFF;
    memcpy(pre + 8 + IP_HLEN + UDP_HLEN, bth, 8);
    pre[8 + IP_HLEN + UDP_HLEN + 4] = 0xFF;
    uLong crc = crc32(0L, pre, sizeof pre);
    crc = crc32(crc, bth + 8, (uInt)(p + RAILAB_HLEN - (bth + 8)));
    size_t tail = plen - RAILAB_HLEN + pad;
    if (tail) {
        const struct tail_crc *c = tail_crc(f, plen, p + RAILAB_HLEN, tail);
        crc = crc32_combine_op(crc, c->crc, c->op);
    }
    uint8_t *ic = b + len - ICRC_LEN;
    ic[0] = (uint8_t)crc; ic[1] = (uint8_t)(crc >> 8); ic[2] = (uint8_t)(crc >> 16); ic[3] = (uint8_t)(crc >> 24);
    return len;
}

/* ---------------------------------------------------------------- heap of (due, flow index) */

uint32_t *heap;
uint32_t heap_n;

static inline int before(uint32_t a, uint32_t b)
{
    /* ties: the QP served longest ago (closed loop's round-robin; 0 in open loop), then the index */
    if (flows[a].due != flows[b].due)
        return flows[a].due < flows[b].due;
    return flows[a].served < flows[b].served || (flows[a].served == flows[b].served && a < b);
}

void heap_down(uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < heap_n && before(heap[l], heap[m])) m = l;
        if (r < heap_n && before(heap[r], heap[m])) m = r;
        if (m == i) return;
        uint32_t t = heap[i]; heap[i] = heap[m]; heap[m] = t;
        i = m;
    }
}

void heap_up(uint32_t i)
{
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!before(heap[i], heap[p])) return;
        uint32_t t = heap[i]; heap[i] = heap[p]; heap[p] = t;
        i = p;
    }
}

/* ---------------------------------------------------------------- lateness */

static uint32_t hist_slot(uint64_t v)
{
    if (v < 64)
        return (uint32_t)v;
    int e = 63 - __builtin_clzll(v);           /* >= 6 */
    uint32_t sub = (uint32_t)(v >> (e - 5)) & (HIST_SUB - 1);
    uint32_t s = 64 + (uint32_t)(e - 6) * HIST_SUB + sub;
    return s < HIST_SLOTS ? s : HIST_SLOTS - 1;
}

static uint64_t hist_low(uint32_t s)
{
    if (s < 64)
        return s;
    uint32_t e = (s - 64) / HIST_SUB + 6, sub = (s - 64) % HIST_SUB;
    return (1ull << e) + ((uint64_t)sub << (e - 5));
}

static uint64_t hist_pct(double q)
{
    if (!late_count)
        return 0;
    uint64_t want = (uint64_t)(q * (double)late_count);
    if (want >= late_count)
        want = late_count - 1;
    uint64_t seen = 0;
    for (uint32_t s = 0; s < HIST_SLOTS; s++) {
        seen += hist[s];
        if (seen > want) {
            uint64_t v = hist_low(s);
            return v > late_max ? late_max : v;
        }
    }
    return late_max;
}

/* A memory-mappable BPF array of `slots` values the NIC's program writes, read-only. */
const void *map_readonly(int fd, uint32_t slots, size_t slot_size, const char *option)
{
    size_t page = 4096, size = ((size_t)slots * slot_size + page - 1) / page * page;
    void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        die("%s %d: mmap of %u slots: %s", option, fd, slots, strerror(errno));
    return m;
}

void note_lateness(uint64_t late)
{
    hist[hist_slot(late)]++;
    late_count++;
    if (late > late_max)
        late_max = late;
}

/* ---------------------------------------------------------------- sockets */

static void open_sockets(void)
{
    int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0)
        die("/proc/self/ns/net: %s", strerror(errno));
    for (uint32_t i = 0; i < nports; i++) {
        struct port *p = &ports[i];
        int nsfd = -1;
        if (p->netns[0]) {
            char path[300];
            if (p->netns[0] == '/')
                snprintf(path, sizeof path, "%s", p->netns);
            else
                snprintf(path, sizeof path, "/var/run/netns/%s", p->netns);
            nsfd = open(path, O_RDONLY | O_CLOEXEC);
            if (nsfd < 0)
                die("port %s:%s: namespace %s: %s", p->netns, p->ifname, path, strerror(errno));
            if (setns(nsfd, CLONE_NEWNET) < 0)
                die("port %s:%s: setns: %s", p->netns, p->ifname, strerror(errno));
        }
        unsigned idx = if_nametoindex(p->ifname);
        int fd = idx ? socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0) : -1;
        int err = errno;
        if (nsfd >= 0) {
            if (setns(self, CLONE_NEWNET) < 0)
                die("setns back: %s", strerror(errno));
            close(nsfd);
        }
        if (!idx)
            die("port %s:%s: no such interface", p->netns, p->ifname);
        if (fd < 0)
            die("port %s:%s: socket: %s", p->netns, p->ifname, strerror(err));
        int one = 1, sndbuf = 4 << 20;
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf) < 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        if (setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS_, &one, sizeof one) < 0)
            die("port %s:%s: PACKET_QDISC_BYPASS: %s", p->netns, p->ifname, strerror(errno));
        struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = 0, .sll_ifindex = (int)idx};
        if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0)
            die("port %s:%s: bind: %s", p->netns, p->ifname, strerror(errno));
        p->fd = fd;
    }
    close(self);
}

static void alloc_batches(void)
{
    for (uint32_t i = 0; i < nports; i++) {
        struct port *p = &ports[i];
        if (!p->slot)
            p->slot = 64;
        p->bufs = aligned_alloc(64, ((p->slot + 63) & ~(size_t)63) * BATCH_MAX);
        if (!p->bufs)
            die("out of memory");
        p->slot = (p->slot + 63) & ~(size_t)63;
        for (int k = 0; k < BATCH_MAX; k++) {
            p->iov[k].iov_base = p->bufs + p->slot * k;
            p->msgs[k].msg_hdr.msg_iov = &p->iov[k];
            p->msgs[k].msg_hdr.msg_iovlen = 1;
        }
    }
}

/* ---------------------------------------------------------------- the loop */

int dumping;
static FILE *dump_fp;
static int64_t vclock;                    /* the virtual clock of --dump */
static int64_t spin_ns = -1;              /* default: SPIN_FIFO_NS or SPIN_OTHER_NS */
static int fifo;
static int64_t period_start_ns;           /* this breathing period began */
static int64_t slept_ns;                  /* off the CPU since then, by choice */
static uint64_t n_breathers;
int batch_max = 32;

int64_t now_ns(void) { return dumping ? vclock : mono_ns(); }

int64_t wait_until(int64_t t)
{
    if (dumping) {
        if (vclock < t)
            vclock = t;
        return vclock;
    }
    int spin_only = 0;
    for (;;) {
        int64_t now = mono_ns();
        if (now >= t || stop_flag)
            return now;
        if (!spin_only && t - now > spin_ns) {
            /* a long wait wakes earlier (an idle CPU wakes slowly) and then only spins */
            int64_t early = t - now > LONG_WAIT_NS ? WAKE_EARLY_NS : spin_ns;
            spin_only = early > spin_ns;
            int64_t wake = t - early;
            struct timespec ts = {wake / 1000000000LL, wake % 1000000000LL};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
            n_sleeps++;
            slept_ns += mono_ns() - now;
        } else {
            __builtin_ia32_pause();
        }
    }
}

/* A FIFO engine's nap (BREATHE_*), when this period has had too little; returns the time. */
int64_t breathe(int64_t now)
{
    if (fifo && !dumping && now - period_start_ns > BREATHE_PERIOD_NS) {
        if (slept_ns < BREATHE_NS) {
            struct timespec ts = {0, BREATHE_NS - slept_ns};
            nanosleep(&ts, NULL);
            n_breathers++;
            now = mono_ns();
        }
        period_start_ns = now;
        slept_ns = 0;
    }
    return now;
}

void flush_port(struct port *p)
{
    int done = 0, fails = 0;
    if (dumping) {
        done = p->n;
    } else {
        while (done < p->n) {
            int r = sendmmsg(p->fd, p->msgs + done, (unsigned)(p->n - done), 0);
            n_syscalls++;
            if (r > 0) {
                done += r;
                continue;
            }
            int e = errno;
            if ((e != ENOBUFS && e != EAGAIN && e != EINTR) || ++fails >= RETRY_TRIES) {
                last_errno = e;
                break;
            }
            n_retries++;
            struct timespec ts = {0, RETRY_SLEEP_NS};
            nanosleep(&ts, NULL);
        }
    }
    for (int k = 0; k < p->n; k++) {
        if (k < done) {
            n_packets++;
            n_bytes += p->iov[k].iov_len;
            flows[p->flow_of[k]].sent++;
        } else {
            n_errors++;
        }
    }
    p->n = 0;
}

/* Flow fi's next packet into its port's batch (drop: the PFC watchdog's, built for its
 * length and PSN, counted in errors, not sent), and its pacing on. */
static void emit(uint32_t fi, int64_t now, int64_t start, int drop)
{
    struct flow *f = &flows[fi];
    struct port *p = &ports[f->port];
    if (f->pi == 0)
        f->msg_start = now;
    int k = p->n;                          /* the caller left room: k < BATCH_MAX */
    uint8_t *b = p->bufs + p->slot * (size_t)k;
    size_t len = build_frame(f, b, now, f->msg_start);
    int64_t due = f->due;
    if (drop) {
        n_errors++;                        /* as send_flows counts a watchdog drop */
    } else {
        p->n++;
        p->iov[k].iov_len = len;
        p->flow_of[k] = fi;
        note_lateness(now > due ? (uint64_t)(now - due) : 0);
    }
    if (dumping && !drop) {
        uint32_t hdr[2] = {f->port, fi};
        int64_t t[2] = {due, now};
        uint32_t l = (uint32_t)len;
        fwrite(hdr, sizeof hdr, 1, dump_fp);
        fwrite(t, sizeof t, 1, dump_fp);
        fwrite(&l, 4, 1, dump_fp);
        fwrite(b, len, 1, dump_fp);
    }
    /* advance to the next packet */
    f->seq++;
    if (++f->pi == f->npk) {
        f->pi = 0;
        if (++f->mi < f->nmsgs)
            f->npk = msg_packets(f->msgs[f->mi].size, f->mtu);
    }
    if (f->mi >= f->nmsgs) {               /* done: leave the heap */
        heap[0] = heap[--heap_n];
        heap_down(0);
        return;
    }
    int64_t interval = f->rate > 0 ? (int64_t)((double)len * 8e9 / f->rate) : 0;
    int64_t credit = (int64_t)burst * interval;
    if (credit < (int64_t)burst_ns)
        credit = (int64_t)burst_ns;
    int64_t t = due + interval;
    int64_t t2 = start + (int64_t)f->msgs[f->mi].start_ns;
    if (t2 > t) t = t2;
    if (now - credit > t) t = now - credit;
    f->due = t;
    heap_down(0);
}

/* Sends everything (or until the duration, or SIGTERM); returns the end time. */
static int64_t run(int64_t start)
{
    heap = calloc(nflows ? nflows : 1, sizeof *heap);
    if (!heap)
        die("out of memory");
    for (uint32_t i = 0; i < nflows; i++) {
        struct flow *f = &flows[i];
        if (!f->nmsgs)
            continue;
        f->npk = msg_packets(f->msgs[0].size, f->mtu);
        f->due = start + (int64_t)f->msgs[0].start_ns;
        heap[heap_n++] = i;
        heap_up(heap_n - 1);
    }
    int64_t end = duration_ns ? start + (int64_t)duration_ns : 0;
    while (heap_n) {
        int64_t due = flows[heap[0]].due;
        int64_t now = now_ns();
        if (now < due)
            now = wait_until(due);
        if ((end && now >= end) || stop_flag)
            break;
        now = breathe(now);
        int total = 0;
        while (heap_n && flows[heap[0]].due <= now && total < batch_max) {
            struct flow *f = &flows[heap[0]];
            struct port *p = &ports[f->port];
            if (p->n >= BATCH_MAX)
                break;
            int64_t until = gate(f->port, f->dscp, now);
            if (until > 0) {               /* paused: wait, looking again for an XON */
                f->due = until < now + PAUSE_RECHECK_NS ? until : now + PAUSE_RECHECK_NS;
                heap_down(0);
                continue;
            }
            emit(heap[0], now, start, until < 0);
            total++;
        }
        for (uint32_t i = 0; i < nports; i++)
            if (ports[i].n)
                flush_port(&ports[i]);
        n_batches++;
    }
    return now_ns();
}

/* ---------------------------------------------------------------- main */

static void usage(void)
{
    fprintf(stderr, "usage: %s SCHEDULE [--dump FILE [--start NS]] [--no-fifo] [--cpu N] "
                    "[--spin-ns NS] [--batch N] [--feedback-fd FD --feedback-slots N] "
                    "[--pause-fd FD --pause-slots N]\n", prog);
    exit(2);
}

static long long num_arg(const char *opt, const char *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || end == v)
        die("%s: not a number: '%s'", opt, v);
    return x;
}

int main(int argc, char **argv)
{
    const char *sched = NULL, *dump = NULL;
    int64_t vstart = 1000000000LL;
    int want_fifo = 1, cpu = -1, feedback_fd = -1, pause_fd = -1;
    long long feedback_slots = 0, pause_slots = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--dump") && i + 1 < argc) dump = argv[++i];
        else if (!strcmp(a, "--start") && i + 1 < argc) vstart = num_arg(a, argv[++i]);
        else if (!strcmp(a, "--no-fifo")) want_fifo = 0;
        else if (!strcmp(a, "--cpu") && i + 1 < argc) cpu = (int)num_arg(a, argv[++i]);
        else if (!strcmp(a, "--spin-ns") && i + 1 < argc) {
            spin_ns = num_arg(a, argv[++i]);
            if (spin_ns < 0)
                die("--spin-ns must be >= 0");
        }
        else if (!strcmp(a, "--batch") && i + 1 < argc) batch_max = (int)num_arg(a, argv[++i]);
        else if (!strcmp(a, "--feedback-fd") && i + 1 < argc) feedback_fd = (int)num_arg(a, argv[++i]);
        else if (!strcmp(a, "--feedback-slots") && i + 1 < argc) feedback_slots = num_arg(a, argv[++i]);
        else if (!strcmp(a, "--pause-fd") && i + 1 < argc) pause_fd = (int)num_arg(a, argv[++i]);
        else if (!strcmp(a, "--pause-slots") && i + 1 < argc) pause_slots = num_arg(a, argv[++i]);
        else if (a[0] == '-' || sched) usage();
        else sched = a;
    }
    if (!sched)
        usage();
    if (batch_max < 1 || batch_max > BATCH_MAX)
        die("--batch %d: must be 1..%d", batch_max, BATCH_MAX);

    struct sigaction sa = {.sa_handler = on_term};   /* no SA_RESTART: a read() returns EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    load_schedule(sched);
    alloc_batches();
    if (closed_loop) {
        if (dump)
            die("a closed-loop schedule needs the NIC's ACKs: no --dump");
        if (feedback_fd < 0 || feedback_slots < 1 || feedback_slots > (1 << 20))
            die("a closed-loop schedule needs --feedback-fd FD --feedback-slots N (1..%d)", 1 << 20);
        map_feedback(feedback_fd, (uint32_t)feedback_slots);
    }
    if (pfc_on) {
        /* under PFC a flow does not make up for a pause with a burst above its rate */
        burst = 1;
        burst_ns = 0;
    }
    if (pause_fd >= 0 || (pfc_needs_pauses() && !dump)) {
        if (!pfc_on || pause_fd < 0 || pause_slots < 1 || pause_slots > (1 << 16))
            die("PFC needs a schedule with a PFC section and --pause-fd FD --pause-slots N (1..%d)",
                1 << 16);
        map_pauses(pause_fd, (uint32_t)pause_slots);
    }

    if (dump) {
        dumping = 1;
        dump_fp = fopen(dump, "wb");
        if (!dump_fp)
            die("%s: %s", dump, strerror(errno));
        uint32_t v[2] = {SCHED_VERSION, 0};
        fwrite(DUMP_MAGIC, 8, 1, dump_fp);
        fwrite(v, sizeof v, 1, dump_fp);
        vclock = vstart;
        spin_ns = 0;                       /* nothing waits on a virtual clock */
        run(vstart);
        if (fclose(dump_fp) != 0)
            die("%s: %s", dump, strerror(errno));
        dump_fp = NULL;
    }

    int64_t start = vstart, t_end = 0;
    if (!dump) {
        open_sockets();
        if (cpu >= 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpu, &set);
            if (sched_setaffinity(0, sizeof set, &set) < 0)
                die("--cpu %d: %s", cpu, strerror(errno));
        }
        if (want_fifo) {
            struct sched_param sp = {.sched_priority = 1};
            fifo = sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) == 0;
        }
        if (spin_ns < 0)
            spin_ns = fifo ? SPIN_FIFO_NS : SPIN_OTHER_NS;
        prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
        mlockall(MCL_CURRENT);
        printf("ready\n");
        fflush(stdout);
        char line[128];
        size_t n = 0;
        for (;;) {
            if (stop_flag)
                return 0;
            ssize_t r = read(0, line + n, sizeof line - 1 - n);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return 0;                  /* stdin closed before "go": nothing to do */
            n += (size_t)r;
            line[n] = 0;
            if (memchr(line, '\n', n))
                break;
            if (n == sizeof line - 1)
                die("stdin: expected 'go <start_ns>', got a long line");
        }
        /* "go <start_ns>" or "go" (0: now), as hostrun's runner says it */
        long long s = 0;
        char word[8], tail[2];
        int k = sscanf(line, "%7s %lld %1s", word, &s, tail);
        if (k < 1 || k > 2 || strcmp(word, "go") || s < 0)
            die("stdin: expected 'go <start_ns>', got '%.*s'", (int)strcspn(line, "\n"), line);
        start = s ? s : mono_ns();
        period_start_ns = mono_ns();
        t_end = closed_loop ? run_closed(start) : run(start);
    } else {
        t_end = vclock;
    }

    /* the report: one JSON line */
    double elapsed = (double)(t_end - start) / 1e9;
    printf("{\"packets\": %llu, \"bytes\": %llu, \"errors\": %llu, \"elapsed_s\": %.9f, "
           "\"per_flow_packets\": {",
           (unsigned long long)n_packets, (unsigned long long)n_bytes,
           (unsigned long long)n_errors, elapsed);
    for (uint32_t i = 0; i < nflows; i++) {
        uint64_t sum = 0;
        int first = 1;
        for (uint32_t j = 0; j < i; j++)
            if (flows[j].flow_id == flows[i].flow_id) { first = 0; break; }
        if (!first)
            continue;
        for (uint32_t j = i; j < nflows; j++)
            if (flows[j].flow_id == flows[i].flow_id)
                sum += flows[j].sent;
        printf("%s\"%u\": %llu", i ? ", " : "", flows[i].flow_id, (unsigned long long)sum);
    }
    printf("}, ");
    if (closed_loop)
        print_transport();
    if (pfc_on)
        print_pfc(t_end);
    printf("\"lateness_ns\": {\"count\": %llu, \"p50\": %llu, \"p90\": %llu, \"p99\": %llu, "
           "\"max\": %llu}, ",
           (unsigned long long)late_count, (unsigned long long)hist_pct(0.5),
           (unsigned long long)hist_pct(0.9), (unsigned long long)hist_pct(0.99),
           (unsigned long long)late_max);
    printf("\"engine\": {\"version\": %d, \"ports\": %u, \"sockets\": %u, \"flows\": %u, "
           "\"batches\": %llu, \"syscalls\": %llu, \"retries\": %llu, \"sleeps\": %llu, \"breathers\": %llu, "
           "\"batch_max\": %d, \"spin_ns\": %lld, \"fifo\": %s, \"cpu\": %d, \"dump\": %s, "
           "\"stopped\": %s, \"cut_by_duration\": %s, \"unsent_flows\": %u, \"start_ns\": %lld, "
           "\"last_errno\": %d, \"burst\": %u, \"burst_ns\": %llu}}\n",
           SCHED_VERSION, nports, dump ? 0 : nports, nflows, (unsigned long long)n_batches,
           (unsigned long long)n_syscalls, (unsigned long long)n_retries,
           (unsigned long long)n_sleeps, (unsigned long long)n_breathers, batch_max, (long long)spin_ns, fifo ? "true" : "false",
           cpu, dump ? "true" : "false", stop_flag ? "true" : "false",
           (heap_n && !stop_flag) ? "true" : "false", heap_n, (long long)start, last_errno,
           burst, (unsigned long long)burst_ns);
    fflush(stdout);
    return 0;
}
