"""Receiver side: per-flow accounting (pure), the ACK/CNP responder (pure), and a small
AF_PACKET capture loop that feeds them (the only part doing I/O).

Accounting (FlowStats, per railab flow id) -- definitions, exact on crafted input:
  * position of a packet = (PSN - initial PSN) mod 2^24, unwrapped to the position
    nearest the highest one seen so far (so PSN wrap-around is handled). The initial PSN
    is learnt from the first packet received: PSN - seq (railab header), so losses at the
    very start of a flow count too.
  * new highest position h' > h + 1: positions h+1 .. h'-1 become *holes*.
  * a packet filling a hole is *out of order*; its reorder distance = highest position
    seen at that moment - its position (1 = overtaken by one packet). Histogram kept.
  * a position received before (and not a hole) is a *duplicate*; duplicates count in
    `duplicates` only (not packets/bytes/latency/messages).
  * lost = holes still open at finish(); plus, when finish() is told how many packets
    the sender sent, the missing tail (sent - (highest position + 1)).
  * latency = receive timestamp - railab ts_ns (one-way, same clock: CLOCK_MONOTONIC).
  * message completion = receive time of the packet that completes a message (all of
    its msg_pkts packets received, in any order) - msg_start_ns (send time of its first
    packet).
  * ce = packets received with IP ECN = CE (11).
  * delivered bytes over time (Receiver.rx_bins): the frame bytes of unique data packets
    per RX_BIN_NS of receive time (the kernel's stamp, CLOCK_MONOTONIC), all flows
    together: a throughput timeline made from the traffic itself, which a receiver that
    ran late cannot bunch up (the stamps are when the frames arrived, not when they were
    read). Given the port's line rate, a frame's bytes are spread over the time it took
    to arrive (its length at that rate, ending at its stamp), so no stretch of time holds
    more than the port can carry.
  * host-side gap: max_gap_ns = the longest pause between two deliveries (receive
    times). It includes whatever the hosts added (a sender or receiver waiting for a
    CPU), so it is not the network's recovery time.
  * network-side timing, from the packets' own send times (railab header ts_ns, kept
    per position received) and which positions never arrived -- immune to when the
    receiver ran (see loss_timing): a *loss window* is a run of consecutive lost
    positions s..e; its start is the estimated send time of s (send time of s-1 plus
    one packet interval, the interval interpolated between s-1 and e+1) and its end the
    send time of e+1 (the first packet delivered after it). outage = end of the last
    window - start of the first (the span of the lost packets' send times plus one
    packet interval); recovery = end of the first window - its start. 0 when nothing
    was lost; None ("unknown", with timing_note saying why) when no packet arrived, a
    send timestamp is missing or goes backwards, or a loss has no delivered packet
    before it (flow start) or after it (not recovered by the end).

Responder (what a receiving RoCE NIC answers), documented choices:
  * CNP (opcode 0x81, BECN set, dest QP = the sender's QP taken from the railab header)
    for every CE-marked data packet, and only for those; optional per-flow coalescing
    interval (`cnp_interval_ns`, default 0 = one CNP per CE packet).
  * ACK (opcode 0x11 + AETH syndrome 0x1f) coalesced per message: only for packets with
    the BTH ack-request bit, which the railab sender sets on the last packet of each
    message. The ACK's PSN is that packet's PSN, its MSN the number of messages the
    flow has completed. Open loop: no NAKs, no retransmission (the emulator measures
    loss instead). Closed loop (a go-back-n or selective-repeat transport): ACKs, NAKs
    and message completions per dataplane.traffic.transport.

With retransmission, FlowStats still books every packet that arrives: a resent packet
fills a hole (counted out of order) or is a duplicate, so `lost` is what was never
delivered at all.
"""
from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from dataplane.traffic import transport as transport_mod
from dataplane.traffic.rxstats import loss_timing, summary, timing_dict
from dataplane.wire import roce
from dataplane.wire.roce import PSN_MASK, PSN_MOD, RocePacket

ETH_P_ALL = 0x0003
RX_BIN_NS = 1_000_000      # Receiver.rx_bins: delivered bytes per millisecond of receive time


