/* railab send engine, closed loop: every flow is a reliable QP, as
 * dataplane.traffic.reliable / transport run them in Python (the rules are theirs):
 *
 *  - go-back-N: a NAK (PSN sequence error) acknowledges what came before it and the QP
 *    resends from the NAKed packet on; selective repeat resends only NAKed packets;
 *  - both: at most `window` packets unacknowledged; a retransmission timeout without
 *    progress of the oldest unacknowledged packet resends from it;
 *  - a QP joins the NIC when its first message arrives; messages go out in order, the
 *    railab header's msg_start_ns is the message's arrival (FCT counts from it);
 *  - pacing: a QP at its DCQCN rate (or the line rate), all QPs of a port at most at
 *    the port's line rate together, round-robin among the QPs that may send;
 *  - DCQCN reaction point (transport.Dcqcn): CNP cuts, alpha decay, timer and byte
 *    counter increases, fast recovery, additive and hyper increase;
 *  - PFC (pause.c): a QP whose priority is paused waits (its timers run on), and the
 *    watchdog's drops count as sent.
 *
 * The feedback comes from the XDP NIC on the host ports: nic_reqs (bpf/nic/nic.h), a
 * memory-mapped array written by the program and only read here. ACK PSNs are
 * cumulative (the newest is kept), NAKs sit in a ring of the latest NIC_NAK_RING and CNPs
 * are counted: the engine polls them between sends, at most POLL_NS apart.
 *
 * Transport section of the schedule (little-endian, load_transport):
 *   u32 kind (1 go-back-n, 2 selective-repeat), u32 window, u64 rto_ns,
 *   u32 burst_packets, u32 dcqcn (0/1), f64 g, u64 alpha_period_ns, u64 rate_period_ns,
 *   u64 byte_counter, u32 fast_recovery, u32 reserved, f64 rai_fraction,
 *   f64 rhai_fraction, f64 min_rate_fraction, u64 limit_ns (how long past the duration
 *   a QP may still finish), u64 sample_ns (rate timeline; 0: none),
 *   then nports x f64 line_bps (the port's wall-clock line rate).
 */
#include "engine.h"      /* first: it defines _GNU_SOURCE */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TRANSPORT_LEN 104
#define KIND_GO_BACK_N 1
#define KIND_SELECTIVE 2
#define NONE UINT32_MAX
/* Feedback and timers are looked at between sends, and at least this often while waiting.
 * At railab's scales a wall microsecond is well under a real-fabric nanosecond. */
#define POLL_NS 5000
#define TIMER_NS 10000
#define RESEND_MAX 64

/* nic.h's struct nic_req */
#define NAK_RING 16
struct nic_req {
    uint64_t acks, naks, cnps, becns;
    uint32_t ack_psn, flags;
    uint32_t nak_psn[NAK_RING];
    uint32_t pad[6];
};
#define REQ_ACKED 1

struct sample {
    double t, rc, rate;
};

struct qp {
    uint32_t npos;               /* packets of every message */
    uint32_t *first;             /* position of message m's first packet (nmsgs + 1) */
    uint32_t una, nxt, sent_max;
    uint32_t resend[RESEND_MAX]; /* selective repeat: NAKed positions, ascending */
    uint32_t nresend;
    int64_t progress_ns;
    int joined, waiting, done;
    uint64_t seen_acks, seen_naks, seen_cnps;
    uint64_t acks, naks, timeouts, retx_packets, retx_bytes, cnps;
    double line, rc, rt, alpha;
    int64_t next_alpha, next_rate;
    uint64_t timer_events, byte_events, bytes;
    uint64_t new_bytes;
    struct sample *samples;
    uint32_t nsamples, cap;
};

int closed_loop;

static struct {
    uint32_t kind, window, burst_packets, dcqcn, fast_recovery;
    uint64_t rto_ns, alpha_period_ns, rate_period_ns, byte_counter, limit_ns, sample_ns;
    double g, rai, rhai, min_rate;
    double *line_bps;
} tp;

static const volatile struct nic_req *feedback;
static uint32_t feedback_slots;
static struct qp *qps;
static uint32_t ndone, nclosed;
static int64_t *port_free;
static uint64_t served_stamp;    /* the round-robin clock: one tick per packet sent */

static double f64(const uint8_t *p)
{
    double v;
    memcpy(&v, p, 8);
    return v;
}

