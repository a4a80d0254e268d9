"""Hostile frames for the switch program, and what it may do with any of them.

A switch port of a lab can receive anything: frames of a user's own containers in a mixed
lab, of another lab, of a buggy sender. This module makes such frames (valid ones of every
kind railab parses, then truncated, with fields set to bad values, tagged, optioned,
fragmented, or random bytes) and judges what the program did with each, against a model of
the switch that `FuzzSwitch` programs, written from the rules, not from the program:

- it never aborts, and never sends a frame back out with XDP_TX (no port of the model asks
  for that);
- it redirects only (a) an IPv4 frame it could parse, with TTL > 1, to a next hop of the
  group that the longest matching route names, rewritten as a router must (MACs, TTL - 1,
  checksum, at most a CE mark; nothing else changed), or (b) an ARP request for the port's
  own address, answered to the requester;
- it passes to the switch's kernel only ARP and IPv4 for the switch's own address.

The host side has its own judge (`judge_nic`): the kernel NIC's responder
(bpf/nic/responder.c) may answer with XDP_TX only a RoCEv2 data frame it could parse,
and only with a well-formed ACK or CNP back to the frame's sender (ICRC and IP checksum
right); it may drop only data frames, and only when told to consume them.

The property test (tests/bpf/test_fuzz.py, hypothesis) and the fuzz bench (`railab bench
fuzz`, millions of frames) share the frames and the judges.
"""
from __future__ import annotations

import functools
import ipaddress
import random
import struct
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw

from dataplane.wire import roce
from dataplane.xdp import progtest

ETH_IP, ETH_ARP, ETH_PFC = 0x0800, 0x0806, 0x8808
SWITCH_ID = 1
HASH_SEED = 0x5EED
INGRESS = 101
EGRESS = (102, 103, 104, 105)
HOST_MAC = "02:00:00:0f:00:01"
HOST_IP = "10.9.0.2"
OWNED_IP = "10.0.0.1"        # the switch's address on the ingress port
PORT_MAC = {ifx: f"02:00:00:0f:01:{ifx - 100:02x}" for ifx in (INGRESS, *EGRESS)}
NH_MAC = {ifx: f"02:00:00:0f:02:{ifx - 100:02x}" for ifx in EGRESS}
# prefix -> (group id, mode, members): every mode with per-frame state, and the edge cases
ROUTES = {
    "10.1.0.0/16": (31, "ecmp", EGRESS),
    "10.2.0.0/16": (32, "flowlet", EGRESS),
    "10.3.0.0/16": (33, "spray-rr", EGRESS[:2]),
    "10.4.0.0/16": (34, "ecmp", EGRESS[:1]),
    "10.5.0.0/16": (35, "ecmp", ()),
    "10.5.7.0/24": (36, "lbn", EGRESS[2:]),      # longer than 10.5/16: must win
}
DESTINATIONS = ("10.1.0.7", "10.2.3.4", "10.3.0.9", "10.4.0.1", "10.5.0.1", "10.5.7.7", OWNED_IP,
                "10.9.9.9", "255.255.255.255", "224.0.0.5", "0.0.0.0")
KINDS = ("udp", "tcp", "roce", "railab-data", "arp", "pfc", "ipv6", "lldp", "vlan", "ip-options",
         "fragment", "icmp", "random")
# named fields a mutation may set (offset in an untagged IPv4 frame, width in bytes)
FIELDS = {"ethertype": (12, 2), "ver_ihl": (14, 1), "tos": (15, 1), "tot_len": (16, 2),
          "frag": (20, 2), "ttl": (22, 1), "proto": (23, 1), "ip_csum": (24, 2), "dst_ip": (30, 4),
          "udp_dport": (36, 2), "udp_len": (38, 2), "bth_opcode": (42, 1), "dst_mac": (0, 6),
          "arp_op": (20, 2), "arp_tip": (38, 4), "pfc_opcode": (14, 2)}
MUTATIONS = ("truncate", "byte", "field", "vlan", "extend")


