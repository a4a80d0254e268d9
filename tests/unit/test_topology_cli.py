"""`railab topo gen|check` through the CLI: output, exit codes, one-line errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dataplane.topology import clab

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "clab"

GOOD = """\
name: good
topology:
  nodes:
    leaf1: {kind: nokia_srlinux}
    srv1: {kind: linux}
    srv2: {kind: linux}
  links:
    - endpoints: ["srv1:eth1", "leaf1:e1-1"]
    - endpoints: ["srv2:eth1", "leaf1:e1-2"]
"""


def good_with(**changes: object) -> str:
    """GOOD with topology keys replaced (None deletes)."""
    doc = yaml.safe_load(GOOD)
    for key, value in changes.items():
        if value is None:
            doc["topology"].pop(key, None)
        else:
            doc["topology"][key] = value
    return yaml.safe_dump(doc, sort_keys=False)


def good_nodes(**extra: object) -> str:
    doc = yaml.safe_load(GOOD)
    doc["topology"]["nodes"].update(extra)
    return yaml.safe_dump(doc, sort_keys=False)


def good_links(*links: object, replace: bool = False) -> str:
    doc = yaml.safe_load(GOOD)
    doc["topology"]["links"] = list(links) if replace else doc["topology"]["links"] + list(links)
    return yaml.safe_dump(doc, sort_keys=False)


def brief(a: str, b: str) -> dict:
    return {"endpoints": [a, b]}


# (id, file content, expected part of the message). Content None: the path does not exist.
BAD_FILES = [
    ("not-found", None, "file not found"),
    ("not-yaml", "name: [lab\ntopology: {", "not valid YAML"),
    ("not-utf8", b"name: \xff\xfe\n", "not UTF-8"),
    ("empty", "", "is empty"),
    ("list", "- a\n- b\n", "top level is a list"),
    ("scalar", "just a string\n", "top level is a string"),
    ("duplicate-key", GOOD.replace("    srv2: {kind: linux}\n",
                                   "    srv2: {kind: linux}\n    srv1: {kind: linux}\n"),
     "duplicate key 'srv1' at line 7 (first at line 5)"),
    ("missing-name", GOOD.replace("name: good\n", ""), "missing the lab name"),
    ("missing-topology", "name: x\n", "missing the 'topology:' section"),
    ("no-nodes", "name: x\ntopology:\n  nodes: {}\n", "has no nodes"),
    ("schema-unknown-key", good_nodes(srv3={"kind": "linux", "imagex": "a"}),
     "does not match the containerlab schema at topology.nodes.srv3: Additional properties"),
    ("schema-bad-name", GOOD.replace("name: good", "name: my lab"),
     "schema at name: 'my lab' does not match"),
    ("schema-bad-link", good_links({"endpoints": ["srv1:eth2", "leaf1:e1-3"], "color": "red"}),
     "schema at topology.links[2] (link 3): Additional properties are not allowed ('color'"),
    ("schema-bad-ipv4", good_links({"endpoints": ["srv1:eth2", "leaf1:e1-3"],
                                    "ipv4": ["10.0.0.300/24", "10.0.0.1/24"]}),
     "schema at topology.links[2].ipv4[0] (link 3): '10.0.0.300/24' is not in the form"),
    ("unknown-kind", good_nodes(sw9={"kind": "acme_os"}), "node sw9 has kind 'acme_os', which "
                                                         "containerlab does not know"),
    ("k8s-kind", good_nodes(k1={"kind": "k8s-kind"}), "node k1 has kind k8s-kind, which railab "
                                                     "cannot emulate (a Kubernetes"),
    ("ext-container", good_nodes(ext={"kind": "ext-container"}), "node ext has kind ext-container"),
    ("firewall-kind", good_nodes(fw={"kind": "cisco_asav"}), "node fw has kind cisco_asav, which "
                                                            "railab cannot emulate (a firewall)"),
    ("no-kind", GOOD.replace("srv2: {kind: linux}", "srv2: {}"), "node srv2 has no kind"),
    ("unknown-node", good_links(brief("srv1:eth2", "leaf9:e1-1")),
     "link 3 (srv1:eth2 -- leaf9:e1-1): node leaf9 is not defined in topology.nodes"),
    ("malformed-endpoint", good_links(brief("srv1eth2", "leaf1:e1-3")),
     "endpoint 'srv1eth2' is not 'node:interface'"),
    ("one-endpoint", good_links({"endpoints": ["srv1:eth2"]}), "link 3: needs exactly two endpoints"),
    ("interface-reused", good_links(brief("srv1:eth1", "leaf1:e1-3")),
     "link 3 (srv1:eth1 -- leaf1:e1-3): interface srv1:eth1 is already used by link 1"),
    ("srl-name-reused", good_links(brief("srv1:eth2", "leaf1:ethernet-1/1")),
     "interface leaf1:e1-1 is already used by link 1"),
    ("self-loop", good_links(brief("leaf1:e1-7", "leaf1:e1-8")), "connects node leaf1 to itself"),
    ("duplicate-link", good_links(brief("leaf1:e1-2", "srv2:eth1")), "link 3 (leaf1:e1-2 -- "
                                                                    "srv2:eth1): duplicates link 2"),
    ("host-to-host", good_links(brief("srv1:eth2", "srv2:eth2")),
     "host srv1 is connected directly to host srv2"),
    ("long-ifname", good_links(brief("srv1:a-very-long-interface-name", "leaf1:e1-3")),
     "node srv1: interface name 'a-very-long-interface-name' cannot be a Linux interface name"),
    ("bad-role", good_nodes(srv3={"kind": "linux", "labels": {"railab.role": "router"}}),
     "node srv3: label railab.role 'router' is not one of host, leaf, spine, core, switch"),
    ("bad-rail-label", good_nodes(leaf2={"kind": "nokia_srlinux", "labels": {"railab.rail": "x"}}),
     "node leaf2: label railab.rail 'x' is not a whole number >= 0"),
    ("switch-as-host", good_nodes(leaf2={"kind": "nokia_srlinux", "labels": {"railab.role": "host"}}),
     "node leaf2: kind nokia_srlinux is a switch, it cannot have railab.role host"),
    ("bad-rail-var", good_links({"endpoints": ["srv1:eth2", "leaf1:e1-3"],
                                 "vars": {"railab.rail": "two"}}), "var railab.rail 'two'"),
    ("bad-speed-var", good_links({"endpoints": ["srv1:eth2", "leaf1:e1-3"],
                                  "vars": {"railab.speed": "fast"}}), "railab.speed 'fast' is not"),
    ("bad-fabric-label", good_with(defaults={"labels": {"railab.fabric": "mesh"}}),
     "label railab.fabric 'mesh' is not one of"),
    ("host-link", good_links({"type": "host", "endpoint": {"node": "srv1", "interface": "eth5"},
                              "host-interface": "srv1-eth5"}),
     "link 3 (type host, srv1:eth5): railab cannot emulate a host link"),
    ("macvlan-brief", good_links(brief("srv1:eth5", "macvlan:enp0s3")),
     "railab cannot emulate a macvlan link"),
    ("vxlan-link", good_links({"type": "vxlan", "endpoint": {"node": "srv1", "interface": "eth6"},
                               "remote": "192.0.2.1", "vni": 10, "dst-port": 4789}),
     "railab cannot emulate a vxlan link, it tunnels to another machine"),
    ("labelled-host-unlinked", good_nodes(srv3={"kind": "linux", "labels": {"railab.role": "host"}}),
     "node srv3 (railab.role host) has no links"),
    ("no-links", good_with(links=None), "has no links between its nodes"),
    ("no-hosts", "name: x\ntopology:\n  nodes:\n    a: {kind: ceos}\n    b: {kind: ceos}\n"
                 "  links:\n    - endpoints: ['a:eth1', 'b:eth1']\n", "has no hosts"),
    ("tier-unknown", good_nodes(sw1={"kind": "ceos"}, sw2={"kind": "ceos"}).replace(
        "  links:\n", "  links:\n  - endpoints: ['sw1:eth1', 'sw2:eth1']\n"),
     "switch sw1 has no path to any host"),
]


@pytest.mark.parametrize("content, expected", [c[1:] for c in BAD_FILES],
                         ids=[c[0] for c in BAD_FILES])
def test_check_bad_file(railab_cli, tmp_path, content, expected):
    path = tmp_path / "bad.clab.yml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    status, out, err = railab_cli("topo", "check", path)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"railab: error: {path}: "), err
    assert expected in err, err


def test_check_directory(railab_cli, tmp_path):
    status, _, err = railab_cli("topo", "check", tmp_path)
    assert status == 2 and err == f"railab: error: {tmp_path}: is a directory, not a topology file\n"


BAD_GEN = [
    (["mesh"], "unknown fabric kind 'mesh'"),
    (["rail-optimized", "--servers", "0"], "--servers 0 must be at least 1"),
    (["rail-optimized", "--servers", "many"], "--servers 'many' is not a whole number"),
    (["rail-optimized", "--spines", "3"], "--spines 3 cannot share the 8 uplinks"),
    (["rail-only", "--spines", "2"], "--spines does not apply to rail-only"),
    (["dual-plane", "--planes", "3"], "--planes 3: a dual-plane fabric has exactly 2 planes"),
    (["clos2", "--oversubscription", "3:1"], "--oversubscription 3:1 does not divide"),
    (["clos2", "--oversubscription", "lots"], "--oversubscription 'lots' is not a ratio"),
    (["rail-optimized", "--speed", "fast"], "--speed 'fast' is not a port speed"),
    (["rail-optimized", "--servers", "400", "--leaf-ports", "16"], "each spine needs"),
    (["rail-optimized", "--links-per-spine", "1", "--oversubscription", "1:1"],
     "--links-per-spine 1 gives 2 uplinks per leaf"),
    (["clos3", "--servers", "9"], "--servers 9 cannot be split equally into --pods 2"),
    (["clos3", "--cores", "3"], "--cores 3 cannot share"),
    (["rail-optimized", "--cores", "2"], "--cores does not apply to rail-optimized"),
    (["rail-only", "--servers", "100", "--leaf-ports", "32"], "rail-only has no spines"),
    (["clos2", "--rails", "8", "--leaf-ports", "8"], "fewer than the 8 NICs of one server"),
    (["clos2", "--name", "bad name"], "--name 'bad name'"),
    (["clos2", "-o", "/nonexistent-dir/x.clab.yml"], "/nonexistent-dir/x.clab.yml: cannot write"),
]


@pytest.mark.parametrize("argv, expected", BAD_GEN, ids=[" ".join(a) for a, _ in BAD_GEN])
def test_gen_bad_parameters(railab_cli, argv, expected):
    status, out, err = railab_cli("topo", "gen", *argv)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("railab: error: ")
    assert expected in err, err


def test_gen_to_file_and_check(railab_cli, tmp_path):
    path = tmp_path / "lab.clab.yml"
    status, out, err = railab_cli("topo", "gen", "rail-optimized", "--servers", "8", "--rails", "4",
                                  "--spines", "2", "-o", path)
    assert (status, err) == (0, "")
    assert out == f"wrote {path}: 8 hosts, 4 leaves, 2 spines, 64 links\n"
    assert path.read_text().startswith(
        "# railab rail-optimized fabric. Made by: railab topo gen rail-optimized --servers 8 "
        "--rails 4 --spines 2 --links-per-spine 4 --leaf-ports 64 --oversubscription 1:1 "
        "--speed 400G\n")
    status, out, _ = railab_cli("topo", "check", path)
    assert status == 0
    assert "nodes   14: 8 host, 4 leaf, 2 spine" in out and "rails   0 1 2 3" in out


def test_gen_to_stdout_with_name(railab_cli):
    status, out, _ = railab_cli("topo", "gen", "clos2", "--name", "mylab", "--speed", "100G")
    doc = yaml.safe_load(out)
    assert status == 0 and doc["name"] == "mylab"
    assert doc["topology"]["links"][0]["vars"]["railab.speed"] == "100G"


def test_check_json(railab_cli):
    status, out, err = railab_cli("topo", "check", DATA / "sonic-dual-plane.clab.yml", "--json")
    report = json.loads(out)
    assert status == 0 and err == ""
    assert report["name"] == "sonic-2p" and report["kind"] is None
    assert report["nodes"] == {"host": 2, "leaf": 4, "spine": 2, "core": 0}
    assert report["links"] == 12 and report["rails"] == [0, 1] and report["planes"] == [0, 1]


def test_check_prints_warnings_on_stderr(railab_cli):
    status, out, err = railab_cli("topo", "check", DATA / "ceos-rail-optimized.clab.yml")
    assert status == 0 and "nodes   7: 3 host, 2 leaf, 2 spine" in out
    assert err.splitlines() == [
        "railab: warning: link 11 (type mgmt-net, spine-a:eth9): skipped, a management-network "
        "attachment is not part of the fabric",
        "railab: warning: node prometheus has no links: not part of the fabric, skipped"]


@pytest.mark.parametrize("path", sorted(DATA.glob("*.clab.yml")), ids=lambda p: p.name)
def test_every_example_file_checks(railab_cli, path):
    status, out, _ = railab_cli("topo", "check", path, "--json")
    assert status == 0 and json.loads(out)["nodes"]["host"] > 0


def test_real_entry_point_in_a_subprocess(tmp_path):
    """The installed CLI, all verbs loaded: an error is one line, no traceback."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "dataplane.cli.main", "topo", "check",
                           str(tmp_path / "missing.clab.yml")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == f"railab: error: {tmp_path / 'missing.clab.yml'}: file not found\n"
    proc = subprocess.run([sys.executable, "-m", "dataplane.cli.main", "topo", "gen", "rail-only"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert proc.returncode == 0
    assert clab.parse(proc.stdout).topology.kind == "rail-only"
