"""`railab plan ... -o lab.clab.yml`: the planned lab, written through the generator."""
from __future__ import annotations

import pytest

from dataplane.cli import plan as plan_cli
from dataplane.errors import PlanError
from dataplane.topology import sizing, clab
from dataplane.topology.generate import generate
from dataplane.topology.model import Role

CUSTOM = sizing.get_switch("custom", 16, "400G")


def _roles(topo):
    roles = [n.role for n in topo.nodes.values()]
    return roles.count(Role.HOST), roles.count(Role.LEAF), roles.count(Role.SPINE)


@pytest.mark.parametrize("design,planes,spines", [("rail-optimized", 1, True), ("rail-only", 1, False),
                                                  ("dual-plane", 2, True)])
def test_the_written_lab_is_the_plan(tmp_path, design, planes, spines):
    servers = 16 if design == "dual-plane" else 8
    result = sizing.plan_rail_fabric(gpus=None, servers=servers, gpus_per_server=4, switch=CUSTOM,
                                     nic_speed="400G", planes=planes, spines=spines,
                                     link_speed="200G" if planes == 2 else None, spines_per_plane=None,
                                     ratio=(1, 1), design=None if spines else "rail-only")
    path = tmp_path / "lab.clab.yml"
    plan_cli.write_lab(result, str(path), "planned")
    topo = clab.read(path)
    assert topo.name == "planned"
    assert _roles(topo) == (result.servers, result.leaves, result.spines)
    assert len(topo.links) == result.host_cables + result.fabric_cables
    kind, params = result.generator_params()
    assert clab.dumps(topo) == clab.dumps(generate(kind, name="planned", **params))


def test_a_plan_the_generator_cannot_build_is_refused(tmp_path):
    shared = sizing.plan_rail_fabric(gpus=512, servers=None, gpus_per_server=8,
                                     switch=sizing.get_switch(None, None, None), nic_speed="400G",
                                     planes=2, spines=True, link_speed=None, spines_per_plane=None,
                                     ratio=(1, 1), design=None)
    with pytest.raises(PlanError, match="share a leaf"):
        plan_cli.write_lab(shared, str(tmp_path / "x.clab.yml"))
    assert not (tmp_path / "x.clab.yml").exists()


@pytest.mark.parametrize("tiers,radix", [(2, 4), (2, 8), (3, 4), (3, 6)])
def test_a_fat_tree_plan_is_written_with_every_switch_at_its_radix(tmp_path, tiers, radix):
    result = sizing.plan_fat_tree(radix, tiers)
    path = tmp_path / "ft.clab.yml"
    plan_cli.write_lab(result, str(path), "ft")
    topo = clab.read(path)
    roles = [n.role for n in topo.nodes.values()]
    assert (roles.count(Role.HOST), roles.count(Role.LEAF), roles.count(Role.SPINE),
            roles.count(Role.CORE)) == (result.max_end_ports, result.leaves, result.spines, result.cores)
    assert len(topo.links) == result.host_links + result.fabric_links
    ports = {}
    for link in topo.links:
        for end in link.endpoints():
            ports[end.node] = ports.get(end.node, 0) + 1
    # a full fat-tree: every switch port used, every core reaching each pod once
    assert {ports[n] for n, node in topo.nodes.items() if node.role != Role.HOST} == {radix}
    if tiers == 3:
        for core in (n for n, node in topo.nodes.items() if node.role == Role.CORE):
            pods = [topo.nodes[l.other(core).node].pod for l in topo.links_of(core)]
            assert sorted(pods) == list(range(1, result.pods + 1))


def test_dual_plane_with_faster_fabric_links_is_written_at_both_speeds(tmp_path):
    result = sizing.plan_rail_fabric(gpus=None, servers=16, gpus_per_server=4, switch=CUSTOM,
                                     nic_speed="400G", planes=2, spines=True, link_speed=None,
                                     spines_per_plane=None, ratio=(1, 1), design=None)
    assert result.link_speed != result.host_port_speed      # 400G fabric, 200G NIC ports
    path = tmp_path / "dp.clab.yml"
    plan_cli.write_lab(result, str(path))
    topo = clab.read(path)
    speeds = {(topo.nodes[l.a.node].role, topo.nodes[l.b.node].role): l.speed_bps for l in topo.links}
    assert {s for (a, b), s in speeds.items() if Role.HOST in (a, b)} == {200 * 10**9}
    assert {s for (a, b), s in speeds.items() if Role.HOST not in (a, b)} == {400 * 10**9}
    # bandwidth 1:1 at the leaf: half as many uplinks as downlinks
    leaf = next(n for n, node in topo.nodes.items() if node.role == Role.LEAF)
    down = sum(1 for l in topo.links_of(leaf) if topo.nodes[l.other(leaf).node].role == Role.HOST)
    assert len(topo.links_of(leaf)) - down == down // 2