# ------------------------------------------------------------------ frames
def base_frame(kind: str, dst_index: int, variant: int) -> bytes:
    """A well-formed frame of `kind` to DESTINATIONS[dst_index] (where it has an address);
    `variant` picks ports, opcodes, sizes and the like."""
    dst = DESTINATIONS[dst_index % len(DESTINATIONS)]
    rng = random.Random(variant)
    eth = Ether(src=HOST_MAC, dst=PORT_MAC[INGRESS])
    size = rng.choice((0, 1, 18, 64, 256, 1000))
    if kind == "udp":
        pkt = eth / IP(src=HOST_IP, dst=dst, ttl=rng.choice((0, 1, 2, 64, 255)), tos=rng.randrange(256)) \
            / UDP(sport=rng.randrange(65536), dport=rng.randrange(65536)) / Raw(b"u" * size)
    elif kind == "tcp":
        pkt = eth / IP(src=HOST_IP, dst=dst) / TCP(sport=rng.randrange(65536), dport=rng.randrange(65536),
                                                   dataofs=rng.choice((5, 5, 8, 15, 2))) / Raw(b"t" * size)
    elif kind == "roce":
        pkt = eth / IP(src=HOST_IP, dst=dst, tos=rng.choice((0x02, 0x03, 0x68))) \
            / UDP(sport=rng.randrange(49152, 65536), dport=4791) \
            / BTH(opcode=rng.randrange(256), dqpn=rng.randrange(1 << 24), psn=rng.randrange(1 << 24),
                  ackreq=rng.randrange(2)) / Raw(b"\0" * size)
    elif kind == "railab-data":     # what railab's senders send: the NIC's whole input
        op = rng.choice(sorted(roce.DATA_OPCODES))
        tpl = roce.FrameTemplate(src_mac=HOST_MAC, dst_mac=PORT_MAC[INGRESS], src_ip=HOST_IP, dst_ip=dst,
                                 sport=rng.randrange(49152, 65536), dqpn=rng.randrange(1, 64), opcode=op,
                                 payload_len=rng.choice((roce.RAILAB_HLEN, 256, 1024)),
                                 ecn=rng.choice((roce.ECN_ECT0, roce.ECN_CE)))
        seq = rng.randrange(8)
        return bytes(tpl.fill(seq, bool(rng.randrange(2)), 1, 0x21, 0, seq, 0, 1, 256, 1, 1))
    elif kind == "arp":
        target = rng.choice((OWNED_IP, dst, HOST_IP))
        pkt = eth / ARP(op=rng.choice((1, 1, 2, 3)), hwsrc=HOST_MAC, psrc=HOST_IP, pdst=target)
        if rng.random() < 0.3:
            pkt[Ether].dst = "ff:ff:ff:ff:ff:ff"
    elif kind == "pfc":
        body = struct.pack("!HH8H", rng.choice((0x0101, 0x0101, 0x0001, 0xFFFF)), rng.randrange(256),
                           *(rng.choice((0, 1, 0xFFFF)) for _ in range(8)))
        pkt = Ether(src=HOST_MAC, dst="01:80:c2:00:00:01", type=ETH_PFC) / Raw(body + b"\0" * 26)
    elif kind == "ipv6":
        pkt = eth / IPv6(src="fd00::2", dst="fd00::1") / UDP(sport=1, dport=4791) / Raw(b"6" * size)
    elif kind == "lldp":
        pkt = Ether(src=HOST_MAC, dst="01:80:c2:00:00:0e", type=0x88CC) / Raw(b"\x02\x07" + b"\0" * 40)
    elif kind == "vlan":
        pkt = eth / Dot1Q(vlan=rng.randrange(4096)) / IP(src=HOST_IP, dst=dst) / UDP(dport=4791) / Raw(b"v" * size)
    elif kind == "ip-options":
        words = rng.randrange(1, 11)
        pkt = eth / IP(src=HOST_IP, dst=dst, options=[b"\x01" * (4 * words - 1) + b"\x00"]) \
            / UDP(sport=7, dport=rng.choice((4791, 53))) / Raw(b"o" * size)
    elif kind == "fragment":
        pkt = eth / IP(src=HOST_IP, dst=dst, flags=rng.choice(("MF", 0)), frag=rng.randrange(1, 100)) \
            / Raw(b"f" * max(size, 8))
    elif kind == "icmp":
        pkt = eth / IP(src=HOST_IP, dst=dst, proto=1) / Raw(b"\x08\x00" + b"i" * max(size, 6))
    else:
        return rng.randbytes(rng.choice((14, 15, 33, 34, 60, 64, 1514)))
    return bytes(pkt)


