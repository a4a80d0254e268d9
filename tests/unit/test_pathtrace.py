"""The frames the path tracer feeds the data plane, and which faults a path touches."""
from __future__ import annotations

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from dataplane.agent.pathtrace import FlowKey, build_frame, path_links, touches
from dataplane.runtime.labspec import build
from dataplane.topology.generate import generate


def test_trace_frame_is_a_valid_roce_packet():
    key = FlowKey("srv1:nic0", "10.0.0.2", "10.0.1.3", 50123, 4791, dqpn=0x1234)
    pkt = Ether(build_frame(key, "02:00:00:00:00:01", "02:00:00:00:00:02"))
    assert pkt[Ether].dst == "02:00:00:00:00:02" and pkt[Ether].src == "02:00:00:00:00:01"
    ip = pkt[IP]
    assert (ip.src, ip.dst, ip.ttl, ip.proto) == ("10.0.0.2", "10.0.1.3", 64, 17)
    checksum = ip.chksum
    del ip.chksum
    assert IP(bytes(ip)).chksum == checksum
    assert (pkt[UDP].sport, pkt[UDP].dport) == (50123, 4791)
    assert pkt[BTH].dqpn == 0x1234


def test_touches_links_switches_and_planes():
    spec = build(generate("dual-plane", name="t", servers=2, rails=2, spines=1))
    host = spec.hosts[0]
    port = host.interfaces[0]
    leaf, leaf_port = port.peer.split(":")
    up = next(i for i in spec.node(leaf).interfaces if i.name.startswith("up"))
    key = FlowKey(f"{host.name}:{port.name}", "10.0.0.2", "10.0.1.3", 1, 2)
    result = {"hops": [{"switch": leaf, "in": leaf_port, "out": up.name}]}
    links = path_links(spec, key, result)
    spine = up.peer.split(":")[0]
    plane = spec.node(leaf).plane
    assert touches(spec, links, {"fault": "link-down", "a": f"{leaf}:{up.name}", "b": up.peer})
    assert touches(spec, links, {"fault": "link-down", "a": up.peer})
    assert touches(spec, links, {"fault": "switch-down", "switch": spine})
    assert touches(spec, links, {"fault": "plane-down", "plane": plane})
    assert not touches(spec, links, {"fault": "plane-down", "plane": 1 - plane})
    # Two servers on a 1:1 leaf give it two uplinks; the path uses one of them.
    other = next(i for i in spec.node(leaf).interfaces if i.name.startswith("up") and i.name != up.name)
    assert not touches(spec, links, {"fault": "link-down", "a": f"{leaf}:{other.name}"})
