"""The XDP object's table sizes per lab: enough for the lab, and in size classes, so that
labs of about one size share one cached object (scripts/setup.sh prebuilds the shipped ones)."""
from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.agent.server import dataplane_sizes
from dataplane.runtime import labspec
from dataplane.topology import clab
from dataplane.topology.generate import generate
from dataplane.xdp.bpfio import DataplaneError
from dataplane.xdp.tables.groups import MemberRanges

LABS = Path(__file__).resolve().parents[2] / "labs"


@pytest.mark.parametrize("path", sorted(LABS.glob("*/*.clab.yml")), ids=lambda p: p.parent.name)
def test_sizes_are_powers_of_two_and_hold_the_lab(path):
    spec = labspec.build(clab.read(path), str(path))
    sizes = dataplane_sizes(spec)
    assert all(v & (v - 1) == 0 for v in sizes.values()), sizes
    assert sizes["max_ports"] > sum(len(n.interfaces) for n in spec.switches)
    assert sizes["max_members"] >= max(len(r.nexthops) for rs in spec.routes.values() for r in rs)
    assert sizes["max_addrs"] > sum(1 for n in spec.switches for i in n.interfaces if i.address)
    assert sizes["max_learned"] >= sum(len(n.interfaces) for n in spec.hosts)


def test_a_16384_gpu_lab_gets_room_for_its_addresses_and_hosts():
    """A lab past the fixed defaults (16,384 addresses, 16,384 learned hosts): the agent
    refused the 16,384-GPU lab's 98,304 port addresses ("port_addrs is full")."""
    spec = labspec.build(generate("dual-plane", name="big", servers=640, rails=8, spines=32, leaf_ports=192, links_per_spine=2))
    sizes = dataplane_sizes(spec)
    addresses = sum(1 for n in spec.switches for i in n.interfaces if i.address)
    assert addresses > 16384 and sizes["max_addrs"] > addresses
    assert sizes["max_learned"] >= sum(len(n.interfaces) for n in spec.hosts) > 4096


def test_labs_a_little_apart_share_one_object():
    small = labspec.build(generate("rail-optimized", servers=8, rails=4), "a")
    larger = labspec.build(generate("rail-optimized", servers=10, rails=4), "b")
    assert dataplane_sizes(small) == dataplane_sizes(larger)


def test_member_table_holds_every_group_of_the_lab_twice():
    """`members` is sized by the lab's groups (each a power-of-two range), not by
    max_groups x max_members (the 4,096-GPU lab's 9,280 groups of 1-64 members need 64 k
    entries; the fixed stride took 4 M): room for all of them twice over."""
    path = LABS / "dual-plane" / "dual-plane.clab.yml"
    spec = labspec.build(clab.read(path), str(path))
    sizes = dataplane_sizes(spec)
    groups = {(sw, tuple(r.nexthops)) for sw, rs in spec.routes.items() for r in rs}
    ranges = MemberRanges(sizes["max_member_entries"])
    for _ in range(2):
        for _, hops in groups:
            ranges.take(len(hops))


def test_member_ranges_reuse_freed_ranges_and_refuse_when_full():
    ranges = MemberRanges(8)
    assert ranges.take(3) == (0, 4) and ranges.take(1) == (4, 1)
    assert ranges.assign(7, (0, 4)) is None and ranges.base(7) == 0 and ranges.fits(7, 4)
    assert not ranges.fits(7, 5) and not ranges.fits(8, 1)
    grown = ranges.take(2)                      # a group outgrows its range: a new one ...
    assert grown == (5, 2)
    assert ranges.assign(7, grown) == (0, 4)    # ... and the old one comes back to the caller
    ranges.release((0, 4))
    assert ranges.take(4) == (0, 4)             # reused, not taken from the end
    with pytest.raises(DataplaneError, match="members table is full"):
        ranges.take(2)
    assert ranges.take(1) == (7, 1)
