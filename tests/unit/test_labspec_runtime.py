"""What the runtime changes in a lab spec: namespace names, and which end nodes keep
their own container (only containerlab can leave a node its own image)."""
from __future__ import annotations

from pathlib import Path

from dataplane.runtime import containerlab, labspec
from dataplane.topology.clab import read

DATA = Path(__file__).resolve().parents[1] / "lab" / "data"


def test_a_linux_host_with_its_own_image_is_external_only_under_containerlab():
    topo = read(DATA / "srl-ls.clab.yml")        # clients: linux, network-multitool
    netns = labspec.build(topo, "f", runtime="netns")
    clab = labspec.build(topo, "f", runtime="containerlab")
    assert not any(n.external for n in netns.nodes)       # emulated hosts, sysctls and all
    assert netns.node("client1").netns == "railab-srl-ls-client1"
    client = clab.node("client1")
    assert client.external and client.container["image"] == "ghcr.io/hellt/network-multitool"
    assert client.netns == "clab-srl-ls-client1"
    derived = containerlab.derived_topology(clab)
    assert derived["topology"]["nodes"]["client1"]["image"] == "ghcr.io/hellt/network-multitool"
    assert derived["topology"]["nodes"]["leaf1"]["image"] == containerlab.node_image()
    assert all(link["mtu"] == 1500 for link in derived["topology"]["links"])
