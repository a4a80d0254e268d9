"""Reachability probe: a UDP datagram between every pair of host NICs on different
servers, in dual-plane labs once per plane. A pair is ok when both directions arrive.

Each host gets a thread that enters the host's namespace (sockets belong to the
namespace their thread was in when they were made), so the whole probe is one process.
Failed pairs are traced from the switches' counters: the probe is sent again and the
counter differences show the last switch that saw it and any drop reason.
"""
from __future__ import annotations

import random
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from ipaddress import IPv4Interface

from dataplane.errors import RuntimeStateError
from dataplane.kernel.netns import in_netns, room_for_files
from dataplane.runtime.labspec import LabSpec, segment_of

PROBE_PORT = 47_999
SO_BINDTODEVICE = 25


@dataclass(frozen=True)
class ProbePort:
    host: str
    port: str
    address: str
    plane: int | None
    pinned: bool        # bind to the port itself (a NIC with one port per plane)


@dataclass
class ProbeResult:
    pairs: int
    ok: int
    failed: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"pairs": self.pairs, "ok": self.ok, "failed": self.failed}


def probe_ports(spec: LabSpec) -> list[ProbePort]:
    ports = []
    for host in spec.hosts:
        by_name = {i.name: i for i in host.interfaces}
        for nic in spec.host_nics.get(host.name, []):
            address = str(IPv4Interface(nic.address).ip)
            for port in nic.ports:
                ports.append(ProbePort(host.name, port, address, by_name[port].plane, len(nic.ports) > 1))
    return ports


def probe_pairs(ports: list[ProbePort]) -> list[tuple[ProbePort, ProbePort]]:
    """Unordered pairs across servers; a pinned port pairs only with ports of its plane."""
    pairs = []
    for i, a in enumerate(ports):
        for b in ports[i + 1:]:
            # not within a server: intra-server traffic never touches the fabric (NVLink)
            if _valid_pair(a, b):
                pairs.append((a, b))
    return pairs


def _valid_pair(a: ProbePort, b: ProbePort) -> bool:
    return a.host != b.host and not ((a.pinned or b.pinned) and a.plane != b.plane)


def sample_pairs(spec: LabSpec, ports: list[ProbePort], n: int, seed: int = 0) -> list[tuple[ProbePort, ProbePort]]:
    """At least one pair for every two leaves that can reach each other (a leaf with
    itself too: two servers on it), then random pairs up to n in all. Never builds the
    full pair list (a 1,024-GPU lab has a million pairs)."""
    rng = random.Random(seed)
    leaf_of = {(h.name, i.name): i.peer_node for h in spec.hosts for i in h.interfaces}
    on_leaf: dict[str, list[ProbePort]] = {}
    for p in ports:
        on_leaf.setdefault(leaf_of[(p.host, p.port)], []).append(p)
    chosen: dict[tuple, tuple[ProbePort, ProbePort]] = {}

    def key(a, b):
        return tuple(sorted(((a.host, a.port), (b.host, b.port))))

    leaves = sorted(on_leaf)
    # one port per leaf stands for it in every leaf pair it can: a port that sends from its
    # host's kernel stack costs its leaf's native-XDP port a 256 KiB page pool, and a
    # 16,384-GPU lab's 16,512 leaf pairs over random ports would touch all 32,768 (8 GiB)
    stand_in = {leaf: rng.choice(on_leaf[leaf]) for leaf in leaves}
    for i, la in enumerate(leaves):
        for lb in leaves[i:]:
            # every valid pair on two leaves, in random order, until one is found
            # (cheap: leaves of different planes fail at once on the plane)
            first_a, first_b = on_leaf[la][0], on_leaf[lb][0]
            if first_a.pinned and first_b.pinned and first_a.plane != first_b.plane:
                continue
            a, b = stand_in[la], stand_in[lb] if la != lb else rng.choice(on_leaf[lb])
            if _valid_pair(a, b):
                chosen.setdefault(key(a, b), (a, b))
                continue
            for _ in range(64):
                a, b = rng.choice(on_leaf[la]), rng.choice(on_leaf[lb])
                if _valid_pair(a, b):
                    chosen.setdefault(key(a, b), (a, b))
                    break
    tries = 0
    while len(chosen) < n and tries < 50 * n:
        tries += 1
        a, b = rng.choice(ports), rng.choice(ports)
        if _valid_pair(a, b):
            chosen.setdefault(key(a, b), (a, b))
    return list(chosen.values())


def _message(src: ProbePort, dst: ProbePort, attempt: int) -> bytes:
    return f"railab-probe {src.host} {src.port} {dst.host} {dst.port} {attempt}".encode()