void load_transport(const uint8_t *p, size_t len, const char *path)
{
    if (len != TRANSPORT_LEN + 8 * (size_t)nports)
        die("%s: transport section of %zu bytes, %zu expected for %u ports", path, len,
            TRANSPORT_LEN + 8 * (size_t)nports, nports);
    tp.kind = le32(p);
    tp.window = le32(p + 4);
    tp.rto_ns = le64(p + 8);
    tp.burst_packets = le32(p + 16);
    tp.dcqcn = le32(p + 20);
    tp.g = f64(p + 24);
    tp.alpha_period_ns = le64(p + 32);
    tp.rate_period_ns = le64(p + 40);
    tp.byte_counter = le64(p + 48);
    tp.fast_recovery = le32(p + 56);
    tp.rai = f64(p + 64);
    tp.rhai = f64(p + 72);
    tp.min_rate = f64(p + 80);
    tp.limit_ns = le64(p + 88);
    tp.sample_ns = le64(p + 96);
    if (tp.kind != KIND_GO_BACK_N && tp.kind != KIND_SELECTIVE)
        die("%s: transport kind %u (1 go-back-n, 2 selective-repeat)", path, tp.kind);
    if (tp.window < 1 || tp.window > 100)
        die("%s: window %u: 1..100 (the NIC's receive window is 128 packets)", path, tp.window);
    if (tp.rto_ns < 1 || (tp.dcqcn && (tp.alpha_period_ns < 1 || tp.rate_period_ns < 1 ||
                                       tp.byte_counter < 1 || !(tp.g > 0 && tp.g < 1))))
        die("%s: a transport time, counter or gain out of range", path);
    tp.line_bps = calloc(nports ? nports : 1, sizeof *tp.line_bps);
    if (!tp.line_bps)
        die("out of memory");
    for (uint32_t i = 0; i < nports; i++) {
        tp.line_bps[i] = f64(p + TRANSPORT_LEN + 8 * i);
        if (!(tp.line_bps[i] > 0) || tp.line_bps[i] > 1e15)
            die("%s: port %u: line rate %g bit/s", path, i, tp.line_bps[i]);
    }
    closed_loop = 1;
}

void map_feedback(int fd, uint32_t slots)
{
    feedback = map_readonly(fd, slots, sizeof(struct nic_req), "--feedback-fd");
    feedback_slots = slots;
    for (uint32_t i = 0; i < nflows; i++)
        if (flows[i].fb_slot >= slots)
            die("flow %u: feedback slot %u of %u", flows[i].flow_id, flows[i].fb_slot, slots);
}

/* ---------------------------------------------------------------- the requester's rules */

/* the position whose PSN is psn, the one nearest to `near` (24-bit wrap) */
static uint32_t position(uint32_t psn, uint32_t psn0, uint32_t near)
{
    int32_t d = (int32_t)((psn - psn0 - near) & PSN_MASK);
    if (d >= (1 << 23))
        d -= 1 << 24;
    int64_t pos = (int64_t)near + d;
    return pos < 0 ? 0 : (uint32_t)pos;
}

static void advance(struct qp *q, uint32_t una, int64_t now)
{
    if (una > q->una) {
        q->una = una < q->npos ? una : q->npos;
        q->progress_ns = now;
        if (q->nxt < q->una)
            q->nxt = q->una;
    }
}

static void add_resend(struct qp *q, uint32_t pos)
{
    uint32_t i = 0;
    while (i < q->nresend && q->resend[i] < pos)
        i++;
    if ((i < q->nresend && q->resend[i] == pos) || q->nresend == RESEND_MAX)
        return;                  /* a full list: the timeout finds what is left */
    memmove(q->resend + i + 1, q->resend + i, (q->nresend - i) * sizeof *q->resend);
    q->resend[i] = pos;
    q->nresend++;
}

static void on_nak(struct qp *q, uint32_t pos, int64_t now)
{
    if (tp.kind == KIND_SELECTIVE) {
        if (pos >= q->una && pos < q->sent_max)
            add_resend(q, pos);
        return;
    }
    advance(q, pos, now);        /* a sequence-error NAK acknowledges what came before */
    if (q->una <= pos && pos <= q->sent_max)
        q->nxt = pos;
}

static uint32_t next_position(struct qp *q)
{
    uint32_t drop = 0;
    while (drop < q->nresend && q->resend[drop] < q->una)
        drop++;
    if (drop) {
        memmove(q->resend, q->resend + drop, (q->nresend - drop) * sizeof *q->resend);
        q->nresend -= drop;
    }
    if (q->nresend)
        return q->resend[0];
    if (q->nxt < q->npos && q->nxt - q->una < tp.window)
        return q->nxt;
    return NONE;
}

