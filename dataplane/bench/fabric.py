"""Fabric forwarding benchmark: trafgen (netsniff-ng) floods UDP from a host on one leaf
to a host on another (leaf -> spine -> leaf) of a deployed lab, and the rate is what the
RECEIVING host's interface counts (rx_packets / rx_bytes of its veth, in its namespace),
not what was sent. `railab bench fabric` runs it on the same lab shape deployed twice,
once with the XDP switches and once with Linux forwarding (`--dataplane kernel`).
"""
from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path

from dataplane.bench import plain
from dataplane.bench.traffic import TRAFGEN, link_stats, stop_group, veth_pair
from dataplane.kernel.netns import in_netns
from dataplane.lab.fabric import Fabric
from dataplane.runtime import labspec, lifecycle
from dataplane.runtime.labspec import LabSpec
from dataplane.topology.clab import read as load_topology
from dataplane.xdp.bpfio import attach_xdp, detach_xdp

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
                return FabricPath(src.netns, src_if.name, src_if.mac, host_address(src_if.address),
                                  leaf.interface(src_if.peer_if).mac, dst.netns, dst_if.name,
                                  host_address(dst_if.address))
    raise ValueError(f"lab {spec.name}: no two hosts behind different leaves")


def host_address(cidr: str | None) -> str:
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
        workers = _group_pids(proc.pid) + _softirq_pids()
        cpu0 = _cpu_ns(workers)
        (p0, b0), t0 = rx_counts(path.rx_ns, path.rx_if), time.monotonic()
        time.sleep(duration_s)
        (p1, b1), t1 = rx_counts(path.rx_ns, path.rx_if), time.monotonic()
        cpu1 = _cpu_ns(workers)
    finally:
        if proc is not None:
            stop_group(proc)
        os.unlink(cfg)
    seconds = t1 - t0
    packets = p1 - p0
    # rx_bytes counts frames without FCS; line figures add it back
    cpu_s = sum(cpu1[pid] - cpu0[pid] for pid in cpu1 if pid in cpu0) / 1e9
    return {"pps": packets / seconds, "bps": (b1 - b0 + 4 * packets) * 8 / seconds,
            "packets": packets, "seconds": seconds, "cpu_s": cpu_s,
            "pps_per_cpu": packets / cpu_s if cpu_s > 0 else None}


