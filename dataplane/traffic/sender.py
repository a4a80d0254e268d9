"""Paced RoCEv2 sender on an AF_PACKET raw socket.

Per flow the frames are built once with scapy (roce.FrameTemplate, one per (opcode,
payload length)); per packet only the PSN / ack-request bit and the railab header
(seq, message fields, send timestamp) are patched in place and the ICRC recomputed
with zlib.crc32 over BTH[8:]..end, continuing from the CRC of the constant masked
prefix. The bytearray is then handed to ``socket.send`` (the kernel copies it).

Pacing is a token bucket in virtual-time form (GCRA): the next packet is due at
``t_next``; after a send ``t_next += cost / rate``; credit is capped at the larger of
`burst` packets and `burst_ns` of sending time (default 16 packets / 20 ms): a sender
that the scheduler held off for a moment (a busy 2-core machine: one wait for a CPU can
take a few ms) catches up with a back-to-back burst, a longer stall is lost rather than
made up. Lower `burst_ns` for smoother pacing on an idle machine. Waiting
is hybrid: ``time.sleep`` (with the thread's timer slack set to 1 ns) while more than
`spin_ns` (default 30 us) remains, waking ~20 us early, then a busy-wait on
``time.monotonic_ns`` (CLOCK_MONOTONIC, the same clock the railab timestamps use).
Sleeping most of the time keeps the sender's CPU use proportional to its rate, so the
scheduler keeps waking it promptly when other processes compete for the cores. Achieved rates are reported from the sender's own count; tests check
them against the receiving interface's kernel counters.

Frames go through the kernel with PACKET_QDISC_BYPASS (no qdisc on the sending
interface); on veth a send blocks rather than drops when the peer's backlog is full.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import functools
import heapq
import json
import socket
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from dataplane.kernel.netns import in_netns
from dataplane.traffic.mmsg import MMsgBatch
from dataplane.wire import roce
from dataplane.wire.roce import FrameTemplate, Opcode

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_QDISC_BYPASS = 20
PAUSE_RECHECK_NS = 200_000       # a paused flow looks for an XON this often (wall clock)

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


# The calling thread enters a namespace with dataplane.kernel.netns.in_netns.
netns = in_netns


def open_tx_socket(ifname: str, ns: str | None = None, qdisc_bypass: bool = True,
                   sndbuf: int = 4 << 20) -> socket.socket:
    """AF_PACKET raw socket bound to `ifname` (in netns `ns` if given). Receives
    nothing (protocol 0): it is only for sending."""
    with netns(ns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            if qdisc_bypass:
                s.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
            s.bind((ifname, 0))
        except OSError:
            s.close()
            raise
    return s


def socket_mac(sock: socket.socket) -> str:
    """MAC address of the interface an AF_PACKET socket is bound to."""
    return roce.mac_str(sock.getsockname()[4])


@dataclass
class SendReport:
    packets: int = 0
    bytes: int = 0
    elapsed_s: float = 0.0
    target_pps: float | None = None
    target_bps: float | None = None
    errors: int = 0
    per_flow_packets: dict[int, int] = field(default_factory=dict)
    runq_wait_s: float = 0.0      # time the sending thread waited for a CPU (schedstat)
    paused_waits: int = 0         # times a flow found its priority paused (PFC) and waited

    @property
    def pps(self) -> float:
        return self.packets / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def bps(self) -> float:
        return self.bytes * 8 / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {"packets": self.packets, "bytes": self.bytes, "elapsed_s": self.elapsed_s,
                "pps": self.pps, "bps": self.bps, "target_pps": self.target_pps,
                "target_bps": self.target_bps, "errors": self.errors,
                "runq_wait_s": self.runq_wait_s, "paused_waits": self.paused_waits,
                "per_flow_packets": self.per_flow_packets}


PR_SET_TIMERSLACK = 29
PR_GET_TIMERSLACK = 30
WAKE_EARLY_NS = 20_000


@contextmanager
def _fine_timers():
    """Timer slack 1 ns for the calling thread (sleep overshoot ~20 us instead of ~70)."""
    old = _libc.prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)
    _libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    try:
        yield
    finally:
        if old > 0:
            _libc.prctl(PR_SET_TIMERSLACK, old, 0, 0, 0)


def _runq_wait_ns() -> int:
    """Nanoseconds the calling thread has spent runnable but waiting for a CPU."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _fine_timed(fn):
    """Run with 1 ns timer slack; fill the report's runq_wait_s."""
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        w0 = _runq_wait_ns()
        with _fine_timers():
            rep = fn(*a, **kw)
        rep.runq_wait_s = (_runq_wait_ns() - w0) / 1e9
        return rep
    return wrapper