def mutate(frame: bytes, ops) -> bytes:
    """`frame` after each (name, a, b) of `ops` in turn (name one of MUTATIONS; a and b
    are any non-negative ints, taken modulo what they index)."""
    buf = bytearray(frame)
    for name, a, b in ops:
        if name == "truncate":
            buf = buf[:a % (len(buf) + 1)]
        elif name == "byte" and buf:
            buf[a % len(buf)] = b & 0xFF
        elif name == "field":
            off, width = FIELDS[sorted(FIELDS)[a % len(FIELDS)]]
            if off + width <= len(buf):
                buf[off:off + width] = (b % (1 << (8 * width))).to_bytes(width, "big")
        elif name == "vlan" and len(buf) >= 12:
            buf[12:12] = struct.pack("!HH", 0x8100 if a % 2 else 0x88A8, b & 0xFFFF)
        elif name == "extend":
            buf += random.Random(b).randbytes(a % 64)
    return bytes(buf)


CORPUS_VARIANTS = 12


@functools.lru_cache(maxsize=None)
def corpus() -> tuple[bytes, ...]:
    """The base frames every hostile frame starts from: each kind to each destination in
    CORPUS_VARIANTS variants, built once (scapy takes about a millisecond a frame; a
    mutation, microseconds)."""
    return tuple(base_frame(kind, d, variant) for kind in KINDS for d in range(len(DESTINATIONS))
                 for variant in range(CORPUS_VARIANTS))


def corpus_of(kind: str) -> tuple[bytes, ...]:
    """The corpus frames of one kind."""
    per_kind = len(DESTINATIONS) * CORPUS_VARIANTS
    at = KINDS.index(kind) * per_kind
    return corpus()[at:at + per_kind]


def random_frames(seed: int, favour: str | None = None) -> Iterator[bytes]:
    """Endless hostile frames for the bench: a base frame of the corpus with zero to four
    mutations, from one seed (the same seed gives the same frames). favour: a kind that
    half the base frames are of (the NIC parses deeply only railab's data frames)."""
    rng = random.Random(seed)
    bases = corpus()
    favoured = corpus_of(favour) if favour else bases
    while True:
        frame = rng.choice(favoured if rng.random() < 0.5 else bases)
        ops = [(rng.choice(MUTATIONS), rng.randrange(1 << 16), rng.randrange(1 << 32))
               for _ in range(rng.choice((0, 1, 1, 2, 4)))]
        yield mutate(frame, ops)


# ------------------------------------------------------------------ the judge
def _mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def _csum(header: bytes) -> int:
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


@dataclass(frozen=True)
class Ipv4View:
    ihl: int
    ttl: int
    dst: str
    csum_ok: bool


