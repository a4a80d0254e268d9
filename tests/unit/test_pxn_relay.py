"""Rail-only fabrics have no path between rails: the runner's senders (raw sockets on a
fixed port) send a cross-rail flow from the source server's NIC on the destination's
rail, as PXN does. Pure: lab plans, no namespaces."""
from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.experiment.runner import pxn_relay, workload_hosts
from dataplane.runtime import labspec
from dataplane.topology.clab import read
from dataplane.traffic import workload as wl

LABS = Path(__file__).resolve().parents[2] / "labs"


def _flows(kind: str):
    path = LABS / kind / f"{kind}.clab.yml"
    spec = labspec.build(read(path), str(path))
    workload = wl.load_dict({"rate": "10Mbps", "duration": "1s", "pattern": {"type": "all-to-all"}})
    return spec, wl.generate(workload, workload_hosts(spec))


def _rail_of(spec, host: str, ifname: str) -> int:
    return spec.node(host).interface(ifname).rail


def test_rail_only_cross_rail_flows_leave_from_the_destination_rail():
    spec, flows = _flows("rail-only")
    relayed = pxn_relay(spec, flows)
    cross = 0
    for before, after in zip(flows, relayed):
        assert after.src_host == before.src_host and after.flow_id == before.flow_id
        assert _rail_of(spec, after.src_host, after.src_ifname) == _rail_of(spec, after.dst_host, after.dst_ifname)
        nic = next(n for n in spec.host_nics[after.src_host] if after.src_ifname in n.ports)
        assert after.src_ip == nic.address.split("/")[0]
        if after.src_ifname != before.src_ifname:
            cross += 1
    assert cross > 0


@pytest.mark.parametrize("kind", ["rail-optimized", "clos2", "dual-plane"])
def test_fabrics_with_a_path_are_left_alone(kind):
    spec, flows = _flows(kind)
    assert pxn_relay(spec, flows) == flows