def _wait_until(t: int, spin_ns: int) -> int:
    now = time.monotonic_ns()
    while now < t:
        gap = t - now
        if gap > spin_ns:
            time.sleep((gap - WAKE_EARLY_NS) * 1e-9)
        now = time.monotonic_ns()
    return now


def _send_retry(send, buf, tries: int = 50) -> bool:
    """send(buf); on ENOBUFS/EAGAIN back off 20 us and retry. False: gave up (drop)."""
    for _ in range(tries):
        try:
            send(buf)
            return True
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as e:
            if e.errno not in (105, 11):   # ENOBUFS, EAGAIN
                return False
        time.sleep(20e-6)
    return False


class StreamTemplate:
    """A single-flow stream of equal-size SEND_ONLY frames (one message per packet) --
    what the rate test and the benchmark send."""

    def __init__(self, *, src_mac: str, dst_mac: str, src_ip: str = "10.255.0.1",
                 dst_ip: str = "10.255.0.2", frame_bytes: int = 1002, sport: int = 49152,
                 dqpn: int = 0x100, src_qp: int = 0x100, flow_id: int = 1,
                 psn0: int = 0, ecn: int = roce.ECN_ECT0):
        payload = frame_bytes - roce.frame_len(0)
        if payload < roce.RAILAB_HLEN or roce.frame_len(payload) != frame_bytes:
            raise ValueError(f"no RoCEv2 SEND_ONLY frame of {frame_bytes} bytes "
                             f"(valid: {roce.frame_len(roce.RAILAB_HLEN)} + 4k)")
        self.t = FrameTemplate(src_mac=src_mac, dst_mac=dst_mac, src_ip=src_ip,
                               dst_ip=dst_ip, sport=sport, dqpn=dqpn,
                               opcode=Opcode.SEND_ONLY, payload_len=payload, ecn=ecn)
        self.payload = payload
        self.flow_id, self.src_qp, self.psn0 = flow_id, src_qp, psn0
        self.length = self.t.length

    def frame(self, seq: int, ts_ns: int) -> memoryview:
        return self.t.fill(self.psn0 + seq, False, self.flow_id, self.src_qp, seq, seq,
                           0, 1, self.payload, ts_ns, ts_ns)


@_fine_timed
def send_stream(sock: socket.socket, stream: StreamTemplate, *, pps: float | None,
                duration_s: float | None = None, count: int | None = None,
                burst: int = 16, burst_ns: int = 20_000_000,
                spin_ns: int = 30_000, batch: int = 1) -> SendReport:
    """Send `stream` frames paced at `pps` (None: as fast as possible, same per-packet
    work) for `duration_s` seconds or `count` packets, whichever ends first.
    batch > 1: send every packet that is due (up to `batch`) with one sendmmsg()."""
    if duration_s is None and count is None:
        raise ValueError("give duration_s or count")
    if batch > 1:
        return _send_stream_batched(sock, stream, pps=pps, duration_s=duration_s,
                                    count=count, burst=burst, burst_ns=burst_ns,
                                    spin_ns=spin_ns, batch=batch)
    send = sock.send
    frame = stream.frame
    now_ns = time.monotonic_ns
    interval = int(1e9 / pps) if pps else 0
    frac = (1e9 / pps - interval) if pps else 0.0
    acc = 0.0
    max_credit = max(burst * interval, burst_ns) if interval else 0
    seq = 0
    errors = 0
    start = now_ns()
    end = start + int(duration_s * 1e9) if duration_s is not None else None
    limit = count if count is not None else 1 << 62
    t_next = start
    now = start
    while seq < limit:
        if interval:
            if now < t_next:
                now = _wait_until(t_next, spin_ns)
            elif now - t_next > max_credit:
                t_next = now - max_credit
        if end is not None and now >= end:
            break
        if not _send_retry(send, frame(seq, now)):
            errors += 1
        seq += 1
        if interval:
            t_next += interval
            acc += frac
            if acc >= 1.0:
                t_next += 1
                acc -= 1.0
        now = now_ns()
    elapsed = (now_ns() - start) / 1e9
    seq -= errors
    return SendReport(packets=seq, bytes=seq * stream.length, elapsed_s=elapsed,
                      target_pps=pps, errors=errors, per_flow_packets={stream.flow_id: seq})


