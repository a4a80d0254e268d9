/* railab emulated RoCE NIC: the structs and constants Python shares with the programs
 * (dataplane/nic/responder.py mirrors every one of them; tests/bpf/test_nic_responder.py
 * checks the sizes against a compiled object).
 *
 * Every counter is 64 bits: the accounting of one QP is done under its spin lock, and
 * a later atomic update (bcc's LLVM rejects 32-bit atomics) needs no layout change. */
#ifndef RAILAB_NIC_H
#define RAILAB_NIC_H

#ifndef NIC_MAX_QPS
#define NIC_MAX_QPS 1024
#endif

/* nic_cfg.mode. Zero (an unconfigured map) is OFF so that a program attached before
 * Python wrote its configuration changes nothing. */
#define NIC_MODE_OFF     0   /* every frame XDP_PASS, untouched and uncounted */
#define NIC_MODE_COUNT   1   /* per-QP receive accounting; every frame XDP_PASS */
#define NIC_MODE_RESPOND 2   /* accounting + go-back-N responder (ACK, NAK, CNP by XDP_TX) */

/* nic_cfg.flags */
#define NIC_F_CONSUME    1   /* data frames the program booked but did not answer: XDP_DROP
                              * (the NIC has them; no Python receiver needs them) */
#define NIC_F_OPEN_LOOP  2   /* RESPOND as an open-loop receiver (receiver.Responder): an ACK
                              * only for an ack-request, with that packet's PSN; no NAK */
#define NIC_F_SELECTIVE  4   /* RESPOND with selective repeat: out-of-order packets are kept,
                              * ACKs are cumulative, a hole open nak_delay gets its own NAK */

struct nic_cfg {
    __u32 mode;
    __u32 flags;
    __u32 ack_every;         /* ACK every N in-order packets (0: only on ack-request) */
    __u16 reply_sport;       /* UDP source port of ACK/NAK/CNP (host order) */
    __u8  ack_dscp;
    __u8  cnp_dscp;
    __u64 ack_delay_ns;      /* wall ns: ACK the first in-order packet this long after the last ACK (0: off) */
    __u64 cnp_interval_ns;   /* wall ns: at most one CNP per QP per interval (0: one per CE packet) */
    /* delivered bytes over time (nic_rx_bins): bin i holds [origin + i*bin_ns, + bin_ns) */
    __u64 bin_origin_ns;     /* CLOCK_MONOTONIC; 0: no bins */
    __u64 bin_ns;
    __u64 nak_delay_ns;      /* wall ns: selective repeat NAKs a hole open this long */
    /* CLOCK_MONOTONIC (0: off): a data frame sent before it is an earlier run's, held in a
     * paused queue; booked, it would become its QP's position 0 and the run's frames lost */
    __u64 not_before_ns;
};

#ifndef NIC_RX_BINS
#define NIC_RX_BINS 16384
#endif
#ifndef NIC_EVENT_PAGES
#define NIC_EVENT_PAGES 256      /* ring buffer of 1 MiB: 32 k message completions unread */
#endif

/* nic_events (ring buffer): one record per message whose every packet arrived */
struct nic_msg_event {
    __u32 daddr;             /* network order */
    __u32 dqpn;
    __u32 flow_id;
    __u32 msg_id;
    __u64 done_ns;           /* CLOCK_MONOTONIC when its last missing packet arrived */
    __u64 msg_ns;            /* done_ns - the send time of its first packet */
    __u32 msg_bytes;         /* the message's size (railab header) */
    __u32 _pad;
};

/* per-CPU counters of the program (index into nic_counters) */
#define NIC_C_RX          0   /* every frame seen (mode != OFF) */
#define NIC_C_NOT_ROCE    1   /* not Ethernet/IPv4(no options, not a fragment)/UDP 4791 */
#define NIC_C_NOT_DATA    2   /* RoCE, but no data opcode (ACK, CNP, ...) */
#define NIC_C_NO_RAILAB   3   /* data opcode without a railab header */
#define NIC_C_DATA        4   /* railab data frames booked to a QP */
#define NIC_C_QP_FULL     5   /* a new QP found nic_qps full: passed, not booked */
#define NIC_C_ACK         6
#define NIC_C_NAK         7
#define NIC_C_CNP         8
#define NIC_C_CNP_DEFER   9   /* a CNP was due with an ACK/NAK: the ACK/NAK went (BECN set) */
#define NIC_C_PASS       10
#define NIC_C_DROP       11
#define NIC_C_TX_FAIL    12   /* the answer could not be written (adjust_tail refused: frame passed) */
#define NIC_C_NO_TABLE   13   /* RESPOND without the ICRC table loaded: booked, not answered */
#define NIC_C_EVENT_LOST 14   /* a message completion the ring buffer had no room for */
#define NIC_C_BIN_OUT    15   /* delivered bytes outside the bins (before origin, past the last) */
#define NIC_C_FEEDBACK   16   /* ACK, NAK or CNP for one of our requesters: booked in nic_reqs, dropped */
#define NIC_C_FB_UNKNOWN 17   /* ACK, NAK or CNP for a QP that is not ours: passed */
#define NIC_C_PAUSE      18   /* PFC frame from a registered switch port: booked in nic_pauses, dropped */
#define NIC_C_PAUSE_UNKNOWN 19 /* PFC frame from a MAC not in nic_pause_ports: passed */
#define NIC_C_STALE      20   /* a data frame stamped before not_before_ns: not booked */
#define NIC_C_MAX        21

