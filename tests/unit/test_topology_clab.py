"""containerlab files: schema validity, round trip, and how other people's files are read."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.errors import TopologyError
from dataplane.topology import clab
from dataplane.topology.generate import generate
from dataplane.topology.model import FABRIC_KINDS, Endpoint, Role, Topology
from test_topology_generate import fabric_params  # same valid-parameter strategy

DATA = Path(__file__).resolve().parents[1] / "data" / "clab"


def without_addresses(topo: Topology) -> Topology:
    copy = topo.copy()
    copy.links = [dataclasses.replace(l, ipv4=None) for l in copy.links]
    return copy


def assert_round_trip(topo: Topology) -> None:
    text = clab.dumps(topo, "header line")
    clab.validate(yaml.safe_load(text), "generated")  # containerlab's schema accepts it
    loaded = clab.parse(text, "generated")
    assert not loaded.warnings and not loaded.renamed and not loaded.skipped
    assert without_addresses(loaded.topology) == topo
    assert all(l.ipv4 and all(l.ipv4) for l in loaded.topology.links)
    assert clab.dumps(loaded.topology, "header line") == text  # stable, addresses kept


@pytest.mark.parametrize("kind", FABRIC_KINDS)
def test_round_trip_defaults(kind):
    assert_round_trip(generate(kind))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=fabric_params(), speed=st.sampled_from(["100G", "400G", "800G", "25G"]),
       name=st.from_regex(r"[a-z0-9][a-z0-9._-]{0,12}", fullmatch=True))
def test_round_trip_any_fabric(case, speed, name):
    kind, params = case
    try:
        topo = generate(kind, name=name, speed=speed, **params)
    except TopologyError:
        return  # the radix ran out; test_topology_generate covers which cases
    assert_round_trip(topo)


def test_file_format():
    doc = yaml.safe_load(clab.dumps(generate("dual-plane", servers=2, rails=2, spines=1)))
    defaults = doc["topology"]["defaults"]
    assert defaults["kind"] == "linux"
    assert defaults["labels"]["railab.fabric"] == "dual-plane"
    assert defaults["labels"]["railab.param.servers"] == "2"
    assert doc["topology"]["nodes"]["p1-leaf1-r0"]["labels"] == {
        "railab.role": "leaf", "railab.rail": "0", "railab.plane": "1", "railab.index": "1"}
    first = doc["topology"]["links"][0]
    assert first["endpoints"] == ["srv1:nic0a", "p0-leaf1-r0:down1"]
    assert first["vars"] == {"railab.speed": "400G", "railab.rail": 0, "railab.plane": 0}
    assert first["ipv4"][1].endswith("/24")


def test_write_and_read_file(tmp_path):
    topo = generate("rail-only", servers=2, rails=2)
    path = tmp_path / "lab.clab.yml"
    clab.write(topo, path, "made by a test")
    assert path.read_text().startswith("# made by a test\n")
    assert without_addresses(clab.read(path)) == topo


# ------------------------------------------------------------- foreign files

def roles(topo: Topology) -> dict[str, str]:
    return {n.name: n.role.value for n in topo.nodes.values()}


def test_srlinux_leaf_spine():
    loaded = clab.load(DATA / "srl-leaf-spine.clab.yml")
    topo = loaded.topology
    assert topo.name == "srl-dc" and topo.kind is None
    assert roles(topo) == {"spine1": "spine", "spine2": "spine", "leaf1": "leaf", "leaf2": "leaf",
                           "client1": "host", "client2": "host", "client3": "host",
                           "client4": "host"}
    assert topo.nodes["spine2"].kind == "srl"
    assert ("leaf1", "ethernet-1/49", "e1-49") in loaded.renamed
    assert Endpoint("leaf1", "e1-49") in [e for e, _ in topo.iter_endpoints()]
    assert topo.nodes["client1"].labels == {"owner": "netops"}  # defaults inherited
    # Single-rail access: a leaf carries both NICs of its servers, so it serves no one rail.
    assert topo.nodes["leaf1"].rail is None
    assert sorted(l.rail for l in topo.links_of("client1")) == [0, 1]
    assert topo.planes() == []


def test_ceos_rail_optimized_extended_links():
    loaded = clab.load(DATA / "ceos-rail-optimized.clab.yml")
    topo = loaded.topology
    assert {n.name for n in topo.by_role(Role.SPINE)} == {"spine-a", "spine-b"}
    assert topo.nodes["rail0-leaf"].rail == 0 and topo.nodes["rail1-leaf"].rail == 1
    assert topo.link_at(Endpoint("gpu1", "eth1")).ipv4 == ("10.1.0.11/24", "10.1.0.1/24")
    assert loaded.skipped == ["prometheus"]
    assert any("mgmt-net" in w for w in loaded.warnings)
    assert topo.nodes["gpu1"].gpus == 2


def test_sonic_dual_plane_planes_inferred():
    topo = clab.read(DATA / "sonic-dual-plane.clab.yml")
    assert {n.name: n.plane for n in topo.switches} == {
        "a-leaf0": 0, "a-leaf1": 0, "a-spine": 0, "b-leaf0": 1, "b-leaf1": 1, "b-spine": 1}
    assert {n.name: n.rail for n in topo.by_role(Role.LEAF)} == {
        "a-leaf0": 0, "a-leaf1": 1, "b-leaf0": 0, "b-leaf1": 1}
    link = topo.link_at(Endpoint("host1", "eth4"))
    assert (link.rail, link.plane) == (1, 1)
    assert topo.nodes["host1"].role is Role.HOST and topo.nodes["a-spine"].kind == "sonic-vs"


def test_frr_three_tiers_and_pods():
    topo = clab.read(DATA / "frr-clos3.clab.yml")
    assert {n.name for n in topo.by_role(Role.CORE)} == {"core1", "core2"}
    assert {n.name for n in topo.by_role(Role.SPINE)} == {"p1-spine", "p2-spine"}
    assert {n.name for n in topo.by_role(Role.LEAF)} == {"p1-tor1", "p1-tor2", "p2-tor1"}
    assert topo.nodes["p1-tor2"].pod == 1 and topo.nodes["p2-spine"].pod == 2
    assert topo.nodes["core1"].pod is None


def test_cumulus_rail_only_rails_follow_the_leaf():
    topo = clab.read(DATA / "cvx-rail-only.clab.yml")
    assert topo.nodes["rail0"].rail == 0 and topo.nodes["rail1"].rail == 1
    # srv3's eth1 is cabled to rail 1: the leaf's rail wins over the NIC position.
    assert topo.link_at(Endpoint("srv3", "eth1")).rail == 1
    assert topo.nodes["srv3"].labels == {"team": "ml"}  # merge key kept the rest
    assert topo.planes() == []  # one link per host per leaf: rails, not planes


def test_mixed_vendors_labels_and_slashes():
    loaded = clab.load(DATA / "xrd-crpd-mixed.clab.yml")
    topo = loaded.topology
    assert roles(topo) == {"xrd1": "spine", "xrd2": "spine", "crpd1": "leaf", "crpd2": "leaf",
                           "h1": "host", "h2": "host"}
    assert ("xrd2", "TenGigabitEthernet0/0/0/1", "Te0-0-0-1") in loaded.renamed
    assert any("dummy" in w for w in loaded.warnings)


@pytest.mark.parametrize("name, linux", [
    ("eth1", "eth1"), ("e1-1", "e1-1"), ("ethernet-1/1", "e1-1"), ("ethernet-1/3/2", "e1-3-2"),
    ("ge-0/0/0", "ge-0-0-0"), ("Gi0/0/0/0", "Gi0-0-0-0"), ("Ethernet0", "Ethernet0"),
    ("HundredGigE0/0/0/24", "Hu0-0-0-24"), ("swp1s0", "swp1s0"),
])
def test_linux_interface_names(name, linux):
    assert clab.linux_ifname(name) == linux


@pytest.mark.parametrize("name", ["averyveryverylongname0", "eth 1", ""])
def test_interface_names_refused(name):
    with pytest.raises(ValueError):
        clab.linux_ifname(name)


def strip_railab(text: str) -> str:
    """A generated file as someone else would have written it: switches of a network-OS
    kind (a linux node without labels is a host), no railab labels or vars."""
    doc = yaml.safe_load(text)
    doc["topology"]["defaults"].pop("labels", None)
    for cfg in doc["topology"]["nodes"].values():
        if cfg.pop("labels")["railab.role"] != "host":
            cfg["kind"] = "sonic-vs"
    for link in doc["topology"]["links"]:
        link.pop("vars", None)
    return yaml.safe_dump(doc)


@pytest.mark.parametrize("kind, params", [
    ("rail-optimized", dict(servers=4, rails=4, spines=2)),
    ("rail-optimized", dict(servers=6, rails=2, spines=2, leaf_ports=8)),  # 2 units
    ("dual-plane", dict(servers=4, rails=2, spines=2)),
    ("rail-only", dict(servers=4, rails=4)),
    ("clos2", dict(servers=8, rails=2, spines=2, leaf_ports=8)),
    ("clos3", dict(servers=8, rails=2, pods=2, spines=2, cores=2, leaf_ports=8)),
])
def test_inference_recovers_unlabelled_generated_fabrics(kind, params):
    topo = generate(kind, **params)
    inferred = clab.parse(strip_railab(clab.dumps(topo)), "stripped").topology
    assert roles(inferred) == roles(topo)
    assert [l.rail for l in inferred.links] == [l.rail for l in topo.links]
    assert {n.name: n.plane for n in inferred.switches} == {n.name: n.plane for n in topo.switches}
    assert [l.plane for l in inferred.links] == [l.plane for l in topo.links]
    leaves = lambda t: {n.name: (n.rail, n.pod) for n in t.by_role(Role.LEAF)}  # noqa: E731
    assert leaves(inferred) == leaves(topo)


def test_duplicate_keys_are_refused():
    with pytest.raises(TopologyError, match="duplicate key 'a' at line 3"):
        clab.load_yaml("a: 1\nb: 2\na: 3\n", "dup.yml")


def test_warnings_collected_by_read():
    warnings: list[str] = []
    clab.read(DATA / "ceos-rail-optimized.clab.yml", warnings)
    assert len(warnings) == 2


def test_switch_label_infers_tier_and_kinds_section_labels():
    text = """
name: labelled
topology:
  kinds:
    linux:
      labels: {railab.role: switch}
  nodes:
    sw1: {kind: linux}
    sw2: {kind: linux}
    gpu1: {kind: linux, labels: {railab.role: host}}
    gpu2: {kind: linux, labels: {railab.role: host}}
  links:
    - endpoints: ["gpu1:eth1", "sw1:eth1"]
    - endpoints: ["gpu2:eth1", "sw2:eth1"]
    - endpoints: ["sw1:eth2", "sw2:eth2"]
"""
    topo = clab.parse(text).topology
    assert roles(topo) == {"sw1": "leaf", "sw2": "leaf", "gpu1": "host", "gpu2": "host"}


def test_foreign_file_written_back_keeps_kinds(tmp_path):
    topo = clab.read(DATA / "srl-leaf-spine.clab.yml")
    clab.write(topo, tmp_path / "again.clab.yml")
    again = clab.read(tmp_path / "again.clab.yml")
    assert {n.name: (n.kind, n.role) for n in again.nodes.values()} == {
        n.name: (n.kind, n.role) for n in topo.nodes.values()}
    assert without_addresses(again).links == topo.links
