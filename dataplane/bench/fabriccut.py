"""`railab bench fabric --across-machines`: the forwarding rate across a link cut between
machines next to the rate within one machine, in one run, on one lab.

The clos2 lab is deployed split over two emulated machines (dataplane.runtime.emulated:
network namespaces joined by a veth underlay, `railab deploy --runtime containerlab
--hosts` on them), which puts leaf1, leaf2 and spine1 with their servers on machine a and
leaf3, leaf4 and spine2 on machine b. trafgen floods from srv1 (behind leaf1) and the
receiving host port counts, as in dataplane.bench.fabric, along three paths of three
switches each:

- within one machine: leaf1 -> spine1 -> leaf2, every link a veth on machine a;
- across a cut link: leaf1 -> spine1 -> leaf3, the last fabric link a vxlan-stitch to b;
- through the other machine's spine: leaf1 -> spine2 -> leaf2, two cut links (a -> b -> a).

leaf1 would spread the flood over both spines (ECMP), so each row pins its flows to one
uplink with traffic-matrix entries (`railab tm`); after each measurement the pinned
spine's ingress counter must have moved by at least what was delivered, or the row is
refused: a row must measure the path it is labelled with.
"""
from __future__ import annotations

import os
import platform
import shutil
import statistics
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from dataplane.bench.fabric import DPORT, FIRST_SPORT, FabricPath, host_address, measure, median_of, ratio
from dataplane.bench.traffic import TRAFGEN, link_stats
from dataplane.errors import RuntimeStateError
from dataplane.lab.fabric import Fabric
from dataplane.runtime import containerlab as clab_runtime
from dataplane.runtime import emulated, hostdeploy, labspec, lifecycle, state
from dataplane.runtime.labspec import LabSpec
from dataplane.topology import multihost
from dataplane.topology.clab import read as load_topology

LAB_FILE = Path(__file__).resolve().parents[2] / "labs" / "clos2" / "clos2.clab.yml"
MACHINES = 2
BASELINE = "within"
ROWS = {
    "within": "within one machine",
    "cut": "across a cut link",
    "cut2": "through the other machine's spine",
}


@dataclass(frozen=True)
class CutPath:
    """One row's path: the flood's endpoints, the leaf uplink its flows are pinned to, and
    where it crosses machines."""
    row: str
    path: FabricPath
    leaf: str               # the sender's leaf
    uplink: str             # its port the flows are pinned to
    spine: str
    spine_port: str         # the spine's ingress port (its counter proves the path)
    cut_links: int
    text: str               # "srv1:nic0 -> leaf1 -> spine1 -> leaf3 -> srv5:nic0"


def split_paths(spec: LabSpec, where: dict[str, str]) -> list[CutPath]:
    """The three rows' paths (see the module's doc) on a two-tier lab split by `where`
    (node -> machine): from the first host port, through a spine on the sender leaf's
    machine to a leaf there and to a leaf on another machine, and through a spine on
    another machine back to the leaf there."""
    nodes = {n.name: n for n in spec.nodes}
    src = next(h for h in spec.hosts if h.interfaces)
    src_if = src.interfaces[0]
    leaf = nodes[src_if.peer_node]
    home = where[leaf.name]
    uplinks = [i for i in leaf.interfaces if nodes[i.peer_node].role == "spine"]
    near = next((i for i in uplinks if where[i.peer_node] == home), None)
    far = next((i for i in uplinks if where[i.peer_node] != home), None)
    if near is None or far is None:
        raise ValueError(f"lab {spec.name}: {leaf.name} needs a spine on its machine and one on another")

    def host_port(same_machine: bool):
        for host in spec.hosts:
            for iface in host.interfaces:
                other = iface.peer_node
                if iface.address and other != leaf.name and (where[other] == home) == same_machine:
                    return host, iface
        raise ValueError(f"lab {spec.name}: no host behind another leaf "
                         f"{'on' if same_machine else 'off'} {leaf.name}'s machine")

    def row(name: str, uplink, dst_host, dst_if) -> CutPath:
        spine = uplink.peer_node
        cut = (where[spine] != home) + (where[spine] != where[dst_if.peer_node])
        path = FabricPath(src.netns, src_if.name, src_if.mac, host_address(src_if.address),
                          leaf.interface(src_if.peer_if).mac, dst_host.netns, dst_if.name,
                          host_address(dst_if.address))
        text = (f"{src.name}:{src_if.name} -> {leaf.name} -> {spine} -> {dst_if.peer_node} -> "
                f"{dst_host.name}:{dst_if.name}")
        return CutPath(name, path, leaf.name, uplink.name, spine, uplink.peer_if, cut, text)

    local, remote = host_port(True), host_port(False)
    return [row("within", near, *local), row("cut", near, *remote), row("cut2", far, *local)]


def require_tools() -> None:
    """One line, before anything is made, when this machine cannot run the split lab."""
    missing = [tool for tool in ("docker", "containerlab") if shutil.which(tool) is None]
    if not missing:
        why = clab_runtime._docker_ready()
        if why:
            missing.append(f"a running Docker engine ({why})")
        elif not clab_runtime._image_present(clab_runtime.node_image()):
            missing.append(f"railab's node image {clab_runtime.node_image()}")
    if shutil.which(TRAFGEN) is None:
        missing.append(f"{TRAFGEN} (Debian package netsniff-ng)")
    if missing:
        raise RuntimeStateError(f"bench fabric --across-machines needs Docker, containerlab and "
                                f"railab's images (scripts/setup.sh); missing: {', '.join(missing)}")