static void check_timeout(struct qp *q, int64_t now)
{
    if (q->una >= q->sent_max || now - q->progress_ns < (int64_t)tp.rto_ns)
        return;
    q->timeouts++;
    q->progress_ns = now;
    if (tp.kind == KIND_SELECTIVE)
        add_resend(q, q->una);
    else
        q->nxt = q->una;
}

/* ---------------------------------------------------------------- DCQCN */

static void dcqcn_increase(struct qp *q)
{
    uint64_t f = tp.fast_recovery;
    uint64_t lo = q->timer_events < q->byte_events ? q->timer_events : q->byte_events;
    uint64_t hi = q->timer_events < q->byte_events ? q->byte_events : q->timer_events;
    if (lo > f)
        q->rt += (double)(lo - f) * tp.rhai * q->line;
    else if (hi > f)
        q->rt += tp.rai * q->line;
    if (q->rt > q->line)
        q->rt = q->line;
    q->rc = (q->rt + q->rc) / 2;
    if (q->rc > q->line)
        q->rc = q->line;
}

static void dcqcn_cnp(struct qp *q, int64_t now)
{
    q->rt = q->rc;
    q->rc *= 1 - q->alpha / 2;
    if (q->rc < q->line * tp.min_rate)
        q->rc = q->line * tp.min_rate;
    q->alpha = (1 - tp.g) * q->alpha + tp.g;
    q->timer_events = q->byte_events = q->bytes = 0;
    q->next_alpha = now + (int64_t)tp.alpha_period_ns;
    q->next_rate = now + (int64_t)tp.rate_period_ns;
}

static void dcqcn_tick(struct qp *q, int64_t now)
{
    while (now >= q->next_alpha) {
        q->alpha *= 1 - tp.g;
        q->next_alpha += (int64_t)tp.alpha_period_ns;
    }
    while (now >= q->next_rate) {
        q->timer_events++;
        dcqcn_increase(q);
        q->next_rate += (int64_t)tp.rate_period_ns;
    }
}

static void dcqcn_sent(struct qp *q, uint64_t nbytes)
{
    q->bytes += nbytes;
    while (q->bytes >= tp.byte_counter) {
        q->bytes -= tp.byte_counter;
        q->byte_events++;
        dcqcn_increase(q);
    }
}

/* ---------------------------------------------------------------- the loop */

static void join(struct flow *f, int64_t now)
{
    struct qp *q = f->qp;
    q->joined = 1;
    q->progress_ns = now;
    q->rc = q->rt = q->line;
    q->alpha = 1.0;
    q->next_alpha = now + (int64_t)tp.alpha_period_ns;
    q->next_rate = now + (int64_t)tp.rate_period_ns;
}

/* What came back since the last look: ACKs, NAKs, CNPs. */
static void read_feedback(struct flow *f, int64_t now)
{
    struct qp *q = f->qp;
    const volatile struct nic_req *r = &feedback[f->fb_slot];
    uint64_t naks = r->naks, cnps = r->cnps, acks = r->acks;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (naks != q->seen_naks) {
        uint64_t from = naks - q->seen_naks > NAK_RING ? naks - NAK_RING : q->seen_naks;
        for (uint64_t n = from; n < naks; n++)
            on_nak(q, position(r->nak_psn[n % NAK_RING], f->psn0, q->una), now);
        q->naks += naks - q->seen_naks;
        q->seen_naks = naks;
    }
    if (r->flags & REQ_ACKED)
        advance(q, position(r->ack_psn, f->psn0, q->una) + 1, now);
    q->acks += acks - q->seen_acks;
    q->seen_acks = acks;
    for (; q->seen_cnps < cnps; q->seen_cnps++) {
        q->cnps++;
        if (tp.dcqcn)
            dcqcn_cnp(q, now);
    }
}

/* A QP that was waiting (window full, or everything sent and not acknowledged) goes back
 * into the heap once it may send. */
static void wake(uint32_t fi)
{
    struct qp *q = flows[fi].qp;
    if (!q->waiting || q->done)
        return;
    if (q->una >= q->npos) {
        q->done = 1;
        ndone++;
        return;
    }
    if (next_position(q) == NONE)
        return;
    q->waiting = 0;
    heap[heap_n++] = fi;
    heap_up(heap_n - 1);
}

static void sample(int64_t now, int64_t start)
{
    for (uint32_t i = 0; i < nflows; i++) {
        struct qp *q = flows[i].qp;
        if (!q->joined || q->done)
            continue;
        if (q->nsamples == q->cap) {
            q->cap = q->cap ? 2 * q->cap : 64;
            q->samples = realloc(q->samples, q->cap * sizeof *q->samples);
            if (!q->samples)
                die("out of memory");
        }
        q->samples[q->nsamples++] = (struct sample){(double)(now - start) / 1e9,
                                                    tp.dcqcn ? q->rc : q->line,
                                                    (double)q->new_bytes * 8e9 / (double)tp.sample_ns};
        q->new_bytes = 0;
    }
}

