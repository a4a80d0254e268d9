"""Pure parts of the kernel dataplane and the fabric bench: the kernel routes made from
the controller's plan, the bench's path through the fabric, and the agent's refusals."""
from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.agent.kernelswitches import KernelSwitches
from dataplane.runtime import labspec
from dataplane.runtime.netns import RT_SCOPE_LINK, kernel_routes
from dataplane.topology.clab import read

CLOS2 = Path(__file__).resolve().parents[2] / "labs" / "clos2" / "clos2.clab.yml"
from dataplane.bench import fabric


def _spec(dataplane="kernel"):
    return labspec.build(read(CLOS2), str(CLOS2), dataplane=dataplane)


def test_dataplane_is_recorded_and_read_back():
    spec = _spec()
    assert spec.dataplane == "kernel"
    assert labspec.LabSpec.from_json(spec.to_json()).dataplane == "kernel"
    old = spec.to_json()
    del old["dataplane"]           # a state file written before the option: XDP
    assert labspec.LabSpec.from_json(old).dataplane == "xdp"


def test_kernel_routes_follow_the_controller():
    spec = _spec()
    leaf = next(n for n in spec.switches if n.role == "leaf")
    routes = kernel_routes(spec, leaf)
    assert len(routes) == len(spec.routes[leaf.name])
    by_dst = {r["dst"]: r for r in routes}
    for route in spec.routes[leaf.name]:
        made = by_dst[route.prefix]
        if len(route.nexthops) > 1:
            hops = made["multipath"]
            assert [h["oif"] for h in hops] == [leaf.interface(p).ifindex for p in route.nexthops]
            # each next hop is the far end's address on the point-to-point link
            for h, port in zip(hops, route.nexthops):
                iface = leaf.interface(port)
                far = spec.node(iface.peer_node).interface(iface.peer_if)
                assert h["gateway"] == far.address.split("/")[0]
        else:
            assert made["oif"] == leaf.interface(route.nexthops[0]).ifindex
            if route.prefix.endswith("/32"):
                assert made["scope"] == RT_SCOPE_LINK and "gateway" not in made


@pytest.mark.parametrize("request_fields, says", [
    ({"mode": "flowlet"}, "only hashes"),
    ({"mode": "wcmp"}, "only hashes"),
    ({"weights": [1, 2]}, "only hashes"),
    ({"lbn": "auto"}, "only hashes"),
    ({"hash_fields": ["bth_dqp"]}, "takes only"),
    ({"seed": 2**32}, "between 0 and 2"),
    ({"switch": "nope"}, "no switch matches"),
])
def test_kernel_agent_refuses_what_the_kernel_cannot_do(request_fields, says):
    with pytest.raises(ValueError, match=says):
        KernelSwitches(_spec()).lb_set(**request_fields)


@pytest.mark.parametrize("method", ["apply_port_model", "tm_add", "port_speed"])
def test_kernel_agent_refuses_xdp_only_requests(method):
    with pytest.raises(ValueError, match="needs the XDP dataplane"):
        getattr(KernelSwitches(_spec()), method)()


def test_bench_path_crosses_leaf_spine_leaf():
    spec = _spec("xdp")
    path = fabric.cross_leaf_path(spec)
    hops = fabric.path_hops(spec, path)
    assert [n.role for n, _, _ in hops] == ["leaf", "spine", "leaf"]
    assert hops[-1][2].peer_node == next(h.name for h in spec.hosts if h.netns == path.rx_ns)
    frame = fabric.udp_frame(path, 64, fabric.FIRST_SPORT)
    assert len(frame) == 60          # 64 on the wire with the FCS
    assert len(fabric.udp_frame(path, 1500, 1)) == 1496
