"""The plain-Linux baseline of `railab bench fabric` (dataplane.bench.plain) on a tiny
leaf -> spine -> leaf shape: bare namespaces, veth, static routes and ip_forward only.
Real packets cross its three routers (ping's TTL and trafgen's frames counted at the
receiver), none of railab's settings is on it, and nothing of it is left afterwards."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from dataplane.bench import plain
from dataplane.bench.fabric import cross_leaf_path, measure
from dataplane.bench.traffic import TRAFGEN
from dataplane.kernel import ethtool
from dataplane.runtime import labspec
from dataplane.runtime.netns import list_netns
from dataplane.topology.generate import generate

from .conftest import xdp_prog_ids_in


def _tiny():
    topo = generate("clos2", "plaintest", servers=2, rails=1, spines=1, links_per_spine=1, leaf_ports=2)
    return labspec.build(topo, "", dataplane="kernel")


def _qdisc_kinds(netns: str) -> set[str]:
    out = subprocess.run(["tc", "-n", netns, "qdisc", "show"], check=True, capture_output=True, text=True).stdout
    return {line.split()[1] for line in out.splitlines() if line.strip()}


def test_plain_fabric_forwards_and_leaves_nothing():
    spec = _tiny()
    tag = f"t{os.getpid() % 100000}"
    names = {f"{plain.PREFIX}{tag}-{n.name}" for n in spec.nodes}
    with plain.plain_fabric(spec, tag) as p:
        assert names <= set(list_netns())
        path = cross_leaf_path(p)
        ping = subprocess.run(["ip", "netns", "exec", path.tx_ns, "ping", "-c", "3", "-i", "0.2", "-W", "2",
                               "-I", path.tx_ip, path.rx_ip], capture_output=True, text=True)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        # the reply left the receiver with TTL 64 and crossed leaf, spine and leaf
        assert set(re.findall(r"ttl=(\d+)", ping.stdout)) == {"61"}, ping.stdout
        for node in p.nodes:
            assert xdp_prog_ids_in(node.netns) == []
            assert _qdisc_kinds(node.netns) <= {"noqueue"}, node.name
            if node.role != "host":     # hosts keep what a new namespace inherits
                forward = subprocess.run(["ip", "netns", "exec", node.netns, "sysctl", "-n", "net.ipv4.ip_forward"],
                                         check=True, capture_output=True, text=True).stdout.strip()
                assert forward == "1", node.name
        # veth's defaults, not railab's host-port settings (GRO on, TX checksum off)
        assert ethtool.offloads(path.rx_ns, path.rx_if) == {"gro": False, "tx_checksum": True}
        if os.path.exists(TRAFGEN):
            flood = measure(path, frame_bytes=64, flows=4, duration_s=0.3, warmup_s=0.3)
            assert flood["packets"] > 1000, flood
    assert not names & set(list_netns())
    assert plain.leftovers(tag) == []
    links = subprocess.run(["ip", "-o", "link", "show"], check=True, capture_output=True, text=True).stdout
    for node in spec.nodes:
        for iface in node.interfaces:
            assert f" {iface.mac}" not in links, f"{node.name}:{iface.name} left in the root namespace"


def test_plain_fabric_cleans_up_when_building_fails(monkeypatch):
    spec = _tiny()
    tag = f"f{os.getpid() % 100000}"

    def broken(spec_, node):
        return ["route add 10.255.0.0/16 via 192.0.2.1 dev nosuchport"]

    monkeypatch.setattr(plain, "switch_commands", broken)
    with pytest.raises(RuntimeError, match="ip -batch"):
        with plain.plain_fabric(spec, tag):
            pass
    assert plain.leftovers(tag) == []
