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


def test_the_compact_json_gives_the_same_spec_back():
    """to_json writes each set of next hops once and a NIC's relay as carriers per segment
    (a 16,384-GPU lab's state file was 114 MB); from_json gives the very spec back, routes
    over one set of next hops sharing its list, and still reads the older long form."""
    from dataplane.topology.generate import generate   # deferred: only this test builds one

    spec = labspec.build(generate("dual-plane", name="js", servers=4, rails=2, spines=2, leaf_ports=4))
    nic = spec.host_nics[spec.hosts[0].name][0]
    nic.relay.pop(spec.segments[-1])             # a segment no NIC reaches: -1 in the list
    data = json.loads(json.dumps(spec.to_json()))
    again = labspec.LabSpec.from_json(data)
    assert again == spec
    leaf_routes = next(rs for sw, rs in again.routes.items() if len(rs) > 2 and "leaf" in sw)
    uplinks = [r for r in leaf_routes if len(r.nexthops) > 1]
    assert len(uplinks) > 1 and all(r.nexthops is uplinks[0].nexthops for r in uplinks)
    assert len(data["hop_sets"]) < sum(len(rs) for rs in spec.routes.values())
    assert any(isinstance(h["relay"], int) for nics in data["host_nics"].values() for h in nics)
    old = dict(data, routes={sw: [{"prefix": r.prefix, "nexthops": r.nexthops} for r in rs]
                             for sw, rs in spec.routes.items()},
               host_nics={h: [dict(vars(n)) for n in nics] for h, nics in spec.host_nics.items()})
    del old["hop_sets"]
    assert labspec.LabSpec.from_json(old) == spec