def _pin(fabric: Fabric, cut: CutPath, flows: int, add: bool) -> None:
    """Traffic-matrix entries sending each flow of the flood out of the row's uplink."""
    for i in range(flows):
        flow = dict(src=cut.path.tx_ip, dst=cut.path.rx_ip, sport=FIRST_SPORT + i, dport=DPORT, proto="udp")
        if add:
            fabric.tm_add(cut.leaf, egress=cut.uplink, **flow)
        else:
            fabric.tm_del(cut.leaf, **flow)


def _measure_row(fabric: Fabric, spec: LabSpec, cut: CutPath, *, frame_bytes: int, flows: int,
                 duration_s: float) -> dict:
    spine_ns = spec.node(cut.spine).netns
    _pin(fabric, cut, flows, add=True)
    try:
        before = int(link_stats(spine_ns, cut.spine_port)["rx"]["packets"])
        result = measure(cut.path, frame_bytes=frame_bytes, flows=flows, duration_s=duration_s)
        through = int(link_stats(spine_ns, cut.spine_port)["rx"]["packets"]) - before
    finally:
        _pin(fabric, cut, flows, add=False)
    if through < result["packets"]:
        raise RuntimeStateError(f"row {cut.row}: {result['packets']} packets delivered but only "
                                f"{through} entered {cut.spine}:{cut.spine_port}; the flood took "
                                f"another path than {cut.text}")
    return result


def _destroy(lab: str) -> None:
    with lifecycle._signals_held():       # a second Ctrl-C must not stop the cleanup half-way
        lifecycle.destroy(lab)


def bench_across(*, duration_s: float = 1.5, repeat: int = 3, sizes=(64,), flows_list=(1,),
                 log=None) -> dict:
    """The three rows (see the module's doc) on clos2 split over two emulated machines,
    port model off, each measured in turn `repeat` times (medians). The machines and the
    lab are removed at the end, also on an error, Ctrl-C or SIGTERM."""
    log = log or (lambda text: None)
    lifecycle.require_root()
    require_tools()
    tag = uuid.uuid4().hex[:6]
    topo = load_topology(LAB_FILE)
    topo.name = f"bfab-m-{tag}"
    spec = labspec.build(topo, str(LAB_FILE), runtime="containerlab", dataplane="xdp")
    subnet = emulated.free_subnet(emulated.networks_in_use())
    load_before = os.getloadavg()
    rows = []
    with lifecycle._InterruptGuard(), ExitStack() as stack:
        machines = stack.enter_context(emulated.emulated_machines(tag, MACHINES, subnet=subnet))
        hosts = multihost.parse_hosts(emulated.hosts_option(machines))
        where = multihost.place(topo, hosts)
        log(f"deploying {spec.name} over {MACHINES} emulated machines ({subnet}.0/24)")
        stack.callback(_destroy, spec.name)        # before the machines go: destroy runs in them
        hostdeploy.deploy(spec, hosts, where)
        live = state.load(spec.name).spec
        cuts = split_paths(live, where)
        fabric = Fabric(spec.name)
        fabric.set_port_model(scale=0.0, queue="virtual")
        for size in sizes:
            for flows in flows_list:
                runs = {c.row: [] for c in cuts}
                for _ in range(repeat):
                    for cut in cuts:
                        runs[cut.row].append(_measure_row(fabric, live, cut, frame_bytes=size,
                                                          flows=flows, duration_s=duration_s))
                new = [_row(cut, size, flows, runs[cut.row]) for cut in cuts]
                _compare(new)
                for row in new:
                    log(f"{row['label']} ({row['path']}) {size} B x {flows}: {row['pps'] / 1e3:.0f} kpps")
                rows += new
    return {"bench": "fabric-across-machines", "lab": "clos2 (labs/clos2) split over 2 emulated machines",
            "lab_name": spec.name, "machine_tag": tag,
            "machines": {h: {"netns": ns, "address": address} for h, (ns, address) in machines.items()},
            "placement": {h: sorted(n for n, m in where.items() if m == h) for h in machines},
            "baseline": BASELINE, "port_model": "off",
            "sender": "trafgen (netsniff-ng), one process, UDP; counted at the receiving host port",
            "duration_s": duration_s, "repeat": repeat,
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                        "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
            "rows": rows}


def _row(cut: CutPath, size: int, flows: int, runs: list[dict]) -> dict:
    per_cpu = median_of(runs, "pps_per_cpu")
    return {"row": cut.row, "label": ROWS[cut.row], "path": cut.text, "cut_links": cut.cut_links,
            "frame_bytes": size, "flows": flows, "pps": statistics.median([r["pps"] for r in runs]),
            "bps": statistics.median([r["bps"] for r in runs]), "pps_per_cpu": per_cpu,
            "ns_per_packet": 1e9 / per_cpu if per_cpu else None,
            "pps_runs": [round(r["pps"]) for r in runs]}


def _compare(rows: list[dict]) -> None:
    """Each row's rate and CPU cost against the within-one-machine row's."""
    base = next(r for r in rows if r["row"] == BASELINE)
    for r in rows:
        r["ratio"] = ratio(r["pps"], base["pps"])
        r["ratio_per_cpu"] = ratio(r["pps_per_cpu"], base["pps_per_cpu"])
