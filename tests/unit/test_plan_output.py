"""`railab plan ... -o lab.clab.yml`: the planned lab, written through the generator."""
from __future__ import annotations

import pytest

from dataplane import plan as sizing
from dataplane.cli import plan as plan_cli
from dataplane.errors import PlanError
from dataplane.topology import clab
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