/* Puts flow fi's packet at `pos` into its port's batch (drop: the PFC watchdog's, it
 * counts as sent and is not transmitted, as reliable._send) and moves its pacing on. */
static void send_position(uint32_t fi, uint32_t pos, int64_t now, int64_t start, int drop)
{
    struct flow *f = &flows[fi];
    struct qp *q = f->qp;
    struct port *p = &ports[f->port];
    uint32_t lo = 0, hi = f->nmsgs;
    while (hi - lo > 1) {        /* the message holding pos */
        uint32_t mid = (lo + hi) / 2;
        if (q->first[mid] <= pos) lo = mid; else hi = mid;
    }
    f->mi = lo;
    f->pi = pos - q->first[lo];
    f->npk = q->first[lo + 1] - q->first[lo];
    f->seq = pos;
    int k = p->n;                /* the caller left room: k < BATCH_MAX */
    uint8_t *b = p->bufs + p->slot * (size_t)k;
    size_t len = build_frame(f, b, now, start + (int64_t)f->msgs[lo].start_ns);
    if (!drop) {
        p->n++;
        p->iov[k].iov_len = len;
        p->flow_of[k] = fi;
        note_lateness(now > f->due ? (uint64_t)(now - f->due) : 0);
    }

    double bits = (double)len * 8;
    double rate = tp.dcqcn ? q->rc : q->line;
    int64_t gap = (int64_t)(bits * 1e9 / rate);
    int64_t floor_due = now - (int64_t)tp.burst_packets * gap;
    f->due = (f->due > floor_due ? f->due : floor_due) + gap;
    int64_t line_ns = (int64_t)(bits * 1e9 / q->line);
    int64_t floor_port = now - (int64_t)tp.burst_packets * line_ns;
    port_free[f->port] = (port_free[f->port] > floor_port ? port_free[f->port] : floor_port) + line_ns;

    if (q->una >= q->sent_max)
        q->progress_ns = now;    /* nothing was outstanding: the timer starts now */
    if (q->nresend && q->resend[0] == pos) {
        memmove(q->resend, q->resend + 1, (q->nresend - 1) * sizeof *q->resend);
        q->nresend--;
    } else if (pos == q->nxt) {
        q->nxt++;
    }
    if (pos < q->sent_max) {
        q->retx_packets++;
        q->retx_bytes += len;
    } else {
        q->sent_max = pos + 1;
        q->new_bytes += len;
    }
    if (tp.dcqcn)
        dcqcn_sent(q, len);
}