def _unwrap(d: int, ref: int) -> int:
    """The integer congruent to d mod 2^24 nearest to ref."""
    base = ref - (ref & PSN_MASK)
    x = base + d
    if x - ref > PSN_MOD // 2:
        x -= PSN_MOD
    elif ref - x > PSN_MOD // 2:
        x += PSN_MOD
    return x


@dataclass
class FlowStats:
    flow_id: int
    src_ip: str = ""
    dst_ip: str = ""
    sport: int = 0
    dqpn: int = 0
    src_qp: int = 0
    packets: int = 0              # unique data packets received
    bytes: int = 0                # their Ethernet frame bytes
    payload_bytes: int = 0        # their IB payload bytes
    duplicates: int = 0
    out_of_order: int = 0
    reorder_hist: dict[int, int] = field(default_factory=dict)
    ce: int = 0
    lost: int = 0                 # set by finish()
    first_rx_ns: int = 0
    last_rx_ns: int = 0
    latencies_ns: list[int] = field(default_factory=list)
    completions_ns: dict[int, int] = field(default_factory=dict)   # msg_id -> completion
    msgs_incomplete: int = 0      # set by finish()
    max_gap_ns: int = 0           # host side: longest pause between deliveries (receive times)
    send_ns: dict[int, int] = field(default_factory=dict)   # position -> railab send time
    timing: dict = field(default_factory=dict)              # set by finish(): loss_timing()
    # internal state
    init_psn: int | None = None
    highest: int = -1
    holes: set[int] = field(default_factory=set)
    _msg_got: dict[int, int] = field(default_factory=dict)
    finished: bool = False

    @property
    def expected(self) -> int:
        """Positions the flow has covered so far (highest + 1)."""
        return self.highest + 1

    @property
    def messages_completed(self) -> int:
        return len(self.completions_ns)

    @property
    def loss_ratio(self) -> float:
        tot = self.packets + self.lost
        return self.lost / tot if tot else 0.0

    def latency_summary(self) -> dict[str, float]:
        return summary(self.latencies_ns)

    def completion_summary(self) -> dict[str, float]:
        return summary(self.completions_ns.values())

    def to_dict(self) -> dict:
        dur = (self.last_rx_ns - self.first_rx_ns) / 1e9
        return {
            "flow_id": self.flow_id, "src_ip": self.src_ip, "dst_ip": self.dst_ip,
            "sport": self.sport, "dqpn": self.dqpn, "src_qp": self.src_qp,
            "packets": self.packets, "bytes": self.bytes,
            "payload_bytes": self.payload_bytes, "lost": self.lost,
            "loss_ratio": self.loss_ratio, "duplicates": self.duplicates,
            "out_of_order": self.out_of_order,
            "reorder_hist": dict(sorted(self.reorder_hist.items())), "ce": self.ce,
            "rx_bps": self.bytes * 8 / dur if dur > 0 else 0.0,
            "latency_ns": self.latency_summary(),
            "messages_completed": self.messages_completed,
            "messages_incomplete": self.msgs_incomplete,
            "completion_ns": self.completion_summary(),
            "max_gap_us": self.max_gap_ns / 1000,
            # CLOCK_MONOTONIC, as the run's t0_ns: when a collective's last byte arrived
            "first_rx_ns": self.first_rx_ns, "last_rx_ns": self.last_rx_ns,
            # the send time (railab header) of the latest packet that arrived: when its
            # sender, late or not, had sent everything (0 when nothing arrived)
            "last_send_ns": max(self.send_ns.values(), default=0),
            **timing_dict(self.timing),
        }


