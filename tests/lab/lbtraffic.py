"""Real frames from a lab's host namespaces for the load-balancing tests: raw AF_PACKET
sockets on a host NIC, frames built by hand (any 5-tuple, ToS, RoCEv2 BTH), optional
pacing. The switches see them exactly like traffic from the host's own stack."""
from __future__ import annotations

import socket
import struct
import time
from ipaddress import IPv4Interface

from dataplane.kernel.netns import in_netns


def _csum(data: bytes) -> int:
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(smac: str, dmac: str, src: str, dst: str, sport: int, dport: int, *, size: int = 100,
          tos: int = 0, ttl: int = 64, bth_opcode: int | None = None, qp: int = 0x11, psn: int = 0) -> bytes:
    """Ethernet/IPv4/UDP frame of `size` bytes (>= 42 + 12 with a BTH)."""
    payload_len = max(size - 42, 0)
    payload = bytearray(payload_len)
    if bth_opcode is not None:
        payload[:12] = struct.pack("!BBHII", bth_opcode, 0x40, 0xFFFF, qp & 0xFFFFFF, psn & 0xFFFFFF)
    udp = struct.pack("!HHHH", sport, dport, 8 + payload_len, 0) + bytes(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, tos, 20 + len(udp), 0, 0, ttl, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    eth = bytes.fromhex(dmac.replace(":", "")) + bytes.fromhex(smac.replace(":", "")) + b"\x08\x00"
    return eth + ip + udp


class HostPort:
    """A raw socket on one host NIC, with the addresses a frame from it needs."""

    def __init__(self, spec, host: str, nic_index: int = 0):
        node = spec.node(host)
        nic = spec.host_nics[host][nic_index]
        self.ifname = nic.ports[0]
        iface = node.interface(self.ifname)
        self.ip = str(IPv4Interface(nic.address).ip)
        self.mac = iface.mac
        self.gw_mac = iface.peer_mac            # the leaf port's MAC
        self.switch, self.switch_port = iface.peer.split(":", 1)
        with in_netns(node.netns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            self.sock.bind((self.ifname, 0))
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)

    def frame(self, dst: str, sport: int, dport: int, **kw) -> bytes:
        return frame(self.mac, self.gw_mac, self.ip, dst, sport, dport, **kw)

    def send(self, frames, *, rate_bps: float | None = None, duration_s: float | None = None) -> tuple[int, float]:
        """Send frames (an iterable, cycled when duration_s is given) paced at rate_bps
        (None = as fast as possible, without catch-up bursts). Returns (frames, seconds)."""
        frames = list(frames)
        sent, t0 = 0, time.monotonic()
        next_t = t0
        i = 0
        while True:
            if duration_s is None:
                if i >= len(frames):
                    break
            elif time.monotonic() - t0 >= duration_s:
                break
            f = frames[i % len(frames)]
            if rate_bps:
                now = time.monotonic()
                if now < next_t:
                    while time.monotonic() < next_t:
                        pass
                next_t = max(next_t + len(f) * 8 / rate_bps, now)
            try:
                self.sock.send(f)
                sent += 1
            except BlockingIOError:
                pass
            i += 1
        return sent, time.monotonic() - t0

    def close(self):
        self.sock.close()


def member_packets(fabric, switch: str, dst: str) -> dict[str, int]:
    """Packets sent so far by each member of the switch's group routing dst."""
    _, group = fabric.group_of(switch, dst)
    return {m["interface"]: m["packets"] for m in group["members"]}


def delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}
