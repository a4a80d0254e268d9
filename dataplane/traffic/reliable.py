"""Closed-loop sender of one host: every QP (workload flow) of every port in one loop.

Each QP's messages become available at their arrival times (the workload's start
offsets) and go out in order, paced at the QP's rate (DCQCN's Rc, or the line rate
without DCQCN) and at most at the port's line rate shared by all its QPs (a NIC
serialises its QPs onto one wire). ACKs, NAKs and CNPs come back on a second AF_PACKET
socket per port with a classic BPF filter that passes only RoCEv2 ACKNOWLEDGE and CNP
frames, so the data the host's own receiver gets costs this loop nothing. The rules
(what goes next, go-back, selective resend, timeout, DCQCN) are
dataplane.traffic.transport's; this module only does the I/O and the clock.

PFC: with a pause gate per port (the same callable the open-loop sender takes,
dataplane.traffic.sender.send_flows' `pause`), a QP whose priority its NIC's switch
paused does not send its data packets until the pause runs out or XON arrives
(rechecked at least every PAUSE_RECHECK_NS; the pause listeners' sockets also wake the
loop); its retransmission timer keeps running, as a NIC's does. When the PFC watchdog
drops the priority, the packet is given up as sent (it is lost on the wire; the
transport resends it). ACKs, NAKs and CNPs are the receiver process's, as in the
open-loop path.

The railab header's msg_start_ns carries the message's *arrival* time, so the
receiver's completion time counts from when the application posted the message
(waiting behind earlier messages of the same QP included), as FCT does.
"""
from __future__ import annotations

import ctypes
import select
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Callable

from dataplane.traffic import transport as tp
from dataplane.traffic.receiver import PACKET_OUTGOING
from dataplane.traffic.sender import PAUSE_RECHECK_NS, PreparedFlows, _send_retry
from dataplane.wire import roce

SO_ATTACH_FILTER = 26
# Classic BPF: IPv4 / UDP dport 4791 / BTH opcode ACKNOWLEDGE (0x11) or CNP (0x81),
# without IP options or VLAN tags (railab's hosts send neither).
_FILTER = [
    (0x28, 0, 0, 12), (0x15, 0, 8, 0x0800),        # ethertype IPv4
    (0x30, 0, 0, 23), (0x15, 0, 6, 17),            # IP protocol UDP
    (0x28, 0, 0, 36), (0x15, 0, 4, roce.ROCE_PORT),  # UDP destination port
    (0x30, 0, 0, 42), (0x15, 1, 0, int(roce.Opcode.ACK)),
    (0x15, 0, 1, int(roce.Opcode.CNP)),
    (0x06, 0, 0, 0xFFFF), (0x06, 0, 0, 0),
]
ETH_P_ALL = 0x0003
POLL_NS = 1_000_000          # longest wait without looking at timers
TIMER_NS = 1_000_000         # RTO and DCQCN timers are looked at this often (they catch up)
BURST_PACKETS = 4            # pacing credit after a scheduling delay