class Receiver:
    """Per-flow accounting. Feed parsed packets with their receive timestamps:
    ``rx.add(roce.parse(frame), rx_ns)``; then ``rx.finish(sent)`` and read ``rx.flows``.
    Non-railab RoCE packets (ACK, CNP, foreign data) are counted by dest QP only.
    Data sent before `not_before_ns` (CLOCK_MONOTONIC) is an earlier run's, released from a
    paused queue: counted as `stale` only (booked, it would shift its flow's positions)."""

    def __init__(self, line_bps: float | None = None, not_before_ns: int = 0) -> None:
        self.line_bps = line_bps
        self.not_before_ns = not_before_ns
        self.stale = 0
        self.flows: dict[int, FlowStats] = {}
        self.acks_by_qp: dict[int, int] = {}
        self.cnps_by_qp: dict[int, int] = {}
        self.other = 0
        self.rx_bins: dict[int, float] = {}   # rx_ns // RX_BIN_NS -> data frame bytes

    def add(self, pkt: RocePacket | None, rx_ns: int) -> FlowStats | None:
        if pkt is None:
            self.other += 1
            return None
        if pkt.opcode == roce.Opcode.CNP:
            self.cnps_by_qp[pkt.dqpn] = self.cnps_by_qp.get(pkt.dqpn, 0) + 1
            return None
        if pkt.opcode == roce.Opcode.ACK:
            self.acks_by_qp[pkt.dqpn] = self.acks_by_qp.get(pkt.dqpn, 0) + 1
            return None
        h = pkt.hdr
        if h is None:
            self.other += 1
            return None
        if 0 < h.ts_ns < self.not_before_ns:
            self.stale += 1
            return None
        st = self.flows.get(h.flow_id)
        if st is None:
            st = self.flows[h.flow_id] = FlowStats(
                h.flow_id, pkt.src_ip, pkt.dst_ip, pkt.sport, pkt.dqpn, h.src_qp,
                first_rx_ns=rx_ns)
            st.init_psn = (pkt.psn - h.seq) & PSN_MASK
        pos = _unwrap((pkt.psn - st.init_psn) & PSN_MASK, max(st.highest, 0))
        if pos > st.highest:
            if pos > st.highest + 1:
                st.holes.update(range(st.highest + 1, pos))
            st.highest = pos
        elif pos in st.holes:
            st.holes.discard(pos)
            st.out_of_order += 1
            d = st.highest - pos
            st.reorder_hist[d] = st.reorder_hist.get(d, 0) + 1
        else:
            st.duplicates += 1
            return st
        st.packets += 1
        st.bytes += pkt.length
        st.payload_bytes += pkt.payload_len
        self._bin(rx_ns, pkt.length)
        if pkt.ecn == roce.ECN_CE:
            st.ce += 1
        if rx_ns > st.last_rx_ns:
            if st.last_rx_ns and rx_ns - st.last_rx_ns > st.max_gap_ns:
                st.max_gap_ns = rx_ns - st.last_rx_ns
            st.last_rx_ns = rx_ns
        st.latencies_ns.append(rx_ns - h.ts_ns)
        st.send_ns[pos] = h.ts_ns
        got = st._msg_got.get(h.msg_id, 0) + 1
        if got >= h.msg_pkts:
            st._msg_got.pop(h.msg_id, None)
            st.completions_ns[h.msg_id] = rx_ns - h.msg_start_ns
        else:
            st._msg_got[h.msg_id] = got
        return st

    def _bin(self, rx_ns: int, length: int) -> None:
        bins = self.rx_bins
        if not self.line_bps:
            b = rx_ns // RX_BIN_NS
            bins[b] = bins.get(b, 0) + length
            return
        start = rx_ns - length * 8e9 / self.line_bps     # when its first bit arrived
        per_ns = length / (rx_ns - start)
        t = start
        while t < rx_ns:
            b = int(t // RX_BIN_NS)
            end = min(rx_ns, (b + 1) * RX_BIN_NS)
            bins[b] = bins.get(b, 0) + per_ns * (end - t)
            t = end

    def finish(self, sent_packets: dict[int, int] | None = None) -> dict[int, FlowStats]:
        """Close the books: open holes become losses; with `sent_packets` (flow id ->
        packets the sender sent) the missing tail too, and flows never seen count all
        their packets as lost. Idempotent."""
        sent_packets = sent_packets or {}
        for fid, n in sent_packets.items():
            if fid not in self.flows:
                self.flows[fid] = FlowStats(fid)
        for st in self.flows.values():
            tail = max(0, sent_packets.get(st.flow_id, st.expected) - st.expected)
            st.lost = len(st.holes) + tail
            lost = sorted(st.holes) + list(range(st.expected, st.expected + tail))
            st.timing = loss_timing(st.send_ns, lost)
            st.msgs_incomplete = len(st._msg_got)
            st.finished = True
        return self.flows

    def totals(self) -> dict[str, int]:
        keys = ("packets", "bytes", "lost", "duplicates", "out_of_order", "ce")
        return {k: sum(getattr(s, k) for s in self.flows.values()) for k in keys}


class Responder:
    """Builds the ACK, NAK and CNP frames a RoCE receiver sends back (pure: returns bytes).

    Open loop (`transport` None or open-loop): the behaviour in the module doc. Closed
    loop: one transport.QpResponder per flow decides ACKs (coalesced) and NAKs, and
    records each message's completion; CNPs as before."""

    def __init__(self, cnp_interval_ns: int = 0, ack: bool = True, cnp: bool = True,
                 reply_sport: int = roce.ROCE_PORT,
                 transport: transport_mod.TransportConfig | None = None,
                 scale: float | None = None) -> None:
        self.cnp_interval_ns = cnp_interval_ns
        self.ack = ack
        self.cnp = cnp
        self.reply_sport = reply_sport
        self.transport = transport if transport is not None and transport.closed_loop else None
        self.scale = scale
        self._last_cnp: dict[int, int] = {}
        self._msn: dict[int, int] = {}
        self.qps: dict[int, tuple[transport_mod.QpResponder, int, roce.AckTemplate]] = {}
        self.cnps_by_flow: dict[int, int] = {}
        self.cnps_sent = 0
        self.acks_sent = 0

    def respond(self, pkt: RocePacket | None, rx_ns: int = 0) -> list[bytes]:
        if pkt is None or pkt.hdr is None or not pkt.is_data:
            return []
        out: list[bytes] = []
        h = pkt.hdr
        common = dict(src_mac=roce.mac_str(pkt.dst_mac), dst_mac=roce.mac_str(pkt.src_mac),
                      src_ip=pkt.dst_ip, dst_ip=pkt.src_ip, sport=self.reply_sport,
                      dqpn=h.src_qp)
        if self.cnp and pkt.ecn == roce.ECN_CE:
            last = self._last_cnp.get(h.flow_id)
            if last is None or rx_ns - last >= self.cnp_interval_ns:
                self._last_cnp[h.flow_id] = rx_ns
                out.append(roce.build_cnp(**common))
                self.cnps_sent += 1
                self.cnps_by_flow[h.flow_id] = self.cnps_by_flow.get(h.flow_id, 0) + 1
        if self.transport is not None:
            return out + self._reliable(pkt, rx_ns, common)
        if h.msg_idx == h.msg_pkts - 1:
            self._msn[h.flow_id] = self._msn.get(h.flow_id, 0) + 1
        if self.ack and pkt.ackreq:
            out.append(roce.build_ack(**common, psn=pkt.psn,
                                      msn=self._msn.get(h.flow_id, 0)))
            self.acks_sent += 1
        return out

    def _reliable(self, pkt: RocePacket, rx_ns: int, common: dict) -> list[bytes]:
        h = pkt.hdr
        qp = self.qps.get(h.flow_id)
        if qp is None:
            qp = self.qps[h.flow_id] = (transport_mod.QpResponder(self.transport, self.scale),
                                        (pkt.psn - h.seq) & PSN_MASK, roce.AckTemplate(**common))
        state, psn0, tpl = qp
        pos = transport_mod.position(pkt.psn, psn0, state.expected)
        msg_end = (h.msg_bytes, h.msg_start_ns) if h.msg_idx == h.msg_pkts - 1 else None
        out = []
        for kind, at in state.on_data(pos, pkt.ackreq, msg_end, rx_ns):
            syndrome = roce.AETH_ACK if kind == "ack" else roce.AETH_NAK_PSN_SEQ
            out.append(tpl.frame(psn0 + at, syndrome, len(state.stats.messages)))
            self.acks_sent += kind == "ack"
        return out

    def flow_report(self, flow_id: int) -> dict:
        """Closed loop: this flow's ACKs, NAKs, CNPs and message completions."""
        qp = self.qps.get(flow_id)
        rep = qp[0].stats.to_dict() if qp else transport_mod.ResponderStats().to_dict()
        rep["cnps"] = self.cnps_by_flow.get(flow_id, 0)
        return rep


def open_socket(ifname: str, rcvbuf: int = 8 << 20) -> socket.socket:
    """AF_PACKET raw socket bound to `ifname` in the caller's network namespace."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((ifname, ETH_P_ALL))
    return s


PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_STATISTICS = 6        # struct tpacket_stats {u32 tp_packets; u32 tp_drops}; reading resets it


def socket_drops(sock: socket.socket) -> int:
    """Frames the kernel dropped because this socket's buffer was full since the last
    call: the receiver could not keep up, they never reached its accounting (a run's
    loss counts them, the fabric did not lose them)."""
    _packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    return drops

SO_TIMESTAMPNS = 35          # = SCM_TIMESTAMPNS (asm-generic; x86_64, arm64)
_TS = struct.Struct("@qq")


class _ClockMap:
    """Maps kernel CLOCK_REALTIME receive stamps onto CLOCK_MONOTONIC (railab's clock):
    offset = realtime - monotonic, re-read every 100 ms (follows NTP slews/steps)."""

    def __init__(self) -> None:
        self._next = 0
        self._off = 0

    def mono(self, real_ns: int) -> int:
        m = time.monotonic_ns()
        if m >= self._next:
            self._off = time.time_ns() - time.monotonic_ns()
            self._next = m + 100_000_000
        return real_ns - self._off


def capture(sock: socket.socket, duration_s: float, receiver: Receiver,
            responder: Responder | None = None, verify_icrc: bool = False,
            stop: Callable[[], bool] | None = None, kernel_ts: bool = True) -> Receiver:
    """Receive on `sock` for `duration_s` seconds (or until stop()), then drain what is
    already queued in the socket; feed `receiver`
    and send the responder's frames back out of the same socket (for the data frames it
    booked: not for a stale one). Frames the socket
    itself sent (PACKET_OUTGOING) are skipped. Bad-ICRC frames count as `other`.

    With `kernel_ts` the receive time is the kernel's software receive stamp
    (SO_TIMESTAMPNS, mapped to CLOCK_MONOTONIC), so latency does not include the time
    a frame waited in the socket buffer for this (Python) loop; else the time the loop
    read it."""
    buf = bytearray(16384)
    view = memoryview(buf)
    sock.settimeout(0.05)
    if kernel_ts:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    cmap = _ClockMap()
    cmsg_space = socket.CMSG_SPACE(_TS.size)
    end = time.monotonic() + duration_s
    draining = False
    while True:
        if not draining and (time.monotonic() >= end or (stop and stop())):
            draining = True          # read what is already queued, then return
            sock.settimeout(0.0)
        try:
            if kernel_ts:
                n, anc, _flags, addr = sock.recvmsg_into([buf], cmsg_space)
            else:
                n, addr = sock.recvfrom_into(buf)
                anc = ()
        except (socket.timeout, BlockingIOError):
            if draining:
                break
            continue
        rx_ns = 0
        for lvl, typ, data in anc:
            if lvl == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS and len(data) >= _TS.size:
                sec, nsec = _TS.unpack_from(data)
                rx_ns = cmap.mono(sec * 1_000_000_000 + nsec)
        if not rx_ns:
            rx_ns = roce.now_ns()
        if addr[2] == PACKET_OUTGOING:
            continue
        frame = bytes(view[:n])
        pkt = roce.parse(frame, verify=verify_icrc)
        if pkt is not None and verify_icrc and not pkt.icrc_ok:
            receiver.other += 1
            continue
        if receiver.add(pkt, rx_ns) is not None and responder is not None:
            for f in responder.respond(pkt, rx_ns):
                sock.send(f)
    sock.settimeout(None)
    return receiver


def feed(receiver: Receiver, frames: Iterable[tuple[bytes, int]]) -> Receiver:
    """Feed (frame, rx_ns) pairs (e.g. from a pcap) into `receiver`."""
    for frame, rx_ns in frames:
        receiver.add(roce.parse(frame), rx_ns)
    return receiver
