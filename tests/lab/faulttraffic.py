"""Paced, sequence-numbered UDP streams for the fault tests: a sender in one host
namespace (raw frames, or kernel UDP sockets so the host's own routing picks the port),
a receiver socket in the destination host's namespace, and loss analysis from the
sender's per-packet send times."""
from __future__ import annotations

import socket
import struct
import threading
import time
from ipaddress import IPv4Interface

from dataplane.kernel.netns import in_netns

from .lbtraffic import HostPort

HDR = struct.Struct("!IIQ")          # flow id, global seq, magic


MAGIC = 0x5241494C41424654           # "RAILABFT"


class Receiver:
    """UDP socket bound in a host namespace; records (flow, seq) of every datagram, and
    (seq, arrival ns) in arrival order."""

    def __init__(self, netns: str, port: int):
        with in_netns(netns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # root: SO_RCVBUFFORCE passes net.core.rmem_max, so a receiver thread that briefly
        # loses the GIL to the busy-looping sender does not overflow its socket
        self.sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)   # SO_RCVBUFFORCE
        self.sock.bind(("0.0.0.0", port))
        self.sock.settimeout(0.05)
        self.got: set[int] = set()
        self.by_flow: dict[int, int] = {}
        self.arrivals: list[tuple[int, int]] = []
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop:
            try:
                data = self.sock.recv(2048)
            except (socket.timeout, OSError):
                continue
            if len(data) >= HDR.size:
                flow, seq, magic = HDR.unpack_from(data)
                if magic == MAGIC:
                    self.arrivals.append((seq, time.monotonic_ns()))
                    self.got.add(seq)
                    self.by_flow[flow] = self.by_flow.get(flow, 0) + 1

    def stop(self, linger: float = 0.1):
        time.sleep(linger)
        self._stop = True
        self.thread.join()
        self.sock.close()


class Result:
    def __init__(self, sent: list[tuple[int, int, int]], got: set[int]):
        self.sent = sent                      # (seq, flow, t_ns)
        self.got = got
        self.lost = [(s, f, t) for s, f, t in sent if s not in got]

    def lost_flows(self) -> set[int]:
        return {f for _, f, _ in self.lost}

    def loss_window_ms(self, flows=None, after_ns: int = 0) -> float:
        """Span of send times of lost packets (of `flows`), plus one inter-packet gap of the
        stream: 0 if nothing was lost."""
        lost = [t for _, f, t in self.lost if (flows is None or f in flows) and t >= after_ns]
        if not lost:
            return 0.0
        gap = (self.sent[-1][2] - self.sent[0][2]) / max(len(self.sent) - 1, 1)
        return (max(lost) - min(lost) + gap) / 1e6

    def lost_between(self, t0: int, t1: int, flows=None) -> int:
        return sum(1 for _, f, t in self.lost if t0 <= t < t1 and (flows is None or f in flows))

    def sent_between(self, t0: int, t1: int, flows=None) -> int:
        return sum(1 for _, f, t in self.sent if t0 <= t < t1 and (flows is None or f in flows))


def payload(flow: int, seq: int, size: int) -> bytes:
    return HDR.pack(flow, seq, MAGIC).ljust(size, b"\0")


def paced(send_one, flows: int, pps: float, duration_s: float, events=()) -> list[tuple[int, int, int]]:
    """Call send_one(flow, seq) at pps (flows round robin) for duration_s; events: list of
    (at_s, callable) started at that time in another thread, so the stream keeps flowing
    while a fault is applied (events run one after the other, in order)."""
    sent = []
    events = sorted(events, key=lambda e: e[0])
    ei = 0
    workers = []
    interval = 1e9 / pps
    t0 = time.monotonic_ns()
    next_t = t0
    seq = 0
    end = t0 + int(duration_s * 1e9)
    while True:
        now = time.monotonic_ns()
        if now >= end:
            break
        if ei < len(events) and now - t0 >= events[ei][0] * 1e9:
            prev = workers[-1] if workers else None
            fn = events[ei][1]

            def run(fn=fn, prev=prev):
                if prev is not None:
                    prev.join()
                fn()
            w = threading.Thread(target=run, daemon=True)
            w.start()
            workers.append(w)
            ei += 1
            continue
        if now < next_t:
            continue
        flow = seq % flows
        try:
            send_one(flow, seq)
            sent.append((seq, flow, now))
        except (BlockingIOError, OSError):
            sent.append((seq, flow, now))
        seq += 1
        next_t += interval
        if next_t < now - 5 * interval:       # never burst to catch up
            next_t = now
    for w in workers:
        w.join()
    return sent


class RawStream:
    """Frames from a host NIC (raw socket, fixed egress port), one UDP 5-tuple per flow."""

    def __init__(self, spec, src_host: str, dst_ip: str, *, nic: int = 0, dport: int = 9000,
                 sport_base: int = 20000, size: int = 100):
        self.port = HostPort(spec, src_host, nic)
        self.dst, self.dport, self.sport_base, self.size = dst_ip, dport, sport_base, size
        self.templates = {}

    def frame(self, flow: int, seq: int) -> bytes:
        head = self.templates.get(flow)
        if head is None:
            head = self.templates[flow] = self.port.frame(self.dst, self.sport_base + flow, self.dport,
                                                          size=self.size)[:42]
        return head + payload(flow, seq, self.size - 42)

    def send_one(self, flow: int, seq: int) -> None:
        self.port.sock.send(self.frame(flow, seq))

    def close(self):
        self.port.close()


class KernelStream:
    """UDP sockets in the source host's namespace, bound to a NIC address: the host's own
    routing (multipath over both planes' ports) picks the egress port per flow."""

    def __init__(self, spec, src_host: str, dst_ip: str, *, nic: int = 0, flows: int = 8,
                 dport: int = 9000, sport_base: int = 21000, size: int = 100):
        node = spec.node(src_host)
        src = str(IPv4Interface(spec.host_nics[src_host][nic].address).ip)
        self.socks = []
        with in_netns(node.netns):
            for i in range(flows):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.bind((src, sport_base + i))
                s.setblocking(False)
                self.socks.append(s)
        self.dst = (dst_ip, dport)
        self.size = size

    def send_one(self, flow: int, seq: int) -> None:
        self.socks[flow].sendto(payload(flow, seq, self.size), self.dst)

    def close(self):
        for s in self.socks:
            s.close()


def run_stream(stream, receiver: Receiver, *, flows: int, pps: float, duration_s: float,
               events=()) -> Result:
    sent = paced(stream.send_one, flows, pps, duration_s, events)
    receiver.stop()
    return Result(sent, receiver.got)
