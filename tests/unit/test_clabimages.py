"""`railab topo images`: a containerlab file rewritten to railab's images reads back as the
same fabric, with every railab node on railab's image and every fabric link at MTU 1500."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dataplane.topology import clab, clabimages, infer
from dataplane.topology.model import FABRIC_KINDS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "clab"
HOST, SWITCH = "railab-node:9.9", "railab-switch:9.9"


def rewrite(path: Path) -> tuple[dict, clab.Loaded]:
    text = clabimages.rewrite(path.read_text(), str(path), HOST, SWITCH)
    return yaml.safe_load(text), clab.parse(text, "rewritten")


@pytest.mark.parametrize("kind", FABRIC_KINDS)
def test_shipped_lab_on_railab_images_is_the_same_fabric(kind):
    path = ROOT / "labs" / kind / f"{kind}.clab.yml"
    doc, loaded = rewrite(path)
    before = clab.load(path).topology
    topo = loaded.topology
    assert {n: v.role for n, v in topo.nodes.items()} == {n: v.role for n, v in before.nodes.items()}
    assert [(str(l.a), str(l.b), l.ipv4, l.speed_bps) for l in topo.links] == \
        [(str(l.a), str(l.b), l.ipv4, l.speed_bps) for l in before.links]
    for name, node in topo.nodes.items():
        cfg = doc["topology"]["nodes"][name]
        assert not node.external
        assert cfg["image"] == (HOST if node.role.value == "host" else SWITCH)
        assert (cfg["restart-policy"], cfg["network-mode"], cfg["privileged"]) == ("no", "none", False)
    assert {link["mtu"] for link in doc["topology"]["links"]} == {1500}
    assert doc["topology"]["defaults"]["labels"]["railab.fabric"] == kind


def test_network_os_switches_become_railab_switches_with_linux_interface_names():
    doc, loaded = rewrite(DATA / "srl-leaf-spine.clab.yml")
    nodes = doc["topology"]["nodes"]
    for switch in ("spine1", "spine2", "leaf1", "leaf2"):
        assert nodes[switch]["kind"] == "linux" and nodes[switch]["image"] == SWITCH
        assert "type" not in nodes[switch]
        assert loaded.topology.nodes[switch].role.is_switch
    assert doc["topology"]["links"][0]["endpoints"] == ["leaf1:e1-49", "spine1:e1-1"]
    assert not loaded.renamed            # nothing left for railab to rename
    # the clients run the user's own image (kinds.linux): railab leaves them alone
    assert all(loaded.topology.nodes[c].external for c in ("client1", "client2"))
    assert "image" not in nodes["client1"] and nodes["client1"]["exec"]


def test_railab_images_say_the_role_whatever_the_name():
    assert infer.kind_class("linux", "railab-switch:0.1.0", "srv1") == "switch"
    assert infer.kind_class("linux", "registry:5000/lab/railab-node:0.1.0", "leaf1") == "host"
    assert infer.railab_image_role("alpine:3") is None
    # a host on railab's node image is railab's host, not a user's container
    loaded = clab.parse("name: x\ntopology:\n  nodes:\n"
                        "    h1: {kind: linux, image: railab-node:1}\n"
                        "    h2: {kind: linux, image: alpine:3}\n"
                        "    s1: {kind: linux, image: railab-switch:1}\n"
                        "  links:\n    - endpoints: ['h1:e1', 's1:e1']\n"
                        "    - endpoints: ['h2:e1', 's1:e2']\n")
    nodes = loaded.topology.nodes
    assert not nodes["h1"].external and nodes["h2"].external and nodes["s1"].role.is_switch