def _send_stream_batched(sock, stream, *, pps, duration_s, count, burst, burst_ns,
                         spin_ns, batch) -> SendReport:
    mm = MMsgBatch(sock, stream.length, batch)
    frame = stream.frame
    now_ns = time.monotonic_ns
    step = 1e9 / pps if pps else 0.0
    max_credit = max(burst * step, burst_ns) if pps else 0.0
    seq = sent = 0
    start = now_ns()
    end = start + int(duration_s * 1e9) if duration_s is not None else None
    limit = count if count is not None else 1 << 62
    t_next = float(start)
    now = start
    while seq < limit:
        if pps:
            if now < t_next:
                now = _wait_until(int(t_next) + 1, spin_ns)
            elif now - t_next > max_credit:
                t_next = now - max_credit
            k = min(batch, int((now - t_next) / step) + 1, limit - seq)
        else:
            k = min(batch, limit - seq)
        if end is not None and now >= end:
            break
        for j in range(k):
            mm.load(j, frame(seq + j, now))
        sent += mm.send(k)
        seq += k
        t_next += k * step
        now = now_ns()
    elapsed = (now_ns() - start) / 1e9
    return SendReport(packets=sent, bytes=sent * stream.length, elapsed_s=elapsed,
                      target_pps=pps, errors=seq - sent,
                      per_flow_packets={stream.flow_id: sent})


# --- workload flows -----------------------------------------------------------------------

class FlowFramer:
    """Packets of one workload Flow, in order: templates per (opcode, payload length),
    PSNs consecutive from `psn0` (24-bit wrap), railab seq from 0, ack-request on the
    last packet of each message."""

    def __init__(self, flow, src_mac: str, dst_mac: str, psn0: int | None = None):
        self.flow = flow
        self.src_mac, self.dst_mac = src_mac, dst_mac
        self.psn0 = (flow.flow_id * 0x9E3779B1) & roce.PSN_MASK if psn0 is None else psn0
        self._tpl: dict[tuple[int, int], FrameTemplate] = {}

    def template(self, opcode: Opcode, payload_len: int) -> FrameTemplate:
        k = (int(opcode), payload_len)
        t = self._tpl.get(k)
        if t is None:
            f = self.flow
            t = self._tpl[k] = FrameTemplate(
                src_mac=self.src_mac, dst_mac=self.dst_mac, src_ip=f.src_ip,
                dst_ip=f.dst_ip, sport=f.src_port, dqpn=f.dst_qp, opcode=opcode,
                payload_len=payload_len, dscp=f.dscp, rkey=f.dst_qp)
        return t

    def packets(self) -> Iterator[tuple[int, FrameTemplate, int, int, int, int, int]]:
        """(message start offset ns, template, msg_id, msg_idx, msg_pkts, msg_bytes,
        seq) for every packet of the flow."""
        seq = 0
        for m in self.flow.messages:
            chunks = roce.segment_message(m.size, self.flow.mtu)
            ops = roce.message_opcodes(len(chunks), self.flow.opcode)
            for i, (op, plen) in enumerate(zip(ops, chunks)):
                yield m.start_ns, self.template(op, plen), m.msg_id, i, len(chunks), m.size, seq
                seq += 1


@dataclass
class PreparedFlows:
    """Flows with their frame templates built (scapy: the slow part), ready to send."""
    flows: Sequence
    framers: list                  # per flow: (FlowFramer, packet iterator, first packet) or None


def prepare_flows(flows: Sequence, src_mac: str,
                  dst_mac: str | Callable[[object], str] = "ff:ff:ff:ff:ff:ff") -> PreparedFlows:
    framers = []
    for f in flows:
        fr = FlowFramer(f, src_mac, dst_mac(f) if callable(dst_mac) else dst_mac)
        it = fr.packets()
        first = next(it, None)
        framers.append(None if first is None else (fr, it, first))
    return PreparedFlows(flows, framers)


