"""The XDP object's table sizes per lab: enough for the lab, and in size classes, so that
labs of about one size share one cached object (scripts/setup.sh prebuilds the shipped ones)."""
from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.agent.server import dataplane_sizes
from dataplane.runtime import labspec
from dataplane.topology import clab
from dataplane.topology.generate import generate

LABS = Path(__file__).resolve().parents[2] / "labs"


@pytest.mark.parametrize("path", sorted(LABS.glob("*/*.clab.yml")), ids=lambda p: p.parent.name)
def test_sizes_are_powers_of_two_and_hold_the_lab(path):
    spec = labspec.build(clab.read(path), str(path))
    sizes = dataplane_sizes(spec)
    assert all(v & (v - 1) == 0 for v in sizes.values()), sizes
    assert sizes["max_ports"] > sum(len(n.interfaces) for n in spec.switches)
    assert sizes["max_members"] >= max(len(r.nexthops) for rs in spec.routes.values() for r in rs)


def test_labs_a_little_apart_share_one_object():
    small = labspec.build(generate("rail-optimized", servers=8, rails=4), "a")
    larger = labspec.build(generate("rail-optimized", servers=10, rails=4), "b")
    assert dataplane_sizes(small) == dataplane_sizes(larger)