def open_feedback_socket(ifname: str) -> socket.socket:
    """AF_PACKET socket on `ifname` (caller's namespace) that receives only ACK/NAK/CNP."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        prog = b"".join(struct.pack("HBBI", *ins) for ins in _FILTER)
        buf = ctypes.create_string_buffer(prog)
        fprog = struct.pack("HL", len(_FILTER), ctypes.addressof(buf))
        s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        s.bind((ifname, ETH_P_ALL))
        s.setblocking(False)
    except OSError:
        s.close()
        raise
    return s


@dataclass
class _Qp:
    flow: object
    port: str
    pkts: list
    psn0: int
    req: tp.Requester
    cc: tp.Dcqcn | None
    line: float
    due: int
    timeline: list = field(default_factory=list)
    new_bytes: int = 0
    served: int = 0            # when the NIC last sent for it (round-robin stamp)


def packets_of(prepared: dict[str, PreparedFlows]) -> list[tuple[str, object, int, list]]:
    """(port, flow, initial PSN, every packet) per QP: a go-back must find any packet
    again, and building their templates (scapy) must happen before the clock starts."""
    out = []
    for port, prep in prepared.items():
        for flow, ready in zip(prep.flows, prep.framers):
            if ready is not None:
                framer, it, first = ready
                out.append((port, flow, framer.psn0, [first, *it]))
    return out


def run(tx: dict[str, socket.socket], rx: list[socket.socket], queued: list[tuple[str, object, int, list]],
        cfg: tp.TransportConfig, line_bps: dict[str, float], scale: float | None,
        duration_s: float, limit_s: float, sample_s: float = 0.1,
        pause: dict[str, Callable[[int, int], int]] | None = None, listeners: list = (),
        burst_packets: int = BURST_PACKETS, start_ns: int | None = None) -> dict:
    """Send every QP's messages (packets_of()) reliably; return per-flow packets and
    transport stats. Stops when every QP is acknowledged, or `limit_s` after
    `duration_s` (what is left then is reported incomplete). pause: per port, the PFC
    gate (module doc); listeners: the pause listeners behind the gates (dataplane.wire.pfc
    .PauseListener), read every round so that a pause frame ends a wait;
    burst_packets: pacing credit after a scheduling delay (1 under PFC: a NIC cannot
    make up for a pause above its line rate); start_ns: the common start of all hosts
    (CLOCK_MONOTONIC ns), waited for."""
    now_ns = time.monotonic_ns
    if start_ns and start_ns > now_ns():
        time.sleep((start_ns - now_ns()) / 1e9)
    start = start_ns or now_ns()
    # A QP joins the NIC's arbitration when its first message arrives (the NIC knows
    # nothing of it before): its timers and DCQCN state start then, at line rate.
    pending = sorted(queued, key=lambda q: q[3][0][0] if q[3] else 0, reverse=True)
    qps: list[_Qp] = []
    by_key: dict[tuple[str, int], _Qp] = {}
    pause = pause or {}
    paused_waits = {p: 0 for p in tx}
    watchdog_drops = {p: 0 for p in tx}
    waitable = [*rx, *(lst.sock for lst in listeners)]
    port_free = {p: start for p in tx}
    hard_end = start + int((duration_s + limit_s) * 1e9)
    sample_ns = int(sample_s * 1e9)
    next_sample = start + sample_ns
    next_timers = start
    active: list[_Qp] = []
    served = 0                 # round-robin stamp: the NIC serves its ready QPs in turn
    buf = bytearray(2048)
    while active or pending:
        now = now_ns()
        if now >= hard_end:
            break
        while pending and (not pending[-1][3] or start + pending[-1][3][0][0] <= now):
            port, flow, psn0, pkts = pending.pop()
            qp = _Qp(flow, port, pkts, psn0, tp.Requester(len(pkts), cfg, scale, now),
                     tp.Dcqcn(cfg.dcqcn, line_bps[port], scale, now) if cfg.dcqcn else None,
                     line_bps[port], start)
            qps.append(qp)
            by_key[(flow.src_ip, flow.src_qp)] = qp
            if not qp.req.done:
                active.append(qp)
        for s in rx:
            _drain(s, buf, by_key, now)
        for lst in listeners:
            lst.poll(now)
        if now >= next_timers:      # not every packet: with many QPs that was most of the loop
            next_timers = now + TIMER_NS
            for qp in active:
                qp.req.check_timeout(now)
                if qp.cc is not None:
                    qp.cc.tick(now)
        if now >= next_sample:
            t = round((now - start) / 1e9, 4)
            for qp in active:
                qp.timeline.append([t, qp.cc.rc if qp.cc else qp.line, qp.new_bytes * 8 / sample_s])
                qp.new_bytes = 0
            next_sample += sample_ns * max(1, (now - next_sample) // sample_ns + 1)
        best, best_t, best_pos = None, 0, 0
        for qp in active:
            pos = qp.req.next_position()
            if pos is None:
                continue
            t = max(qp.due, start + qp.pkts[pos][0], port_free[qp.port])
            # of the QPs that may send now, the one served longest ago; else the earliest
            if best is None or (t <= now and (best_t > now or qp.served < best.served)) \
                    or (best_t > now and t < best_t):
                best, best_t, best_pos = qp, t, pos
        if best is not None and best_t <= now:
            gate = pause.get(best.port)
            until = gate(best.flow.dscp, now) if gate is not None else 0
            if until > 0:           # PFC: the QP's priority is paused; other QPs go on
                paused_waits[best.port] += 1
                best.due = max(best.due, min(until, now + PAUSE_RECHECK_NS))
                continue
            if until < 0:
                watchdog_drops[best.port] += 1
            served += 1
            best.served = served
            _send(best, best_pos, None if until < 0 else tx[best.port], now, start, port_free,
                  burst_packets)
            if best.req.done:
                active.remove(best)
            continue
        active = [qp for qp in active if not qp.req.done]
        wait = min(best_t - now if best is not None else POLL_NS, POLL_NS)
        if pending and pending[-1][3]:
            wait = min(wait, start + pending[-1][3][0][0] - now)
        select.select(waitable, [], [], max(wait, 0) / 1e9)
    for port, flow, psn0, pkts in pending:      # the run ended before their messages came
        qps.append(_Qp(flow, port, pkts, psn0, tp.Requester(len(pkts), cfg, scale, start), None,
                       line_bps[port], start))
    per_flow = {}
    report = {}
    for qp in qps:
        fid = qp.flow.flow_id
        per_flow[str(fid)] = qp.req.sent_max
        report[str(fid)] = {**qp.req.stats.to_dict(), "packets": qp.req.n,
                            "unacked_packets": qp.req.n - qp.req.una,
                            "rate_timeline": qp.timeline,
                            "alpha": qp.cc.alpha if qp.cc else None}
    return {"per_flow_packets": per_flow, "transport": report,
            "elapsed_s": (now_ns() - start) / 1e9,
            "ports": {p: {"paused_waits": paused_waits[p], "watchdog_drops": watchdog_drops[p]}
                      for p in tx}}


def _send(qp: _Qp, pos: int, sock: socket.socket | None, now: int, start: int, port_free: dict,
          burst_packets: int = BURST_PACKETS) -> None:
    """Send the QP's packet at `pos` (sock None: the PFC watchdog drops it, it only
    counts as sent) and advance the QP's and the port's pacing."""
    m_off, tpl, msg_id, idx, npk, mbytes, seq = qp.pkts[pos]
    f = qp.flow
    if tpl.opcode.has_reth:
        tpl.set_dmalen(mbytes)
    buf = tpl.fill(qp.psn0 + seq, idx == npk - 1, f.flow_id, f.src_qp, msg_id, seq,
                   idx, npk, mbytes, now, start + m_off)
    if sock is not None:
        _send_retry(sock.send, buf)
    bits = tpl.length * 8
    rate = qp.cc.rc if qp.cc is not None else qp.line
    qp.due = max(qp.due, now - int(burst_packets * bits * 1e9 / rate)) + int(bits * 1e9 / rate)
    line_ns = int(bits * 1e9 / qp.line)
    port_free[qp.port] = max(port_free[qp.port], now - burst_packets * line_ns) + line_ns
    if pos >= qp.req.sent_max:
        qp.new_bytes += tpl.length
    qp.req.sent(pos, tpl.length, now)
    if qp.cc is not None:
        qp.cc.on_sent(tpl.length)


def _drain(sock: socket.socket, buf: bytearray, by_key: dict, now: int) -> None:
    while True:
        try:
            n, addr = sock.recvfrom_into(buf)
        except (BlockingIOError, InterruptedError):
            return
        if addr[2] == PACKET_OUTGOING:
            continue
        pkt = roce.parse(memoryview(buf)[:n])
        if pkt is None:
            continue
        qp = by_key.get((pkt.dst_ip, pkt.dqpn))
        if qp is None:
            continue
        if pkt.opcode == roce.Opcode.CNP:
            qp.req.stats.cnps += 1
            if qp.cc is not None:
                qp.cc.on_cnp(now)
        elif pkt.aeth is not None:
            pos = tp.position(pkt.psn, qp.psn0, qp.req.una)
            if pkt.aeth[0] >> 5 == 3:        # NAK (syndrome 011x xxxx)
                qp.req.on_nak(pos, now)
            elif pkt.aeth[0] >> 5 == 0:      # ACK
                qp.req.on_ack(pos, now)