@_fine_timed
def send_flows(sock: socket.socket, flows: Sequence | PreparedFlows, *,
               dst_mac: str | Callable[[object], str] = "ff:ff:ff:ff:ff:ff",
               src_mac: str | None = None, duration_s: float | None = None,
               burst: int = 8, burst_ns: int = 20_000_000, spin_ns: int = 30_000,
               stop: Callable[[], bool] | None = None,
               pause: Callable[[int, int], int] | None = None,
               start_ns: int | None = None) -> SendReport:
    """Send workload `flows` (all leaving the interface `sock` is bound to), each paced
    at its own rate_bps and starting its messages no earlier than their start times
    (relative to the call). One GCRA bucket per flow, a heap picks the flow due next.
    Give PreparedFlows (prepare_flows) to build the frames before the clock starts.
    pause(dscp, now_ns): PFC -- 0 if a flow of that DSCP may send now, -1 if the PFC
    watchdog drops its priority (the packet is counted in errors, not sent), else until
    when its priority is paused (the flow waits, at most PAUSE_RECHECK_NS before looking
    again: an XON may end the pause early); other flows go on.
    start_ns: the common start (CLOCK_MONOTONIC ns, the same in every namespace) that
    flow start times count from, instead of the call: hosts told to start together keep
    their flows' phases in real-fabric terms at any time scale.
    Returns the report with per-flow packet counts (give them to Receiver.finish)."""
    if not isinstance(flows, PreparedFlows):
        flows = prepare_flows(flows, src_mac or socket_mac(sock), dst_mac)
    prepared, flows = flows, flows.flows
    now_ns = time.monotonic_ns
    start = start_ns or now_ns()
    end = start + int(duration_s * 1e9) if duration_s else None
    heap: list[tuple[int, int]] = []
    state = []
    for i, (f, ready) in enumerate(zip(flows, prepared.framers)):
        if ready is None:
            state.append(None)
            continue
        fr, it, first = ready
        state.append([f, fr, it, first, start + first[0], 0, {}])  # last: msg start ts
        heapq.heappush(heap, (start + first[0], i))
    rep = SendReport(per_flow_packets={f.flow_id: 0 for f in flows})
    send = sock.send
    while heap:
        due, i = heap[0]
        now = now_ns()
        if now < due:
            now = _wait_until(due, spin_ns)
        if (end is not None and now >= end) or (stop and stop()):
            break
        st = state[i]
        f, fr, it, pk, t_next, _, mstart = st
        dropped = False
        if pause is not None:
            until = pause(f.dscp, now)
            if until > 0:
                rep.paused_waits += 1
                heapq.heapreplace(heap, (min(until, now + PAUSE_RECHECK_NS), i))
                continue
            dropped = until < 0          # PFC watchdog: the stuck priority is dropped
        m_off, tpl, msg_id, idx, npk, mbytes, seq = pk
        if idx == 0:
            mstart[msg_id] = now
        ts0 = mstart.get(msg_id, now)
        if tpl.opcode.has_reth:
            tpl.set_dmalen(mbytes)
        buf = tpl.fill(fr.psn0 + seq, idx == npk - 1, f.flow_id, f.src_qp, msg_id, seq,
                       idx, npk, mbytes, now, ts0)
        if idx == npk - 1:
            mstart.pop(msg_id, None)
        if dropped:
            rep.errors += 1
        elif _send_retry(send, buf):
            rep.packets += 1
            rep.bytes += tpl.length
            rep.per_flow_packets[f.flow_id] += 1
        else:
            rep.errors += 1      # dropped at the sender (still consumes its PSN)
        nxt = next(it, None)
        if nxt is None:
            heapq.heappop(heap)
            continue
        interval = int(tpl.length * 8e9 / f.rate_bps) if f.rate_bps > 0 else 0
        t_next = max(due + interval, start + nxt[0],
                     now - max(burst * interval, burst_ns))
        st[3], st[4] = nxt, t_next
        heapq.heapreplace(heap, (t_next, i))
    rep.elapsed_s = (now_ns() - start) / 1e9
    rep.target_bps = sum(f.rate_bps for f in flows)
    return rep


# --- command line (used by tests and the lab runtime as a subprocess) ----------------------

def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dataplane.traffic.sender",
                                 description="Paced RoCEv2 stream on one interface")
    ap.add_argument("--ifname", required=True)
    ap.add_argument("--netns")
    ap.add_argument("--pps", type=float, default=0.0, help="0: unpaced")
    ap.add_argument("--frame-bytes", type=int, default=1002)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--dst-mac", default="ff:ff:ff:ff:ff:ff")
    ap.add_argument("--batch", type=int, default=1, help="sendmmsg batch (1: send())")
    a = ap.parse_args(argv)
    sock = open_tx_socket(a.ifname, a.netns)
    st = StreamTemplate(src_mac=socket_mac(sock), dst_mac=a.dst_mac,
                        frame_bytes=a.frame_bytes)
    rep = send_stream(sock, st, pps=a.pps or None, duration_s=a.duration, batch=a.batch)
    json.dump(rep.to_dict(), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
