"""Frames the data-plane tests send into a switch port, and where they came out.

One builder per frame kind, so a test module only names its own addresses:

    udp = frames.udp_from(HOST_MAC, PORT_MAC[IN], dst="10.40.0.1")
    egress_of = frames.egress_lookup(NH_MAC)
    egress_of(run(dp, ns, udp(sport=7)))      # -> the egress ifindex
"""
from __future__ import annotations

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

HOST_IP = "10.9.0.2"          # the sending host's address in every BPF test
ROCE_PORT = 4791


def udp(dst: str, *, smac: str, dmac: str, src: str = HOST_IP, sport: int = 1000, dport: int = 2000,
        ttl: int = 64, tos: int = 0, size: int = 32, payload: bytes | None = None) -> Packet:
    """Ethernet / IPv4 / UDP / `size` bytes of b"x" (or `payload`)."""
    return (Ether(src=smac, dst=dmac) / IP(src=src, dst=dst, ttl=ttl, tos=tos)
            / UDP(sport=sport, dport=dport) / Raw(b"x" * size if payload is None else payload))


def roce(dst: str, *, smac: str, dmac: str, opcode: int = 4, qp: int = 17, psn: int = 1,
         src: str = HOST_IP, sport: int = 49152) -> Packet:
    """Ethernet / IPv4 / UDP 4791 / BTH (opcode, destination QP, PSN) / 64 zero bytes."""
    return (Ether(src=smac, dst=dmac) / IP(src=src, dst=dst) / UDP(sport=sport, dport=ROCE_PORT)
            / BTH(opcode=opcode, pkey=0xffff, dqpn=qp, psn=psn) / Raw(b"\0" * 64))


def udp_from(host_mac: str, port_mac: str, dst: str | None = None):
    """udp() from host_mac into the switch port port_mac, to `dst` unless told otherwise
    (`dmac=` sends it to another port's MAC)."""
    def build(dst: str | None = dst, *, dmac: str | None = None, **kw) -> Packet:
        assert dst is not None, "udp(): no destination"
        return udp(dst, smac=host_mac, dmac=dmac or port_mac, **kw)
    return build


def egress_lookup(nh_mac: dict[int, str]):
    """egress_of(result) -> the egress ifindex of a redirected frame, from its new
    destination MAC (each egress port's next hop has its own)."""
    by_mac = {mac: ifindex for ifindex, mac in nh_mac.items()}

    def egress_of(res) -> int:
        assert res.verdict == "redirect", res.verdict
        return by_mac[Ether(res.data).dst]
    return egress_of


def macs(prefix: str, ifindexes, base: int) -> dict[int, str]:
    """{ifindex: f"{prefix}:{ifindex - base:02x}"}: a MAC per port, told apart by ifindex."""
    return {ifx: f"{prefix}:{ifx - base:02x}" for ifx in ifindexes}


def port_plan(ingress: int, egress: list[int], *, first_slot: int, port_mac: str, nh_mac: str, base: int):
    """A switch under test with one ingress and some egress ports: (every port, slot per
    port counted from first_slot, each port's MAC, each egress port's next-hop MAC), the
    MACs told apart by ifindex - base."""
    ports = [ingress, *egress]
    return (ports, {ifx: first_slot + i for i, ifx in enumerate(ports)},
            macs(port_mac, ports, base), macs(nh_mac, egress, base))
