"""Fabric forwarding benchmark: trafgen (netsniff-ng) floods UDP from a host on one leaf
to a host on another (leaf -> spine -> leaf) of a deployed lab, and the rate is what the
RECEIVING host's interface counts (rx_packets / rx_bytes of its veth, in its namespace),
not what was sent. `railab bench fabric` runs it on the same lab shape deployed twice,
once with the XDP switches and once with Linux forwarding (`--dataplane kernel`).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from ipaddress import IPv4Interface

from dataplane.runtime.labspec import LabSpec
from dataplane.traffic.bench import TRAFGEN, link_stats

FIRST_SPORT = 10000
DPORT = 9     # discard: nothing listens, the receiver's stack drops it (ICMP replies rate-limited)


@dataclass(frozen=True)
class FabricPath:
    """Sender and receiver NICs on two different leaves, and the first switch's MAC."""
    tx_ns: str
    tx_if: str
    tx_mac: str
    tx_ip: str
    gateway_mac: str
    rx_ns: str
    rx_if: str
    rx_ip: str


def cross_leaf_path(spec: LabSpec) -> FabricPath:
    """The first host port and the first port of a host behind another leaf: their
    traffic crosses leaf -> spine -> leaf (in a two-tier Clos)."""
    nodes = {n.name: n for n in spec.nodes}
    hosts = [h for h in spec.hosts if h.interfaces]
    if len(hosts) < 2:
        raise ValueError(f"lab {spec.name}: needs two hosts behind different leaves")
    src = hosts[0]
    src_if = src.interfaces[0]
    for dst in hosts[1:]:
        for dst_if in dst.interfaces:
            if dst_if.peer_node != src_if.peer_node and dst_if.address:
                leaf = nodes[src_if.peer_node]
                return FabricPath(src.netns, src_if.name, src_if.mac, _ip(src_if.address),
                                  leaf.interface(src_if.peer_if).mac, dst.netns, dst_if.name,
                                  _ip(dst_if.address))
    raise ValueError(f"lab {spec.name}: no two hosts behind different leaves")


def _ip(cidr: str | None) -> str:
    if not cidr:
        raise ValueError("a host port without an address")
    return str(IPv4Interface(cidr).ip)


def udp_frame(path: FabricPath, frame_bytes: int, sport: int) -> bytes:
    """Ethernet/IPv4/UDP of `frame_bytes` on the wire without FCS (64 -> 60 + 4 FCS),
    IP checksum filled in (the kernel checks it), UDP checksum 0 (none, legal in IPv4)."""
    from scapy.layers.inet import IP, UDP          # scapy's import is slow: only when sending
    from scapy.layers.l2 import Ether
    size = max(frame_bytes - 4, 60)
    head = Ether(src=path.tx_mac, dst=path.gateway_mac) / IP(src=path.tx_ip, dst=path.rx_ip, ttl=64) \
        / UDP(sport=sport, dport=DPORT, chksum=0)
    frame = bytes(head / (b"\0" * (size - len(head))))
    return frame


def trafgen_config(frames: list[bytes]) -> str:
    """One packet block per frame; trafgen sends them in turn (flows interleaved)."""
    return "".join("{ " + ", ".join(f"0x{b:02x}" for b in f) + " }\n" for f in frames)


def rx_counts(ns: str, ifname: str) -> tuple[int, int]:
    rx = link_stats(ns, ifname)["rx"]
    return int(rx["packets"]), int(rx["bytes"])


def _stop_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; its worker may not be
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    proc.wait()


def measure(path: FabricPath, *, frame_bytes: int, flows: int, duration_s: float = 2.0,
            warmup_s: float = 0.5, trafgen: str = TRAFGEN, cpu: int | None = None) -> dict:
    """Flood with trafgen (one process) for warm-up + duration; returns packets/s and
    bits/s of Ethernet frames (with FCS) delivered at the receiving host port."""
    if not shutil.which(trafgen):
        raise FileNotFoundError(f"{trafgen} not found (Debian package netsniff-ng)")
    frames = [udp_frame(path, frame_bytes, FIRST_SPORT + i) for i in range(flows)]
    with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
        f.write(trafgen_config(frames))
        cfg = f.name
    argv = ["ip", "netns", "exec", path.tx_ns, trafgen, "--dev", path.tx_if, "--conf", cfg,
            "-P", "1", "--no-sock-mem", "-Q"]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu), *argv]
    proc = None
    try:
        # --no-sock-mem / -Q: leave the global socket-memory sysctls and IRQ affinity alone
        # its own process group: trafgen's worker is a child that outlives a SIGINT to
        # the parent, so the whole group is stopped
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        time.sleep(warmup_s)
        if proc.poll() is not None:
            raise RuntimeError(f"trafgen exited: {proc.stderr.read().decode().strip()[-200:]}")
        (p0, b0), t0 = rx_counts(path.rx_ns, path.rx_if), time.monotonic()
        time.sleep(duration_s)
        (p1, b1), t1 = rx_counts(path.rx_ns, path.rx_if), time.monotonic()
    finally:
        if proc is not None:
            _stop_group(proc)
        os.unlink(cfg)
    seconds = t1 - t0
    packets = p1 - p0
    # rx_bytes counts frames without FCS; line figures add it back
    return {"pps": packets / seconds, "bps": (b1 - b0 + 4 * packets) * 8 / seconds,
            "packets": packets, "seconds": seconds}