def _group_pids(pgid: int) -> list[int]:
    """trafgen and its worker (one process group)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    pids.append(int(entry))
            except ProcessLookupError:
                pass
    return pids


def _softirq_pids() -> list[int]:
    """ksoftirqd and threaded-NAPI kernel threads: where deferred forwarding runs."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().startswith(("ksoftirqd/", "napi/")):
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def _cpu_ns(pids: list[int]) -> dict[int, int]:
    """CPU time run so far (ns, /proc/PID/schedstat). Without IRQ time accounting (this
    kernel), softirq work -- all the forwarding here -- is charged to the task it
    interrupted or to ksoftirqd, so the sender's and ksoftirqd's time is the path's."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                out[pid] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


# ---------------------------------------------------------------- the floor of XDP on veth
# A minimal XDP forwarder: rewrite both MACs and redirect through a DEVMAP, per ingress
# port, nothing else (no parsing beyond Ethernet, no TTL, no counters). Attached for a
# moment to the switch ports of the KERNEL lab, it gives what any XDP switch on these
# veths can reach at best on this path: if it is not 2x the kernel, no switch program is.
BARE_FORWARDER = r"""
#include <uapi/linux/bpf.h>
struct hop { u32 egress; u8 dst[6]; u8 src[6]; };
BPF_ARRAY(hops, struct hop, MAX_IFINDEX);   // key: ingress ifindex (host order); value: egress + MACs
BPF_DEVMAP(ports, MAX_IFINDEX);             // key: egress ifindex; value: the same ifindex
int xdp_bare(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    u32 key = ctx->ingress_ifindex;
    struct hop *h = hops.lookup(&key);
    if (!h || !h->egress || data + 12 > end)
        return XDP_PASS;
    __builtin_memcpy(data, h->dst, 6);
    __builtin_memcpy(data + 6, h->src, 6);
    return ports.redirect_map(h->egress, 0);
}
"""


def path_hops(spec: LabSpec, path: FabricPath) -> list[tuple]:
    """(switch node, ingress interface, egress interface) from the sender's leaf to the
    receiver's, following each switch's first next hop towards the receiver."""
    nodes = {n.name: n for n in spec.nodes}
    sender = next(n for n in spec.hosts if n.netns == path.tx_ns)
    iface = sender.interface(path.tx_if)
    node, ingress = nodes[iface.peer_node], iface.peer_if
    dst = IPv4Address(path.rx_ip)
    hops = []
    while node.role != "host":
        routes = [r for r in spec.routes.get(node.name, []) if dst in IPv4Network(r.prefix)]
        if not routes or len(hops) > 8:
            raise ValueError(f"no route to {dst} on {node.name}")
        best = max(routes, key=lambda r: IPv4Network(r.prefix).prefixlen)
        egress = node.interface(best.nexthops[0])
        hops.append((node, node.interface(ingress), egress))
        node, ingress = nodes[egress.peer_node], egress.peer_if
    return hops


class BareForwarder:
    """BARE_FORWARDER compiled and programmed for one path of a kernel-forwarding lab;
    attach() puts it on every switch port, detach() takes it off (also on exit)."""

    def __init__(self, spec: LabSpec, path: FabricPath):
        self.spec, self.path = spec, path
        self.attached: list[tuple[str, int]] = []
        self.bpf = None

    def __enter__(self):
        from bcc import BPF            # heavy: only when the bare rows run
        top = max(i.ifindex for n in self.spec.nodes for i in n.interfaces) + 1
        self.bpf = BPF(text=BARE_FORWARDER, cflags=[f"-DMAX_IFINDEX={top}", "-w"])
        self.fn = self.bpf.load_func("xdp_bare", BPF.XDP)
        hops, ports = self.bpf["hops"], self.bpf["ports"]
        for node, ingress, egress in path_hops(self.spec, self.path):
            hops[hops.Key(ingress.ifindex)] = hops.Leaf(egress.ifindex, _mac(egress.peer_mac), _mac(egress.mac))
            with in_netns(node.netns):     # a DEVMAP resolves the ifindex in the caller's namespace
                ports[ports.Key(egress.ifindex)] = ports.Leaf(egress.ifindex)
        return self

    def attach(self, mode: str = "drv") -> None:
        for node in self.spec.switches:
            for i in node.interfaces:
                attach_xdp(node.netns, i.ifindex, self.fn.fd, mode=mode)
                self.attached.append((node.netns, i.ifindex))

    def detach(self) -> None:
        while self.attached:
            netns, ifindex = self.attached.pop()
            try:
                detach_xdp(netns, ifindex)
            except Exception:       # the namespace may be gone: nothing left to detach
                pass

    def __exit__(self, *exc):
        self.detach()
        if self.bpf is not None:
            self.bpf.cleanup()
        return False


def _mac(text: str):
    return (ctypes.c_ubyte * 6)(*bytes.fromhex(text.replace(":", "")))


@contextmanager
def direct_path(model: FabricPath):
    """The ceiling of any fabric: the same sender and receiver joined by ONE veth, no
    switch at all (the receiver set up as a lab host: its address, GRO on, tx
    checksum off). Frames carry `model`'s addresses, so the receiver's stack does the
    same work for them as behind a fabric."""
    with veth_pair("rlbf") as p:
        for args in (["-n", p.rx_ns, "addr", "add", f"{model.rx_ip}/32", "dev", p.rx_if],
                     ["-n", p.tx_ns, "addr", "add", f"{model.tx_ip}/32", "dev", p.tx_if]):
            subprocess.run(["ip", *args], check=True, capture_output=True)
        for ns, ifname in ((p.rx_ns, p.rx_if), (p.tx_ns, p.tx_if)):
            subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-K", ifname, "tx", "off", "gro", "on"],
                           check=True, capture_output=True)
        yield FabricPath(p.tx_ns, p.tx_if, _if_mac(p.tx_ns, p.tx_if), model.tx_ip,
                         _if_mac(p.rx_ns, p.rx_if), p.rx_ns, p.rx_if, model.rx_ip)


def _if_mac(ns: str, ifname: str) -> str:
    out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", "dev", ifname],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]["address"]


# ---------------------------------------------------------------- the benchmark
SIZES = (64,)
FLOWS = (1,)
DEFAULT_SCALE = 1.0     # nominal 400G ports: the model does its bookkeeping, never caps here
BASELINE = "plain"
# Each row: (name, who forwards, port model). `plain` is the baseline every ratio is
# against; `plain-direct` and `direct` are the same sender and receiver joined by one veth
# (plain, and with railab's host-port settings): the ceiling each per-hop cost is taken from.
VARIANTS = {
    "plain": "Linux forwarding, plain namespaces (baseline)",
    "kernel": "railab --dataplane kernel",
    "xdp": "railab XDP (native)",
    "xdp-generic": "railab XDP (generic)",
    "bare": "bare XDP forwarder (native)",
    "bare-generic": "bare XDP forwarder (generic)",
    "plain-direct": "no switch (1 veth, plain)",
    "direct": "no switch (1 veth, railab host settings)",
}
DIRECT_OF = {"plain": "plain-direct"}      # every other row: "direct"



@contextmanager
def _plain_direct(model: FabricPath):
    """One veth between two bare namespaces, addresses only (plain Linux's ceiling)."""
    with veth_pair("rlbp") as p:
        for args in (["-n", p.rx_ns, "addr", "add", f"{model.rx_ip}/32", "dev", p.rx_if],
                     ["-n", p.tx_ns, "addr", "add", f"{model.tx_ip}/32", "dev", p.tx_if]):
            subprocess.run(["ip", *args], check=True, capture_output=True)
        yield FabricPath(p.tx_ns, p.tx_if, _if_mac(p.tx_ns, p.tx_if), model.tx_ip,
                         _if_mac(p.rx_ns, p.rx_if), p.rx_ns, p.rx_if, model.rx_ip)


def bench_fabric(*, duration_s: float = 1.5, repeat: int = 3, scale: float = DEFAULT_SCALE,
                 bare: bool = True, generic: bool = True, sizes=SIZES, flows_list=FLOWS,
                 log=None) -> dict:
    """The clos2 lab's leaf -> spine -> leaf path forwarded by plain Linux (bare namespaces,
    veth, static routes, ip_forward: dataplane.bench.plain; the baseline), railab's XDP
    switches with the port model off and on (virtual queue at `scale`), railab's kernel
    lab, optionally the same XDP program in generic mode and the bare XDP forwarder, and
    the two one-veth ceilings. Every row is measured in turn `repeat` times (medians), so
    all see the same machine load."""
    log = log or (lambda text: None)
    lab_file = Path(__file__).resolve().parents[2] / "labs" / "clos2" / "clos2.clab.yml"
    tag = uuid.uuid4().hex[:6]
    specs = {}
    for dataplane in ("xdp", "xdp-generic", "kernel")[:: 1 if generic else 2]:
        topo = load_topology(lab_file)
        topo.name = f"bfab-{dataplane.replace('xdp-generic', 'g')[0]}-{tag}"
        specs[dataplane] = labspec.build(topo, str(lab_file), dataplane=dataplane)
    load_before = os.getloadavg()
    rows = []
    with ExitStack() as stack:
        for spec in specs.values():
            log(f"deploying {spec.name} ({spec.dataplane})")
            stack.callback(lifecycle.destroy, spec.name)
            lifecycle.deploy(spec)
        plain_spec = stack.enter_context(plain.plain_fabric(specs["kernel"], tag))
        paths = {dp: cross_leaf_path(spec) for dp, spec in specs.items()}
        paths["plain"] = cross_leaf_path(plain_spec)
        paths["plain-direct"] = stack.enter_context(_plain_direct(paths["kernel"]))
        paths["direct"] = stack.enter_context(direct_path(paths["kernel"]))
        forwarder = stack.enter_context(BareForwarder(specs["kernel"], paths["kernel"])) if bare else None
        hops = len(path_hops(specs["kernel"], paths["kernel"]))
        fabrics = {dp: Fabric(specs[dp].name) for dp in ("xdp", "xdp-generic") if dp in specs}
        # (row name, port model, path, setup)
        plan = [("plain", "-", "plain", None), ("kernel", "-", "kernel", None)]
        for dp in fabrics:
            plan += [(dp, "off", dp, (dp, 0.0)), (dp, "on", dp, (dp, scale))]
        if forwarder:
            plan += [("bare", "-", "kernel", "drv"), ("bare-generic", "-", "kernel", "generic")]
        plan += [("plain-direct", "-", "plain-direct", None), ("direct", "-", "direct", None)]
        for size in sizes:
            for flows in flows_list:
                runs = {(name, model): [] for name, model, _, _ in plan}
                for _ in range(repeat):
                    for name, model, path, setup in plan:
                        if isinstance(setup, tuple):
                            fabrics[setup[0]].set_port_model(scale=setup[1], queue="virtual")
                        elif setup:
                            forwarder.attach(setup)
                        try:
                            runs[(name, model)].append(measure(paths[path], frame_bytes=size, flows=flows,
                                                               duration_s=duration_s))
                        finally:
                            if setup and not isinstance(setup, tuple):
                                forwarder.detach()
                new = [_row(name, model, size, flows, r) for (name, model), r in runs.items()]
                _compare(new, hops)
                for row in new:
                    log(_row_text(row))
                rows += new
    return {"bench": "fabric", "lab": "clos2 (labs/clos2: 4 leaves, 2 spines, 2 links per leaf-spine pair)",
            "path": "srv1:nic0 -> leaf1 -> spine -> leaf2 -> srv3:nic0", "hops": hops, "baseline": BASELINE,
            "sender": "trafgen (netsniff-ng), one process, UDP; counted at the receiving host port",
            "duration_s": duration_s, "repeat": repeat, "port_model_scale": scale,
            "port_model_speed_bps": int(400e9 * scale),
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                        "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
            "rows": rows}


def _row(name: str, model: str, size: int, flows: int, runs: list[dict]) -> dict:
    per_cpu = median_of(runs, "pps_per_cpu")
    return {"dataplane": name, "label": VARIANTS[name], "port_model": model, "frame_bytes": size,
            "flows": flows, "pps": statistics.median([r["pps"] for r in runs]), "bps": statistics.median([r["bps"] for r in runs]),
            "pps_per_cpu": per_cpu, "ns_per_packet": 1e9 / per_cpu if per_cpu else None,
            "pps_runs": [round(r["pps"]) for r in runs]}


def _compare(rows: list[dict], hops: int) -> None:
    """Ratios against the plain-Linux row of the same frame size and flows, and the CPU
    cost of one hop: (ns per delivered packet - the matching one-veth ceiling's) / hops."""
    by_name = {(r["dataplane"], r["port_model"]): r for r in rows}
    base = by_name[(BASELINE, "-")]
    for r in rows:
        r["ratio"] = ratio(r["pps"], base["pps"])
        r["ratio_per_cpu"] = ratio(r["pps_per_cpu"], base["pps_per_cpu"])
        ceiling = by_name.get((DIRECT_OF.get(r["dataplane"], "direct"), "-"))
        r["hop_ns"] = None
        if "direct" not in r["dataplane"] and ceiling and r["ns_per_packet"] and ceiling["ns_per_packet"]:
            r["hop_ns"] = (r["ns_per_packet"] - ceiling["ns_per_packet"]) / hops


def median_of(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key)]
    return statistics.median(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _row_text(row: dict) -> str:
    return (f"{row['label']} model {row['port_model']} {row['frame_bytes']} B x {row['flows']}: "
            f"{row['pps'] / 1e3:.0f} kpps ({_fmt(row['ratio'])} x plain Linux)")


def _fmt(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"
