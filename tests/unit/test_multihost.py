"""A lab split over hosts (`railab topo split`): the --hosts checks, placement, and the
per-host containerlab files with their vxlan-stitch links."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from dataplane.errors import TopologyError
from dataplane.topology import clab, clabimages, multihost
from dataplane.topology.model import FABRIC_KINDS

ROOT = Path(__file__).resolve().parents[2]
HOSTS = "a=192.0.2.1,b=192.0.2.2,c=192.0.2.3"


def lab(kind: str) -> tuple[dict, clab.Loaded]:
    path = ROOT / "labs" / kind / f"{kind}.clab.yml"
    text = clabimages.rewrite(path.read_text(), str(path), "railab-node:1", "railab-switch:1")
    return clab.load_yaml(text, kind), clab.parse(text, kind)


@pytest.mark.parametrize("text, message", [
    ("a=192.0.2.1", "needs two hosts or more"),
    ("a=192.0.2.1,b=192.0.2.1", "hosts a and b have the same address 192.0.2.1"),
    ("a=192.0.2.1,a=192.0.2.2", "host a is listed twice"),
    ("a=192.0.2.1,b=host.example", "host b: 'host.example' is not an IP address"),
    ("a=192.0.2.1,b", "'b' is not NAME=ADDRESS"),
    ("a=192.0.2.1,b/c=192.0.2.2", "host name 'b/c'"),
])
def test_bad_hosts_are_one_line(text, message):
    with pytest.raises(TopologyError, match=message) as err:
        multihost.parse_hosts(text)
    assert "\n" not in str(err.value)


def test_underlay_mtu_must_carry_vxlan():
    multihost.check_underlay_mtu(1550)
    with pytest.raises(TopologyError, match="underlay MTU 1500 is too small.*needs 1550"):
        multihost.check_underlay_mtu(1500)


def test_a_node_on_an_unknown_host_is_refused():
    doc, loaded = lab("clos2")
    loaded.topology.nodes["spine1"].labels["railab.host"] = "z"
    with pytest.raises(TopologyError, match=r"node spine1: railab.host 'z' is not one of the --hosts \(a, b, c\)"):
        multihost.place(loaded.topology, multihost.parse_hosts(HOSTS))


@pytest.mark.parametrize("kind", FABRIC_KINDS)
def test_every_link_is_inside_one_host_or_stitched_on_both_sides(kind):
    doc, loaded = lab(kind)
    topo = loaded.topology
    hosts = multihost.parse_hosts(HOSTS)
    where = multihost.place(topo, hosts)
    parts = multihost.split(doc, topo, hosts, where)
    assert set(where) == set(topo.nodes)
    leaves = Counter(where[n.name] for n in topo.nodes.values() if n.role.value == "leaf")
    assert max(leaves.values()) <= -(-sum(leaves.values()) // len(hosts))   # at most a share each
    inside, stitched = [], {}
    for host in hosts:
        part = parts[host.name]
        assert part["name"] == f"{topo.name}-{host.name}"
        assert {n for n in part["topology"]["nodes"]} == {n for n, h in where.items() if h == host.name}
        for link in part["topology"]["links"]:
            if link.get("type") == "vxlan-stitch":
                end = link["endpoint"]
                assert where[end["node"]] == host.name and link["remote"] != dict(
                    (h.name, h.address) for h in hosts)[host.name]
                stitched.setdefault(link["vni"], []).append(f"{end['node']}:{end['interface']}")
            else:
                inside.append(tuple(link["endpoints"]))
    assert all(len(ends) == 2 for ends in stitched.values())    # one VNI per cut link, both sides
    every = {tuple(sorted(e)) for e in inside} | {tuple(sorted(e)) for e in stitched.values()}
    assert every == {tuple(sorted((str(l.a), str(l.b)))) for l in topo.links}


def test_labelled_nodes_stay_where_they_are_told():
    doc, loaded = lab("rail-optimized")
    for name in ("spine1", "spine2"):
        loaded.topology.nodes[name].labels["railab.host"] = "b"
    where = multihost.place(loaded.topology, multihost.parse_hosts(HOSTS))
    assert where["spine1"] == where["spine2"] == "b"