#define NIC_REORDER_SLOTS 32   /* reorder_hist[min(distance, 31)] */
#define NIC_LOG_SLOTS    128   /* lat_hist / msg_hist: see nic_log_slot() */
#define NIC_MSG_SLOTS      8   /* messages of a QP counted at once (msg_id % 8) */
#define NIC_SEEN_BITS    128   /* receive window behind the highest PSN (seen_lo, seen_hi) */

/* nic_qp.flags */
#define NIC_QP_INIT      1
#define NIC_QP_NAK_OPEN  2     /* go-back-N: the NAK for the current hole went out */
#define NIC_QP_CNP_SENT  4     /* last_cnp_ns is valid */
#define NIC_QP_ACK_SENT  8     /* last_ack_ns is valid */
#define NIC_QP_ACK_OWED 16     /* selective repeat: an ack-requested packet arrived beyond a
                                * hole; the packet that fills up to it is ACKed (else the
                                * requester waits out its RTO for an ACK nothing would send) */

struct nic_qp_key {
    __u32 daddr;             /* our address, network order */
    __u32 dqpn;              /* our QP (BTH destination QP), host order */
};

struct nic_msg_slot {
    __u32 msg_id;
    __u32 got;               /* distinct packets of msg_id received */
};

/* Loss windows (stats.h nic_loss_*; dataplane.nic.report finishes them): a run of lost
 * positions is closed when its last position leaves the 128-PSN window unfilled; it is
 * kept as the send stamps of the delivered positions around it and its length. */
#define NIC_LOSS_SLOTS    64   /* nic_loss.win: windows 0-61 in slots 0-61, then the */
#define NIC_LOSS_LAST     62   /* latest one in slot 62 (window 62 and every later one) */
#define NIC_LOSS_SCRATCH  63   /* what the branch-free slide writes when nothing closes */

/* nic_loss.flags: why a QP's loss timing is unknown (loss_timing's notes) */
#define NIC_LOSS_NO_STAMP  1   /* a packet without a send stamp arrived */
#define NIC_LOSS_BACKWARDS 2   /* a stamp lower than the delivered position's before it */
#define NIC_LOSS_AT_START  4   /* positions lost before the first delivered one */
#define NIC_LOSS_FLAT      8   /* a window whose closing stamp is not after its opening one */

struct nic_loss_window {
    __u64 t0;                /* send stamp of the delivered position before the lost ones */
    __u64 t1;                /* send stamp of the delivered position after them */
    __u64 lost;              /* positions lost in between */
};

struct nic_loss {
    __u64 flags;
    __u64 t0;                /* stamp of the last delivered position that left the window (0: none) */
    __u64 run;               /* positions lost since it (the window being built) */
    __u64 windows;           /* windows closed (every one; slots: NIC_LOSS_SLOTS) */
    struct nic_loss_window win[NIC_LOSS_SLOTS];
    __u64 stamp[NIC_SEEN_BITS];   /* send stamp of each delivered position in the window, by PSN % 128 */
};