int64_t run_closed(int64_t start)
{
    heap = calloc(nflows ? nflows : 1, sizeof *heap);
    qps = calloc(nflows ? nflows : 1, sizeof *qps);
    port_free = calloc(nports ? nports : 1, sizeof *port_free);
    if (!heap || !qps || !port_free)
        die("out of memory");
    for (uint32_t p = 0; p < nports; p++)
        port_free[p] = start;
    if (pfc_on)
        tp.burst_packets = 1;    /* no burst above the rate after a pause (reliable.run's) */
    for (uint32_t i = 0; i < nflows; i++) {
        struct flow *f = &flows[i];
        struct qp *q = &qps[i];
        f->qp = q;
        q->line = tp.line_bps[f->port];
        q->first = calloc(f->nmsgs + 1, sizeof *q->first);
        if (!q->first)
            die("out of memory");
        uint64_t n = 0;
        for (uint32_t m = 0; m < f->nmsgs; m++) {
            q->first[m] = (uint32_t)n;
            n += msg_packets(f->msgs[m].size, f->mtu);
        }
        if (n > (1u << 30))
            die("flow %u: %llu packets: too many for one QP", f->flow_id, (unsigned long long)n);
        q->first[f->nmsgs] = (uint32_t)n;
        q->npos = (uint32_t)n;
        q->seen_acks = feedback[f->fb_slot].acks;   /* a reused slot: count from here */
        q->seen_naks = feedback[f->fb_slot].naks;
        q->seen_cnps = feedback[f->fb_slot].cnps;
        nclosed++;
        if (!q->npos) {
            q->done = 1;
            ndone++;
            continue;
        }
        f->due = start + (int64_t)f->msgs[0].start_ns;
        heap[heap_n++] = i;
        heap_up(heap_n - 1);
    }
    int64_t hard_end = duration_ns || tp.limit_ns ? start + (int64_t)(duration_ns + tp.limit_ns) : 0;
    int64_t next_timer = start, next_sample = tp.sample_ns ? start + (int64_t)tp.sample_ns : 0;
    int64_t now = now_ns();
    while (ndone < nclosed && !stop_flag) {
        now = breathe(now_ns());
        if (hard_end && now >= hard_end)
            break;
        for (uint32_t i = 0; i < nflows; i++) {
            if (flows[i].qp->joined && !flows[i].qp->done) {
                read_feedback(&flows[i], now);
                if (now >= next_timer) {
                    check_timeout(flows[i].qp, now);
                    if (tp.dcqcn)
                        dcqcn_tick(flows[i].qp, now);
                }
                wake(i);
            }
        }
        if (now >= next_timer)
            next_timer = now + TIMER_NS;
        if (next_sample && now >= next_sample) {
            sample(now, start);
            next_sample += (int64_t)tp.sample_ns;
        }
        int total = 0;
        while (heap_n && flows[heap[0]].due <= now && total < batch_max) {
            uint32_t fi = heap[0];
            struct flow *f = &flows[fi];
            struct qp *q = f->qp;
            if (!q->joined)
                join(f, now);
            uint32_t pos = next_position(q);
            if (pos == NONE) {   /* nothing may go: wait for the NIC's feedback */
                heap[0] = heap[--heap_n];
                heap_down(0);
                q->waiting = 1;
                wake(fi);
                continue;
            }
            int64_t t = port_free[f->port];
            if (pos >= q->sent_max) {
                uint32_t m = 0, hi = f->nmsgs;
                while (hi - m > 1) {
                    uint32_t mid = (m + hi) / 2;
                    if (q->first[mid] <= pos) m = mid; else hi = mid;
                }
                int64_t arrival = start + (int64_t)f->msgs[m].start_ns;
                if (arrival > t)
                    t = arrival;
            }
            if (t > now) {
                f->due = t > f->due ? t : f->due;
                heap_down(0);
                continue;
            }
            if (ports[f->port].n >= BATCH_MAX)
                break;
            int64_t until = gate(f->port, f->dscp, now);
            if (until > 0) {     /* PFC: its priority is paused; its timers run on */
                int64_t recheck = until < now + PAUSE_RECHECK_NS ? until : now + PAUSE_RECHECK_NS;
                f->due = recheck > f->due ? recheck : f->due;
                heap_down(0);
                continue;
            }
            send_position(fi, pos, now, start, until < 0);
            f->served = ++served_stamp;
            heap_down(0);
            total++;
        }
        if (total) {
            for (uint32_t i = 0; i < nports; i++)
                if (ports[i].n)
                    flush_port(&ports[i]);
            n_batches++;
        } else if (heap_n && flows[heap[0]].due < now + POLL_NS) {
            wait_until(flows[heap[0]].due);
        } else {
            /* nothing due soon: nap rather than spin, the fabric needs the CPU */
            struct timespec ts = {0, POLL_NS};
            nanosleep(&ts, NULL);
        }
    }
    for (uint32_t i = 0; i < nflows; i++)
        flows[i].sent = flows[i].qp->sent_max;   /* per-flow packets: each position once */
    return now_ns();
}

void print_transport(void)
{
    printf("\"transport\": {");
    for (uint32_t i = 0; i < nflows; i++) {
        struct qp *q = flows[i].qp;
        printf("%s\"%u\": {\"acks\": %llu, \"naks\": %llu, \"timeouts\": %llu, \"retx_packets\": %llu, "
               "\"retx_bytes\": %llu, \"cnps\": %llu, \"packets\": %u, \"unacked_packets\": %u, "
               "\"alpha\": ",
               i ? ", " : "", flows[i].flow_id, (unsigned long long)q->acks, (unsigned long long)q->naks,
               (unsigned long long)q->timeouts, (unsigned long long)q->retx_packets,
               (unsigned long long)q->retx_bytes, (unsigned long long)q->cnps, q->npos, q->npos - q->una);
        if (tp.dcqcn && q->joined)
            printf("%.9g", q->alpha);
        else
            printf("null");
        printf(", \"rate_timeline\": [");
        for (uint32_t s = 0; s < q->nsamples; s++)
            printf("%s[%.4f, %.6g, %.6g]", s ? ", " : "", q->samples[s].t, q->samples[s].rc,
                   q->samples[s].rate);
        printf("]}");
    }
    printf("}, \"transport_kind\": \"%s\", ", tp.kind == KIND_SELECTIVE ? "selective-repeat" : "go-back-n");
}