def parse_ipv4(frame: bytes) -> Ipv4View | None:
    """The IPv4 header of an untagged frame if a router may forward it: version 4, a whole
    header, a total length that fits the header and the frame; else None."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    ver, ihl = frame[14] >> 4, frame[14] & 0xF
    if ver != 4 or ihl < 5 or 14 + 4 * ihl > len(frame):
        return None
    tot_len = struct.unpack_from("!H", frame, 16)[0]
    if tot_len < 4 * ihl or 14 + tot_len > len(frame):
        return None
    header = frame[14:14 + 4 * ihl]
    return Ipv4View(ihl, frame[22], str(ipaddress.IPv4Address(frame[30:34])), _csum(header) == 0xFFFF)


def route_of(dst: str) -> tuple[int, str, tuple[int, ...]] | None:
    """The longest route of the model that covers dst."""
    addr = ipaddress.IPv4Address(dst)
    best = None
    for prefix, route in ROUTES.items():
        net = ipaddress.IPv4Network(prefix)
        if addr in net and (best is None or net.prefixlen > best[0]):
            best = (net.prefixlen, route)
    return None if best is None else best[1]


def _is_arp_request_for_us(frame: bytes) -> bool:
    return (len(frame) >= 42 and frame[12:14] == b"\x08\x06" and frame[14:20] == b"\x00\x01\x08\x00\x06\x04"
            and frame[20:22] == b"\x00\x01" and frame[38:42] == _ip(OWNED_IP) and frame[28:32] != frame[38:42])


def _ip(text: str) -> bytes:
    return ipaddress.IPv4Address(text).packed


def judge(frame: bytes, verdict: str, out: bytes) -> list[str]:
    """What the program did wrong with `frame` (its verdict and the frame it left): []
    when it kept every rule of the module doc."""
    if verdict in ("aborted", "tx"):
        return [f"verdict {verdict}"]
    if verdict == "drop":
        return []
    if verdict == "pass":
        ip = parse_ipv4(frame)
        ok = frame[12:14] == b"\x08\x06" or (ip is not None and ip.dst == OWNED_IP and not frame[0] & 1)
        return [] if ok else ["passed to the switch's kernel: neither ARP nor IPv4 for the switch"]
    if verdict != "redirect":
        return [f"unknown verdict {verdict}"]
    if _is_arp_request_for_us(frame):
        # to the requester's hardware address (ar_sha), as Linux answers
        want = (frame[22:28] + _mac(PORT_MAC[INGRESS]) + frame[12:20] + b"\x00\x02" + _mac(PORT_MAC[INGRESS])
                + frame[38:42] + frame[22:28] + frame[28:32])
        return [] if out[:42] == want and out[42:] == frame[42:] else ["ARP reply malformed"]
    return _judge_forwarded(frame, out)


def _judge_forwarded(frame: bytes, out: bytes) -> list[str]:
    ip = parse_ipv4(frame)
    if ip is None:
        return ["redirected a frame that is not a forwardable IPv4 packet"]
    if frame[0] & 1:
        return ["redirected a multicast/broadcast frame"]
    if ip.ttl <= 1:
        return [f"redirected with TTL {ip.ttl}"]
    route = route_of(ip.dst)
    if route is None or ip.dst == OWNED_IP:
        return [f"redirected {ip.dst}, which has no route"]
    members = {_mac(NH_MAC[m]): m for m in route[2]}
    member = members.get(out[0:6])
    if member is None:
        return [f"{ip.dst} sent to MAC {out[0:6].hex(':')}, not a next hop of its route's group"]
    problems = []
    if out[6:12] != _mac(PORT_MAC[member]):
        problems.append("source MAC is not the egress port's")
    if len(out) != len(frame) or out[12:14] != frame[12:14]:
        problems.append("frame length or EtherType changed")
        return problems
    if out[22] != ip.ttl - 1:
        problems.append(f"TTL {ip.ttl} became {out[22]}")
    tos_in, tos_out = frame[15], out[15]
    if tos_out != tos_in and not (tos_in & 3 and tos_out == tos_in | 3):
        problems.append(f"ToS {tos_in:#x} became {tos_out:#x} (only a CE mark of an ECT packet may change it)")
    if ip.csum_ok and _csum(out[14:14 + 4 * ip.ihl]) != 0xFFFF:
        problems.append("header checksum no longer valid")
    skip = {15, 22, 24, 25}
    if any(out[i] != frame[i] for i in range(14, len(frame)) if i not in skip):
        problems.append("bytes beyond the rewritten fields changed")
    return problems


def judge_nic(frame: bytes, verdict: str, out: bytes, *, consume: bool) -> list[str]:
    """What the NIC's responder did wrong with `frame` (module doc)."""
    if verdict in ("aborted", "redirect"):
        return [f"verdict {verdict}"]
    if verdict == "pass":
        return []
    data = roce.parse(frame)
    if data is None or not data.is_data or data.hdr is None or parse_ipv4(frame) is None:
        return [f"{verdict} of a frame that is no RoCEv2 data frame"]
    if verdict == "drop":
        return [] if consume else ["dropped a data frame without being told to consume"]
    if verdict != "tx":
        return [f"unknown verdict {verdict}"]
    answer = roce.parse(out, verify=True)
    if answer is None or answer.opcode not in (roce.Opcode.ACK, roce.Opcode.CNP):
        return ["answered with something that is neither an ACK nor a CNP"]
    problems = []
    if not answer.icrc_ok:
        problems.append("answer's ICRC is wrong")
    if _csum(out[14:34]) != 0xFFFF:
        problems.append("answer's IP header checksum is wrong")
    if (out[0:6], out[6:12]) != (frame[6:12], frame[0:6]):
        problems.append("answer is not addressed back to the frame's sender (MACs)")
    if (answer.src_ip, answer.dst_ip) != (data.dst_ip, data.src_ip):
        problems.append("answer is not addressed back to the frame's sender (IPs)")
    return problems


