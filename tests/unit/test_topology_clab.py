"""containerlab files: schema validity, round trip, and how other people's files are read."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
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
    except TopologyError as err:
        # Only the radix may run out (spines or cores with too few ports; which cases is
        # test_topology_generate's): any other refusal is a bug. Such a draw round-trips
        # nothing, so it does not count as an example (hypothesis fails the test if too
        # few draws are left: about a third are refused).
        assert "--leaf-ports" in str(err), str(err)
        assume(False)
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


# ---- files as people write them (cases found in public containerlab labs)
def _lab(nodes: str, links: str, extra: str = "") -> str:
    return f"name: t\ntopology:\n{extra}  nodes:\n{nodes}  links:\n{links}"


LEAF_SPINE_NODES = """\
    spine1: {kind: nokia_srlinux}
    leaf1: {kind: nokia_srlinux}
    leaf2: {kind: nokia_srlinux}
    h1: {kind: linux, image: alpine}
    h2: {kind: linux, image: alpine}
"""
LEAF_SPINE_LINKS = """\
    - endpoints: ["leaf1:e1-49", "spine1:e1-1"]
    - endpoints: ["leaf2:e1-49", "spine1:e1-2"]
    - endpoints: ["h1:eth1", "leaf1:e1-1"]
    - endpoints: ["h2:eth1", "leaf2:e1-1"]
"""


def test_environment_variables_are_substituted_like_containerlab():
    env = {"SET": "x", "EMPTY": ""}
    assert clab.expand_env("${SET} ${UNSET} ${UNSET:=d1} ${UNSET:-d2} ${EMPTY:=d3} "
                           "${EMPTY=d4} ${SET:=d5} $SET", env) == "x  d1 d2 d3  x $SET"
    text = _lab(LEAF_SPINE_NODES.replace("{kind: nokia_srlinux}",
                                         "{kind: nokia_srlinux, type: '${RAILAB_TEST_UNSET:=ixr-d3l}'}"),
                LEAF_SPINE_LINKS, extra="")
    text = text.replace("name: t\n", "name: t\nprefix: ${RAILAB_TEST_UNSET:=\"\"}\n")
    assert len(clab.parse(text).topology.hosts) == 2


def test_a_group_that_is_not_defined_is_a_label_and_defaults_group_gives_the_kind():
    nodes = LEAF_SPINE_NODES.replace("h2: {kind: linux, image: alpine}", "h2: {group: servers}")
    nodes = nodes.replace("spine1: {kind: nokia_srlinux}", "spine1: {kind: nokia_srlinux, group: spines}")
    extra = "  groups:\n    servers: {kind: linux}\n"
    topo = clab.parse(_lab(nodes, LEAF_SPINE_LINKS, extra)).topology
    assert roles(topo)["h2"] == "host" and roles(topo)["spine1"] == "spine"
    nodes = LEAF_SPINE_NODES.replace("h2: {kind: linux, image: alpine}", "h2: {}")
    extra = "  defaults: {group: servers}\n  groups:\n    servers: {kind: linux}\n"
    assert roles(clab.parse(_lab(nodes, LEAF_SPINE_LINKS, extra)).topology)["h2"] == "host"


def test_empty_sections_old_kind_names_and_type_case_are_accepted():
    extra = "  kinds: ~\n  groups: ~\n"
    assert len(clab.parse(_lab(LEAF_SPINE_NODES, LEAF_SPINE_LINKS, extra)).topology.nodes) == 5
    extra = "  kinds:\n    vr-vqfx: {image: vrnetlab/vr-vqfx}\n    srl: {type: IXR-D3L}\n"
    nodes = LEAF_SPINE_NODES.replace("spine1: {kind: nokia_srlinux}", "spine1: {kind: vr-vqfx}")
    topo = clab.parse(_lab(nodes, LEAF_SPINE_LINKS, extra)).topology
    assert roles(topo)["spine1"] == "spine"


def test_linux_routers_are_known_by_their_names():
    nodes = LEAF_SPINE_NODES.replace("{kind: nokia_srlinux}", "{kind: linux, image: my/netlab}")
    topo = clab.parse(_lab(nodes, LEAF_SPINE_LINKS)).topology
    assert roles(topo) == {"spine1": "spine", "leaf1": "leaf", "leaf2": "leaf", "h1": "host", "h2": "host"}


def test_a_leaf_without_hosts_is_a_leaf_not_a_core():
    nodes = LEAF_SPINE_NODES + "    spine2: {kind: nokia_srlinux}\n    border1: {kind: nokia_srlinux}\n"
    links = LEAF_SPINE_LINKS + """\
    - endpoints: ["leaf1:e1-50", "spine2:e1-1"]
    - endpoints: ["leaf2:e1-50", "spine2:e1-2"]
    - endpoints: ["border1:e1-49", "spine1:e1-3"]
    - endpoints: ["border1:e1-50", "spine2:e1-3"]
"""
    assert roles(clab.parse(_lab(nodes, links)).topology)["border1"] == "leaf"


def test_a_wrong_section_type_is_named_not_printed():
    text = _lab(LEAF_SPINE_NODES, "    a: {endpoints: ['h1:eth1', 'leaf1:e1-1']}\n")
    with pytest.raises(TopologyError, match=r"topology.links: must be a list, not a mapping$"):
        clab.parse(text, "t.yml")


def test_two_hosts_with_one_address_are_refused():
    links = LEAF_SPINE_LINKS.replace('- endpoints: ["h1:eth1", "leaf1:e1-1"]',
                                     '- {endpoints: ["h1:eth1", "leaf1:e1-1"], ipv4: ["10.9.0.2/24", "10.9.0.1/24"]}')
    links = links.replace('- endpoints: ["h2:eth1", "leaf2:e1-1"]',
                          '- {endpoints: ["h2:eth1", "leaf2:e1-1"], ipv4: ["10.9.0.2/24", "10.9.0.1/24"]}')
    topo = clab.parse(_lab(LEAF_SPINE_NODES, links)).topology
    from dataplane.topology.addressing import plan_addresses
    with pytest.raises(TopologyError, match=r"address 10.9.0.2 is on both h1:eth1 and h2:eth1"):
        plan_addresses(topo)


def test_bridges_are_switches():
    nodes = LEAF_SPINE_NODES.replace("leaf2: {kind: nokia_srlinux}", "leaf2: {kind: bridge}")
    nodes = nodes.replace("spine1: {kind: nokia_srlinux}", "spine1: {kind: ovs-bridge}")
    assert roles(clab.parse(_lab(nodes, LEAF_SPINE_LINKS)).topology) == {
        "spine1": "spine", "leaf1": "leaf", "leaf2": "leaf", "h1": "host", "h2": "host"}
