"""Generators: fat-tree arithmetic, naming, and parameters that cannot form a fabric."""
from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.errors import TopologyError
from dataplane.topology.generate import (
    format_speed, generate, parse_ratio, parse_speed,
)
from dataplane.topology.model import FABRIC_KINDS, Role, Topology


def degree(topo: Topology, node: str, direction: str) -> int:
    return sum(1 for i in topo.interfaces(node) if i.startswith(direction))


def pair_links(topo: Topology, a: str, b: str) -> int:
    return sum(1 for l in topo.links if {l.a.node, l.b.node} == {a, b})


def check_common(topo: Topology) -> None:
    """Invariants every generated fabric has."""
    ends = [e for e, _ in topo.iter_endpoints()]
    assert len(ends) == len(set(ends)), "an interface is used twice"
    for end in ends:
        assert 0 < len(end.interface) <= 15 and "/" not in end.interface
    for link in topo.links:
        roles = {topo.nodes[link.a.node].role, topo.nodes[link.b.node].role}
        assert roles != {Role.HOST}, "host to host"
        assert link.a.node != link.b.node
    linked = {e.node for e in ends}
    assert linked == set(topo.nodes), "a node without links"
    # Every switch port is down<k> or up<k>, numbered 1..n without gaps.
    for node in topo.switches:
        for direction in ("down", "up"):
            numbers = sorted(int(i[len(direction):]) for i in topo.interfaces(node.name)
                             if i.startswith(direction))
            assert numbers == list(range(1, len(numbers) + 1))


