"""The lab spec's indexes: by name, switch id, ifindex, MAC and neighbour, and that they
follow the ifindexes a runtime adopts after the spec was built."""
from __future__ import annotations

import json
from pathlib import Path

from dataplane.runtime import labspec
from dataplane.topology.clab import read

LAB = Path(__file__).resolve().parents[2] / "labs" / "rail-optimized" / "rail-optimized.clab.yml"


def _spec():
    return labspec.build(read(LAB), str(LAB))


def test_every_switch_port_is_found_by_its_ifindex_and_mac():
    spec = _spec()
    for node in spec.switches:
        for iface in node.interfaces:
            assert spec.port(iface.ifindex) == (node, iface)
            assert spec.find_by_mac(iface.mac.upper()) == (node, iface)
            peer, far = spec.far_end(iface)
            assert (far.peer_node, far.peer_if) == (node.name, iface.name)
            assert far.ifindex == iface.peer_ifindex and peer.name == iface.peer_node
    assert spec.find_port(1) is None and spec.find_node("nobody") is None


def test_neighbours_and_switch_ids():
    spec = _spec()
    leaf = next(n for n in spec.switches if n.role == "leaf")
    roles = {peer.role for _, peer in spec.neighbours(leaf)}
    assert roles == {"host", "spine"}
    assert spec.switch_by_id(leaf.switch_id) is leaf
    assert spec.find_switch(0) is None


def test_indexes_follow_adopted_ifindexes_and_stay_out_of_the_state_file():
    spec = _spec()
    node = spec.switches[0]
    iface = node.interfaces[0]
    old = iface.ifindex
    spec.port(old)                           # build the index, then change what it indexes
    iface.ifindex = 9999
    spec.reindex()
    assert spec.port(9999) == (node, iface) and spec.find_port(old) is None
    data = json.loads(labspec.dumps(spec))
    assert "_index" not in data
    again = labspec.LabSpec.from_json(data)
    assert again.port(9999)[1].name == iface.name
