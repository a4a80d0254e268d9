"""Which path a flow takes, asked of the data plane itself.

A frame of the flow is run through the switch program with BPF_PROG_TEST_RUN, hop by hop:
the rewritten destination MAC of each XDP_REDIRECT names the next hop's port, whose
switch runs the frame next, until the frame reaches a host or is dropped. Nothing is sent
on the wire; the answer is the program's real decision for that 5-tuple (for per-packet
modes such as spraying, the decision for one packet).
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Callable

from dataplane.runtime.labspec import LabSpec
from dataplane.topology.model import Endpoint
from dataplane.xdp.abi import ROCE_V2_UDP_PORT

XDP_VERDICTS = {0: "aborted", 1: "drop", 2: "pass", 3: "tx", 4: "redirect", 5: "queued"}
FORWARDED = (4, 5)     # redirected, or handed to a real queue (XDP_PASS + a handoff in the frame)
ROCE_PORT = ROCE_V2_UDP_PORT
MAX_HOPS = 16

# (netns, frame, ingress ifindex) -> (verdict, output frame)
RunFrame = Callable[[str, bytes, int], tuple[int, bytes]]


@dataclass(frozen=True)
class FlowKey:
    src: str            # "host:port" the frame leaves by
    src_ip: str
    dst_ip: str
    sport: int
    dport: int
    dqpn: int = 0
    proto: int = 17


def _mac(text: str) -> bytes:
    return bytes(int(x, 16) for x in text.split(":"))


def _ipv4_checksum(header: bytes) -> int:
    total = sum(struct.unpack("!10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def build_frame(key: FlowKey, src_mac: str, dst_mac: str) -> bytes:
    """Ethernet/IPv4/UDP (+ a RoCEv2 BTH for port 4791, so QP-aware hashing sees it)."""
    bth = b""
    if key.proto == 17 and key.dport == ROCE_PORT:
        bth = struct.pack("!BBHI I", 0x0A, 0x40, 0xFFFF, key.dqpn & 0xFFFFFF, 0)
    payload = bth + bytes(32)
    udp = struct.pack("!HHHH", key.sport, key.dport, 8 + len(payload), 0) + payload
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0x02, 20 + len(udp), 0, 0x4000, 64, key.proto, 0,
                         socket.inet_aton(key.src_ip), socket.inet_aton(key.dst_ip))
    header = header[:10] + struct.pack("!H", _ipv4_checksum(header)) + header[12:]
    return _mac(dst_mac) + _mac(src_mac) + b"\x08\x00" + header + udp


def trace(spec: LabSpec, key: FlowKey, run_frame: RunFrame) -> dict:
    """{"hops": [{"switch", "in", "out"}], "end": "host:port" | None, "verdict": str}."""
    _, start = spec.endpoint(key.src)
    switch, ingress = start.peer_node, start.peer_if
    frame = build_frame(key, start.mac, start.peer_mac)
    hops: list[dict] = []
    for _ in range(MAX_HOPS):
        node = spec.node(switch)
        iface = node.interface(ingress)
        verdict, out = run_frame(node.netns, frame, iface.ifindex)
        if verdict not in FORWARDED:
            hops.append({"switch": switch, "in": ingress, "out": None})
            return {"hops": hops, "end": None, "verdict": XDP_VERDICTS.get(verdict, str(verdict))}
        far = spec.find_by_mac(out[:6].hex(":"))
        if far is None:
            hops.append({"switch": switch, "in": ingress, "out": None})
            return {"hops": hops, "end": None, "verdict": "unknown next hop"}
        far_node, far_if = far
        hops.append({"switch": switch, "in": ingress, "out": far_if.peer_if})
        if far_node.role == "host":
            return {"hops": hops, "end": f"{far_node.name}:{far_if.name}", "verdict": "delivered"}
        switch, ingress, frame = far_node.name, far_if.name, out
    return {"hops": hops, "end": None, "verdict": "loop"}


def path_links(spec: LabSpec, key: FlowKey, result: dict) -> list[frozenset[str]]:
    """The links a traced flow crosses, each as {"node:if", "node:if"}."""
    links = [frozenset((key.src, spec.endpoint(key.src)[1].peer))]
    for hop in result["hops"]:
        if hop["out"]:
            iface = spec.node(hop["switch"]).interface(hop["out"])
            links.append(frozenset((f"{hop['switch']}:{hop['out']}", iface.peer)))
    return links


def touches(spec: LabSpec, links: list[frozenset[str]], event: dict) -> bool:
    """Whether a path crosses what a fault event takes down or slows."""
    fault = event.get("fault", "")
    ends = [e for e in (event.get("a"), event.get("b"), event.get("port")) if e]
    nodes_on_path = {Endpoint.parse(end).node for link in links for end in link}
    if fault.startswith("link") or fault in ("degrade", "restore"):
        return any(end in link for end in ends for link in links)
    if fault.startswith("switch"):
        return event.get("switch") in nodes_on_path
    if fault.startswith("plane"):
        planes = {n.name: n.plane for n in spec.switches}
        return any(planes.get(n) == event.get("plane") for n in nodes_on_path)
    return False
