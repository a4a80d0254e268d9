/* railab send engine: what engine.c (schedule, frames, sockets, the open-loop run) and
 * closed.c (the reliable transports and DCQCN) share. */
#ifndef RAILAB_ENGINE_H
#define RAILAB_ENGINE_H

#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <zlib.h>

#define SCHED_MAGIC "RLENGSCH"
#define DUMP_MAGIC "RLENGDMP"
#define SCHED_VERSION 2
#define HDR_LEN 48
#define PORT_LEN 288
#define FLOW_LEN 68
#define MSG_LEN 16

#define ETH_HLEN_ 14
#define IP_HLEN 20
#define UDP_HLEN 8
#define BTH_LEN 12
#define RETH_LEN 16
#define RAILAB_HLEN 48
#define ICRC_LEN 4
#define ROCE_PORT 4791
#define PSN_MASK 0xFFFFFFu
#define MTU_MIN (2 * RAILAB_HLEN)
#define MTU_MAX 9000
#define FILLER 0x5A
#define PACKET_QDISC_BYPASS_ 20

#define BATCH_MAX 64
/* Waits longer than the spin window sleep (clock_nanosleep, 1 ns timer slack) until the
 * window's start, then spin. The window is 20 us under SCHED_FIFO too: with a 2 us window
 * a FIFO engine pacing 100 k packets/s slept between every two packets and once per run
 * fell 25-29 ms behind (p99 lateness 11.5 ms, against 46 us with 20 us; Intel Xeon, 2 CPUs,
 * kernel 6.18). The breathing below is what leaves the CPU to others. */
#define SPIN_FIFO_NS 20000
#define SPIN_OTHER_NS 20000
/* A wait longer than LONG_WAIT_NS sleeps until WAKE_EARLY_NS before the due time, then spins. */
#define LONG_WAIT_NS 50000
#define WAKE_EARLY_NS 25000
/* A FIFO engine leaves its CPU to normal tasks for at least BREATHE_NS of every
 * BREATHE_PERIOD_NS (7.5 %), in short naps (a packet due in one is at most that late). The
 * kernel guarantees normal tasks 5 % of a CPU (its fair server: 50 ms a second); a
 * spinning engine that left them less was preempted for up to 50 ms at once (measured: a
 * 53 ms gap with `yes` on its CPU and 20 us naps every 2 ms; none over 0.6 ms with 6-10 %
 * in naps of 50-200 us). */
#define BREATHE_PERIOD_NS 200000
#define BREATHE_NS 15000
#define RETRY_TRIES 50
#define RETRY_SLEEP_NS 20000

/* lateness histogram: 0-63 ns exact, then 32 steps per power of two (3 %) */
#define HIST_SUB 32
#define HIST_SLOTS (64 + HIST_SUB * 58)

struct msg {
    uint32_t msg_id, size;
    uint64_t start_ns;
};

/* CRC-32 of a frame's constant tail (filler + pad) for one payload length, and zlib's
 * operator to append it: the per-packet CRC then runs over the variable bytes only */
struct qp;

struct tail_crc {
    uint32_t plen;
    uLong crc, op;
};
#define TAIL_CACHE 4

struct flow {
    uint32_t port, flow_id;
    uint8_t smac[6], dmac[6], sip[4], dip[4];
    uint16_t sport;
    uint8_t kind, dscp, ecn;
    uint32_t dqp, sqp, psn0, mtu;
    double rate;
    uint32_t nmsgs;
    struct msg *msgs;
    /* state */
    uint32_t mi, pi, npk, seq;
    int64_t due, msg_start;
    uint64_t sent;
    struct tail_crc tails[TAIL_CACHE];
    uint32_t tail_next;
    /* closed loop (closed.c) */
    uint32_t fb_slot;            /* nic_reqs slot of this QP's ACKs, NAKs and CNPs */
    uint64_t served;             /* when the NIC last sent for it: ties go round-robin */
    struct qp *qp;               /* NULL in open loop */
};

struct port {
    char netns[256], ifname[32];
    int fd;
    size_t slot;                 /* bytes per frame buffer */
    uint8_t *bufs;
    struct mmsghdr msgs[BATCH_MAX];
    struct iovec iov[BATCH_MAX];
    uint32_t flow_of[BATCH_MAX];
    int n;
};


/* engine.c */
extern const char *prog;
extern volatile sig_atomic_t stop_flag;
extern struct port *ports;
extern struct flow *flows;
extern uint32_t nports, nflows, burst;
extern uint64_t burst_ns, duration_ns;
extern uint64_t n_packets, n_bytes, n_errors, n_batches;
extern uint32_t *heap, heap_n;
extern int dumping, batch_max;

void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
uint32_t le32(const uint8_t *p);
uint64_t le64(const uint8_t *p);
uint32_t msg_packets(uint32_t size, uint32_t mtu);
size_t build_frame(struct flow *f, uint8_t *b, int64_t ts, int64_t msg_start);
void heap_down(uint32_t i);
void heap_up(uint32_t i);
int64_t now_ns(void);
int64_t wait_until(int64_t t);
int64_t breathe(int64_t now);
void flush_port(struct port *p);
void note_lateness(uint64_t late);
const void *map_readonly(int fd, uint32_t slots, size_t slot_size, const char *option);

/* pause.c */
#define PAUSE_RECHECK_NS 200000  /* a paused flow looks for an XON this often (sender.py's) */
extern int pfc_on;             /* the schedule holds a PFC section */
void load_pfc(const uint8_t *p, size_t len, const char *path);
int pfc_needs_pauses(void);    /* some port has a nic_pauses slot */
void map_pauses(int fd, uint32_t slots);
/* 0: send now; -1: the PFC watchdog drops the frame; else until when its priority is paused */
int64_t gate(uint32_t port, uint8_t dscp, int64_t now);
void print_pfc(int64_t now);

/* closed.c */
extern int closed_loop;        /* the schedule holds a transport: every flow is a reliable QP */
void load_transport(const uint8_t *p, size_t len, const char *path);
void map_feedback(int fd, uint32_t slots);
int64_t run_closed(int64_t start);
void print_transport(void);

#endif