struct nic_qp {
    struct bpf_spin_lock lock;
    __u32 flags;
    /* who sends to this QP (from its latest frame) */
    __u32 saddr;             /* network order */
    __u32 src_qp;            /* the requester's QP: dest QP of our ACKs and CNPs */
    __u32 flow_id;           /* railab flow id */
    __u32 sport;
    /* responder (go-back-N, as dataplane.traffic.transport.QpResponder) */
    __u32 psn0;              /* PSN of position 0 (first frame's PSN - its railab seq) */
    __u32 epsn;              /* expected PSN */
    __u32 msn;               /* messages delivered in order (AETH MSN) */
    __u32 unacked;           /* in-order packets since the last ACK */
    __u64 last_ack_ns;
    __u64 last_cnp_ns;
    /* receive accounting (as dataplane.traffic.receiver.FlowStats) */
    __u32 highest;           /* highest PSN seen */
    __u32 _pad;
    __u64 seen_lo;           /* bit i: PSN highest - i arrived (i < 64) */
    __u64 seen_hi;           /* bit i: PSN highest - 64 - i arrived */
    __u64 packets;           /* distinct packets (not duplicates) */
    __u64 bytes;             /* their frame bytes */
    __u64 payload_bytes;     /* their IB payload bytes */
    __u64 duplicates;
    __u64 out_of_order;      /* packets that filled a hole */
    __u64 holes;             /* PSNs skipped when a higher one arrived (ever) */
    __u64 late;              /* older than the window: hole or duplicate unknown */
    __u64 ce;
    __u64 first_ns;
    __u64 last_ns;
    __u64 lat_sum;
    __u64 lat_min;
    __u64 lat_max;
    __u64 lat_bad;           /* send stamp later than the receive time */
    __u64 messages;          /* messages whose every packet arrived (any order) */
    __u64 msg_sum;           /* sum of their completion times */
    /* what the responder did */
    __u64 acks;
    __u64 naks;
    __u64 cnps;
    __u64 cnp_deferred;
    __u64 discarded;         /* go-back-N: out-of-order packets not accepted */
    struct nic_msg_slot msg_slots[NIC_MSG_SLOTS];
    __u64 reorder_hist[NIC_REORDER_SLOTS];
    __u64 lat_hist[NIC_LOG_SLOTS];
    __u64 msg_hist[NIC_LOG_SLOTS];
    __u64 max_gap_ns;        /* longest pause between two deliveries */
    __u64 last_send_ns;      /* the latest send stamp among the packets that arrived */
    /* selective repeat: per PSN slot (psn % NIC_SEEN_BITS) of an open hole, when it was
     * first seen and when it was last NAKed (0: never) */
    __u64 hole_ns[NIC_SEEN_BITS];
    __u64 naked_ns[NIC_SEEN_BITS];
    __u32 nak_cursor;        /* the next hole to NAK is the oldest at or after this PSN */
    __u32 ack_owed_psn;      /* NIC_QP_ACK_OWED: the highest ack-requested PSN beyond a hole */
    struct nic_loss loss;
};

/* The requester side: what came back for the QPs this NIC sends on. nic_req_slots maps
 * (our address, our QP) to a slot of nic_reqs, a memory-mappable array the send engine
 * reads without a system call. Written only by the program (one writer per port: veth
 * runs a port's receive in one NAPI context at a time); the engine only reads. */
#ifndef NIC_MAX_REQS
#define NIC_MAX_REQS 1024
#endif
#define NIC_NAK_RING 16          /* the latest NAKs' PSNs, nak_psn[n % NIC_NAK_RING] */

#define NIC_REQ_ACKED    1       /* ack_psn is valid */

struct nic_req {
    __u64 acks;              /* ACKs booked (the count changes after ack_psn is written) */
    __u64 naks;              /* NAKs booked; NAK n's PSN is nak_psn[n % NIC_NAK_RING] */
    __u64 cnps;              /* CNPs booked */
    __u64 becns;             /* ACKs that carried BECN */
    __u32 ack_psn;           /* the newest cumulative ACK's PSN (24-bit serial order) */
    __u32 flags;
    __u32 nak_psn[NIC_NAK_RING];
    __u32 _pad[6];
};                           /* 128 bytes */

/* PFC (802.1Qbb) pauses a host port receives from its switch port: nic_pause_ports maps
 * the switch port's MAC (6 bytes in a zeroed u64, memory order) to a slot of nic_pauses,
 * a memory-mappable array the send engine reads (as nic_reqs). The program applies a
 * frame as dataplane.wire.pfc.PauseState.apply does, without the watchdog (the engine's:
 * it is about what the sender does with a stuck priority). One writer per slot: a port's
 * frames arrive in one NAPI context at a time. */
#ifndef NIC_MAX_PAUSES
#define NIC_MAX_PAUSES 256
#endif
#define NIC_PRIOS 8

struct nic_pause {
    __u64 until_ns[NIC_PRIOS];   /* the priority sends again at (CLOCK_MONOTONIC); a refresh
                                  * restarts it, XON (quanta 0) sets it to the frame's arrival */
    __u64 opened_ns[NIC_PRIOS];  /* start of the latest pause not yet closed (0: none); it is
                                  * the pause in force while until_ns is ahead */
    __u64 paused_ns[NIC_PRIOS];  /* pauses closed (by XON, or expired and followed by a frame) */
    __u64 frames;                /* PFC frames booked */
    __u64 xon;                   /* of their priorities, XONs that ended a pause in force */
    __u64 quantum_ps;            /* wall picoseconds per pause quantum (written by Python:
                                  * 512 bit times at the nominal speed through the lab's scale) */
    __u64 _pad[5];
};                               /* 256 bytes */

/* CRC-32 (reflected 0xEDB88320) lookup table, written by Python: no .rodata in bcc. */
struct nic_crc_table {
    __u32 t[256];
};

#endif