class _HostWorker:
    def __init__(self, netns: str, host: str, ports: list[ProbePort]):
        self.netns = netns
        self.host = host
        self.ports = ports
        self.received: set[tuple[str, str, str, str]] = set()
        self.error: str | None = None
        self.receiver: socket.socket | None = None
        self.senders: dict[str, socket.socket] = {}

    def open(self) -> None:
        try:
            with in_netns(self.netns):
                self.receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self.receiver.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                self.receiver.bind(("0.0.0.0", PROBE_PORT))
                self.receiver.setblocking(False)
                for p in self.ports:
                    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    if p.pinned:
                        s.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, p.port.encode())
                    s.bind((p.address, 0))
                    self.senders[p.port] = s
        except OSError as err:
            self.error = f"{self.host}: {err}"

    def receive(self) -> None:
        """What the receiver holds now (it does not block)."""
        while True:
            try:
                data = self.receiver.recv(512)
            except OSError:          # nothing more (BlockingIOError), or closed
                return
            words = data.decode(errors="replace").split()
            if len(words) == 6 and words[0] == "railab-probe" and words[3] == self.host:
                self.received.add((words[1], words[2], words[3], words[4]))

    def close(self) -> None:
        for s in [self.receiver, *self.senders.values()]:
            if s is not None:
                s.close()


def _receive_until(workers, stop: threading.Event) -> None:
    """One thread for every host's receiver (a thread per host was 2,048 threads at
    16,384 GPUs)."""
    with selectors.DefaultSelector() as sel:
        for w in workers:
            if w.receiver is not None:
                sel.register(w.receiver, selectors.EVENT_READ, w)
        while not stop.is_set():
            for key, _ in sel.select(timeout=0.05):
                key.data.receive()


def run_probe(spec: LabSpec, *, attempts: int = 3, wait_s: float = 0.6, tracer=None,
              sample: int | None = None) -> ProbeResult:
    """Every NIC pair, or with sample=N every leaf pair and random pairs up to N."""
    ports = probe_ports(spec)
    pairs = probe_pairs(ports) if sample is None else sample_pairs(spec, ports, sample)
    netns_of = {n.name: n.netns for n in spec.hosts}
    # a socket for each port in a pair and a receiver on each host with one, no more
    used: dict[str, dict[str, ProbePort]] = {}
    for pair in pairs:
        for p in pair:
            used.setdefault(p.host, {})[p.port] = p
    try:
        room_for_files(sum(len(p) + 1 for p in used.values()))
    except OSError as err:
        raise RuntimeStateError(f"the probe cannot open its sockets: {err}") from None
    workers = {h: _HostWorker(netns_of[h], h, list(used[h].values())) for h in used}
    for w in workers.values():
        w.open()
    errors = [w.error for w in workers.values() if w.error]
    stop = threading.Event()
    threads = [threading.Thread(target=_receive_until, args=(list(workers.values()), stop), daemon=True)]
    for t in threads:
        t.start()
    try:
        if errors:
            shown = "; ".join(errors[:3]) + (f"; ... ({len(errors) - 3} more hosts)" if len(errors) > 3 else "")
            raise RuntimeStateError(f"the probe could not open its sockets: {shown}")
        directions = [(a, b) for a, b in pairs] + [(b, a) for a, b in pairs]
        pending = list(directions)
        for attempt in range(attempts):
            for src, dst in pending:
                _send(workers[src.host], src, dst, attempt)
            deadline = time.monotonic() + wait_s * (attempt + 1)
            while time.monotonic() < deadline:
                pending = [d for d in pending if not _arrived(workers, *d)]
                if not pending:
                    break
                time.sleep(0.02)
            if not pending:
                break
    finally:
        stop.set()
        for t in threads:
            t.join()
        for w in workers.values():
            w.close()

    failed = []
    traced: dict[tuple, str] = {}
    for a, b in pairs:
        dead = [(s, d) for s, d in ((a, b), (b, a)) if not _arrived(workers, s, d)]
        if dead:
            src, dst = dead[0]
            entry = {"a": f"{a.host}:{a.port}", "b": f"{b.host}:{b.port}",
                     "direction": f"{src.host}:{src.port} -> {dst.host}:{dst.port}",
                     "plane": a.plane if a.pinned else None}
            if tracer is not None:
                # Pairs from one port towards one NIC subnet die at the same hop: trace
                # once per such group, so a dead port does not cost a trace per pair.
                key = (src.host, src.port, segment_of(spec, dst.address))
                if key not in traced:
                    traced[key] = tracer(src, dst)
                entry["died_at"] = traced[key]
            failed.append(entry)
    return ProbeResult(len(pairs), len(pairs) - len(failed), failed)


def _send(worker: _HostWorker, src: ProbePort, dst: ProbePort, attempt: int) -> None:
    try:
        worker.senders[src.port].sendto(_message(src, dst, attempt), (dst.address, PROBE_PORT))
    except OSError:
        pass  # counted as a failed pair, then traced


def _arrived(workers, src: ProbePort, dst: ProbePort) -> bool:
    return (src.host, src.port, dst.host, dst.port) in workers[dst.host].received


def send_once(spec: LabSpec, src: ProbePort, dst: ProbePort, count: int = 5) -> None:
    """Send a few probes for one direction (used to trace where a failed pair dies)."""
    netns = spec.node(src.host).netns
    with in_netns(netns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        if src.pinned:
            s.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, src.port.encode())
        s.bind((src.address, 0))
        for i in range(count):
            try:
                s.sendto(_message(src, dst, 100 + i), (dst.address, PROBE_PORT))
            except OSError:
                pass
    finally:
        s.close()
