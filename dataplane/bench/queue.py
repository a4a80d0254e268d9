"""`railab bench queue`: what the port model's real queue costs and buys, measured with
the kernel's TCP (iperf3) across leaf -> spine -> leaf of the shipped clos2 lab, at a
slow and at a fast port speed, through the virtual and the real queue."""
from __future__ import annotations

import uuid
from pathlib import Path

from dataplane.lab.fabric import Fabric
from dataplane.runtime import labspec, lifecycle
from dataplane.topology.clab import read
from dataplane.traffic import iperf

# (label, port-model scale): 400G ports emulated at 10 Mb/s and at 10 Gb/s
SPEEDS = (("10 Mb/s", 1 / 40000), ("10 Gb/s", 1 / 40))
QUEUES = ("virtual", "real")
NOMINAL_BPS = 400e9


def bench_queue(duration_s: float = 3.0) -> list[dict]:
    """One row per (port speed, queue kind): TCP goodput and its share of the port."""
    path = Path(__file__).resolve().parents[2] / "labs" / "clos2" / "clos2.clab.yml"
    topo = read(path)
    topo.name = f"bench-queue-{uuid.uuid4().hex[:6]}"
    spec = labspec.build(topo, str(path))
    src = spec.hosts[0]
    src_leaf = src.interfaces[0].peer_node
    dst = next(h for h in spec.hosts if h.interfaces[0].peer_node != src_leaf)
    dst_ip = spec.host_nics[dst.name][0].address.split("/")[0]
    src_ip = spec.host_nics[src.name][0].address.split("/")[0]
    rows = []
    lifecycle.deploy(spec)
    try:
        fabric = Fabric(spec.name)
        for label, scale in SPEEDS:
            for queue in QUEUES:
                fabric.set_port_model(scale=scale, queue=queue)
                bps = iperf.tcp_bps(src.netns, dst.netns, dst_ip, seconds=duration_s, src_ip=src_ip)
                port_bps = NOMINAL_BPS * scale
                rows.append({"port_speed": label, "port_bps": port_bps, "queue": queue,
                             "tcp_bps": bps, "share_of_port": bps / port_bps})
    finally:
        lifecycle.destroy(spec.name)
    return rows