# ------------------------------------------------------------------ the switch under test
@dataclass
class FuzzSwitch:
    """The model's switch programmed into a data plane (dataplane.xdp.switch), with its
    ports as veths of exactly those ifindexes in namespace `netns` (BPF_PROG_TEST_RUN
    looks ingress_ifindex up in the caller's namespace)."""
    dp: object
    netns: str
    groups: list[int] = field(default_factory=list)

    def program(self) -> None:
        for ifx in (INGRESS, *EGRESS):
            subprocess.run(["ip", "-n", self.netns, "link", "add", "name", f"p{ifx}", "index", str(ifx),
                            "type", "veth", "peer", "name", f"q{ifx}", "index", str(ifx + 1000)],
                           check=True, capture_output=True)
        self.dp.set_switch(SWITCH_ID, hash_seed=HASH_SEED)
        for slot, ifx in enumerate((INGRESS, *EGRESS), start=1):
            self.dp.set_port(ifx, switch_id=SWITCH_ID, slot=slot, mac=PORT_MAC[ifx])
        self.dp.add_address(SWITCH_ID, INGRESS, OWNED_IP)
        for prefix, (gid, mode, members) in ROUTES.items():
            self.dp.set_group(gid, [(m, NH_MAC[m]) for m in members], mode=mode)
            self.groups.append(gid)
            self.dp.add_route(SWITCH_ID, prefix, gid)

    def unprogram(self) -> None:
        for prefix in list(self.dp.routes(SWITCH_ID)):
            self.dp.del_route(SWITCH_ID, prefix)
        for gid in self.groups:
            self.dp.del_group(gid)
        for ifx in (INGRESS, *EGRESS):
            self.dp.del_port(ifx)

    def run(self, frame: bytes) -> progtest.TestRunResult:
        """The program's verdict on `frame` arriving on the ingress port (call inside
        in_netns(self.netns) for many frames: entering the namespace costs more than a run)."""
        return progtest.prog_test_run(self.dp.prog_fd, frame, ingress_ifindex=INGRESS)


@contextmanager
def fuzz_switch(dp, netns: str) -> Iterator[FuzzSwitch]:
    """FuzzSwitch in a namespace made here and deleted on the way out, whatever happens."""
    subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True)
    sw = FuzzSwitch(dp, netns)
    try:
        sw.program()
        yield sw
    finally:
        try:
            sw.unprogram()
        finally:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)


MIN_FRAME = 14       # BPF_PROG_TEST_RUN refuses shorter XDP input, as no NIC delivers it


def deliverable(frame: bytes) -> bool:
    """Whether a NIC could hand this frame to an XDP program at all."""
    return len(frame) >= MIN_FRAME