def check_rail_fabric(topo: Topology) -> None:
    p = topo.params
    servers, rails, ports = p["servers"], p["rails"], p["leaf_ports"]
    planes = [0, 1] if topo.kind == "dual-plane" else [None]
    if topo.kind == "rail-only":
        per_leaf, spines, lps = servers, 0, 0
    else:
        down, up = parse_ratio(p["oversubscription"])
        spines, lps = p["spines"], p["links_per_spine"]
        per_leaf = min(servers, ports * down // (down + up))
        assert per_leaf * up == spines * lps * down, "uplinks do not match the ratio"
    units = math.ceil(servers / per_leaf)
    leaves = topo.by_role(Role.LEAF)
    assert len(topo.hosts) == servers
    assert len(leaves) == rails * units * len(planes)
    assert len(topo.by_role(Role.SPINE)) == spines * len(planes)
    assert not topo.by_role(Role.CORE)
    assert len(topo.links) == len(planes) * (servers * rails + rails * units * spines * lps)
    for host in topo.hosts:
        links = topo.links_of(host.name)
        assert len(links) == rails * len(planes)
        assert host.gpus == rails
        for link in links:
            leaf = topo.nodes[link.other(host.name).node]
            nic = link.local(host.name).interface
            assert leaf.role is Role.LEAF and leaf.rail == link.rail
            assert leaf.plane == link.plane
            assert leaf.index == (host.index - 1) // per_leaf + 1  # its scalable unit
            suffix = "" if link.plane is None else "ab"[link.plane]
            assert nic == f"nic{link.rail}{suffix}"
    for leaf in leaves:
        assert degree(topo, leaf.name, "up") == spines * lps
        assert degree(topo, leaf.name, "down") <= per_leaf
        for spine in topo.by_role(Role.SPINE):
            expected = lps if spine.plane == leaf.plane else 0
            assert pair_links(topo, leaf.name, spine.name) == expected
        assert degree(topo, leaf.name, "down") + degree(topo, leaf.name, "up") <= ports
    for spine in topo.by_role(Role.SPINE):
        assert degree(topo, spine.name, "down") == rails * units * lps <= ports
        assert degree(topo, spine.name, "up") == 0


def check_clos(topo: Topology) -> None:
    p = topo.params
    servers, rails, spines, lps, ports = (p["servers"], p["rails"], p["spines"],
                                          p["links_per_spine"], p["leaf_ports"])
    pods = p.get("pods", 1)
    down, up = parse_ratio(p["oversubscription"])
    per_pod = servers // pods
    per_leaf = min(per_pod, ports * down // (down + up) // rails)
    leaves_per_pod = math.ceil(per_pod / per_leaf)
    assert per_leaf * rails * up == spines * lps * down
    assert len(topo.hosts) == servers
    assert len(topo.by_role(Role.LEAF)) == pods * leaves_per_pod
    assert len(topo.by_role(Role.SPINE)) == pods * spines
    for host in topo.hosts:
        links = topo.links_of(host.name)
        assert len(links) == rails
        assert len({l.other(host.name).node for l in links}) == 1  # single-rail access
        assert sorted(l.rail for l in links) == list(range(rails))
    for leaf in topo.by_role(Role.LEAF):
        assert degree(topo, leaf.name, "up") == spines * lps
        for spine in topo.by_role(Role.SPINE):
            assert pair_links(topo, leaf.name, spine.name) == (lps if spine.pod == leaf.pod else 0)
    cores = topo.by_role(Role.CORE)
    if topo.kind == "clos2":
        assert not cores
        assert len(topo.links) == servers * rails + leaves_per_pod * spines * lps
        return
    assert len(cores) == p["cores"]
    spine_down = leaves_per_pod * lps
    for spine in topo.by_role(Role.SPINE):
        assert degree(topo, spine.name, "down") == spine_down
        assert degree(topo, spine.name, "up") == spine_down  # 1:1 at the spine
        assert degree(topo, spine.name, "down") + degree(topo, spine.name, "up") <= ports
        per_core = {pair_links(topo, spine.name, c.name) for c in cores}
        assert per_core == {spine_down // len(cores)}
    for core in cores:
        assert degree(topo, core.name, "down") == pods * spines * spine_down // len(cores) <= ports
    assert len(topo.links) == servers * rails + 2 * pods * spines * spine_down


def check_fabric(topo: Topology) -> None:
    check_common(topo)
    (check_clos if topo.kind in ("clos2", "clos3") else check_rail_fabric)(topo)
    # The parameters recorded in the topology make the same topology again.
    assert generate(topo.kind, name=topo.name, **topo.params) == topo


@pytest.mark.parametrize("kind", FABRIC_KINDS)
def test_defaults_form_a_fabric(kind):
    topo = generate(kind)
    assert topo.name == kind and topo.kind == kind
    check_fabric(topo)


@pytest.mark.parametrize("kind, params", [
    ("rail-optimized", dict(servers=8, rails=4, spines=2)),
    ("rail-optimized", dict(servers=40, rails=2, spines=4, leaf_ports=32)),      # 3 units
    ("rail-optimized", dict(servers=12, rails=2, spines=2, oversubscription="3:1")),
    ("rail-optimized", dict(servers=8, rails=2, spines=2, links_per_spine=1)),   # ratio 2:1
    ("rail-only", dict(servers=16, rails=8)),
    ("dual-plane", dict(servers=4, rails=4, spines=2)),
    ("dual-plane", dict(servers=64, rails=8, spines=8, leaf_ports=64)),     # 2 units
    ("clos2", dict(servers=8, rails=2, spines=2, leaf_ports=8)),
    ("clos2", dict(servers=7, rails=1, spines=2, leaf_ports=8)),                 # partial unit
    ("clos3", dict(servers=8, rails=2, pods=2, spines=2, cores=2, leaf_ports=8)),
    ("clos3", dict(servers=12, rails=1, pods=3, spines=2, cores=2, leaf_ports=8)),
])
def test_fat_tree_arithmetic(kind, params):
    check_fabric(generate(kind, **params))


def test_white_paper_dual_plane_row_counts():
    # 64 servers x 8 GPUs, one leaf per rail per plane on a 64-port switch at 1:1.
    topo = generate("dual-plane", servers=64, rails=8, spines=4, leaf_ports=128)
    assert len(topo.by_role(Role.LEAF)) == 16 and len(topo.by_role(Role.SPINE)) == 8
    assert topo.params["links_per_spine"] == 16
    check_fabric(topo)


def test_scalable_units_split_a_rail():
    topo = generate("rail-optimized", servers=20, rails=2, spines=4, leaf_ports=16)
    names = sorted(n.name for n in topo.by_role(Role.LEAF))
    assert names == ["leaf1-r0", "leaf1-r1", "leaf2-r0", "leaf2-r1", "leaf3-r0", "leaf3-r1"]
    assert Counter(topo.nodes[l.b.node].index for l in topo.links
                   if l.a.node == "srv17") == {3: 2}


def test_names_and_interfaces():
    topo = generate("dual-plane", servers=2, rails=2, spines=1)
    assert set(topo.nodes) == {"srv1", "srv2", "p0-leaf1-r0", "p0-leaf1-r1", "p1-leaf1-r0",
                               "p1-leaf1-r1", "p0-spine1", "p1-spine1"}
    assert sorted(topo.interfaces("srv1")) == ["nic0a", "nic0b", "nic1a", "nic1b"]
    assert list(topo.nodes)[:2] == ["srv1", "srv2"]  # hosts first in the file
    clos3 = generate("clos3")
    assert {"pod1-leaf1", "pod2-spine2", "core1"} <= set(clos3.nodes)
    assert clos3.nodes["pod2-leaf1"].pod == 2


def test_speed_and_ratio_parsing():
    assert parse_speed("400G") == 400 * 10**9
    assert parse_speed("1.6T") == 1_600 * 10**9
    assert parse_speed("100Gbps") == 100 * 10**9
    assert format_speed(parse_speed("800g")) == "800G"
    assert parse_ratio("4:2") == (2, 1)
    assert generate("rail-only", speed="100G").links[0].speed_bps == 100 * 10**9


@pytest.mark.parametrize("kind, params, message", [
    ("mesh", {}, "unknown fabric kind 'mesh'"),
    ("rail-optimized", dict(servers=0), "--servers 0 must be at least 1"),
    ("rail-optimized", dict(rails="four"), "--rails 'four' is not a whole number"),
    ("rail-optimized", dict(spines=3), "--spines 3 cannot share the 8 uplinks"),
    ("rail-optimized", dict(oversubscription="3:1"), "--oversubscription 3:1 does not divide"),
    ("rail-optimized", dict(oversubscription="2/1"), "is not a ratio"),
    ("rail-optimized", dict(links_per_spine=1, oversubscription="1:1"), "--links-per-spine 1"),
    ("rail-optimized", dict(servers=200, leaf_ports=16), "each spine needs 400 ports"),
    ("rail-optimized", dict(speed="fast"), "--speed 'fast'"),
    ("rail-optimized", dict(pods=2), "--pods does not apply to rail-optimized"),
    ("rail-only", dict(spines=2), "--spines does not apply to rail-only (it has no spines)"),
    ("rail-only", dict(servers=80), "rail-only has no spines"),
    ("dual-plane", dict(planes=3), "--planes 3: a dual-plane fabric has exactly 2 planes"),
    ("clos2", dict(rails=8, leaf_ports=8), "fewer than the 8 NICs of one server"),
    ("clos3", dict(servers=9, pods=2), "--servers 9 cannot be split equally into --pods 2"),
    ("clos3", dict(cores=3), "--cores 3 cannot share"),
    ("rail-only", dict(servers=60_000, rails=2, leaf_ports=60_000), "links, more than"),
])
def test_impossible_parameters(kind, params, message):
    with pytest.raises(TopologyError) as err:
        generate(kind, **params)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_lab_name():
    with pytest.raises(TopologyError, match="--name 'my lab'"):
        generate("clos2", name="my lab")


@st.composite
def fabric_params(draw):
    kind = draw(st.sampled_from(FABRIC_KINDS))
    rails = draw(st.integers(1, 8))
    ports = draw(st.sampled_from([8, 16, 32, 64]))
    params = dict(servers=draw(st.integers(1, 48)), rails=rails, leaf_ports=ports)
    if kind == "rail-only":
        params["servers"] = min(params["servers"], ports)
        return kind, params
    ratio = draw(st.sampled_from(["1:1", "1:1", "2:1", "3:1"]))
    down, up = parse_ratio(ratio)
    if kind == "clos3":
        params["pods"] = draw(st.integers(1, 3))
        params["servers"] = params["pods"] * draw(st.integers(1, 12))
    per_pod = params["servers"] // params.get("pods", 1)

    def unit_downlinks(down: int, up: int) -> int:
        max_down = ports * down // (down + up)
        if kind.startswith("clos"):
            return min(per_pod, max_down // rails) * rails
        return min(params["servers"], max_down)

    if kind.startswith("clos"):
        params["rails"] = rails = min(rails, ports // 2)  # a whole server fits on one leaf
    unit_down = unit_downlinks(down, up)
    # Pick a ratio that divides the unit's downlinks, then spines dividing the uplinks.
    if unit_down == 0 or unit_down * up % down:
        ratio, down, up = "1:1", 1, 1
        unit_down = unit_downlinks(1, 1)
    uplinks = unit_down * up // down
    params["oversubscription"] = ratio
    params["spines"] = draw(st.sampled_from([d for d in range(1, uplinks + 1) if uplinks % d == 0]))
    if kind == "clos3":
        leaves = math.ceil(per_pod / (unit_down // rails))
        spine_down = leaves * uplinks // params["spines"]
        params["cores"] = draw(st.sampled_from(
            [d for d in range(1, spine_down + 1) if spine_down % d == 0]))
    return kind, params


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabric_params())
def test_generated_fabrics_obey_fat_tree_arithmetic(case):
    kind, params = case
    try:
        topo = generate(kind, **params)
    except TopologyError as err:
        # Only the radix may legitimately run out (spines or cores with too few ports).
        assert "--leaf-ports" in str(err), str(err)
        return
    check_fabric(topo)


def switch_hops(topo: Topology, src: str, dst: str) -> int | None:
    """Switches on a shortest path from switch src to switch dst, both counted (None: none)."""
    from collections import deque
    seen, queue = {src: 1}, deque([src])
    while queue:
        here = queue.popleft()
        if here == dst:
            return seen[here]
        for there in topo.neighbors(here):
            if there not in seen and topo.nodes[there].role.is_switch:
                seen[there] = seen[here] + 1
                queue.append(there)
    return None


def nic_hops(topo: Topology) -> set[int | None]:
    """Switch hops between every pair of NICs (ports) of different servers in one plane."""
    ports = [(h.name, l) for h in topo.hosts for l in topo.links_of(h.name)]
    return {switch_hops(topo, la.other(a).node, lb.other(b).node)
            for a, la in ports for b, lb in ports if a < b and la.plane == lb.plane}


@pytest.mark.parametrize("kind, params, worst", [
    ("clos2", dict(servers=8, rails=2, spines=2, leaf_ports=8), 3),         # leaf-spine-leaf
    ("clos3", dict(servers=8, rails=2, pods=2, spines=2, cores=2, leaf_ports=8), 5),
    ("rail-optimized", dict(servers=20, rails=2, spines=4, leaf_ports=16), 3),
    ("dual-plane", dict(servers=4, rails=2, spines=2), 3),
])
def test_hops_between_servers(kind, params, worst):
    assert max(nic_hops(generate(kind, **params))) == worst


def test_rail_only_cross_rail_has_no_network_path():
    topo = generate("rail-only", servers=2, rails=2)
    assert nic_hops(topo) == {1, None}  # same rail: one leaf; cross rail: no path (PXN)
    assert switch_hops(topo, "leaf1-r0", "leaf1-r1") is None
