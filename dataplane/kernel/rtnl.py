"""Route-netlink requests packed by hand and sent in batches: many requests per sendmsg,
their acks read back together, on one socket per namespace.

Deploy makes thousands of links, addresses, routes and XDP attachments. One pyroute2 round
trip each costs more in Python (request building, encoding, parsing the answer) than the
kernel spends on the request, so deploy packs the few message kinds it needs with struct
and lets the kernel work through a whole batch per system call. A failed request is
reported by what it was for (the label given with it), with the kernel's own message.
"""
from __future__ import annotations

import os
import socket
import struct
from ipaddress import IPv4Address, IPv4Interface, IPv4Network

from dataplane.closing import Closing
from dataplane.kernel.netns import in_netns

NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_EXT_ACK = 11
NETLINK_CAP_ACK = 10

NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
NLMSGERR_ATTR_MSG = 1
NLA_F_NESTED = 0x8000

RTM_NEWLINK, RTM_SETLINK, RTM_NEWADDR, RTM_NEWROUTE, RTM_NEWRULE = 16, 19, 20, 24, 32
IFF_UP = 0x1

IFLA_ADDRESS, IFLA_IFNAME, IFLA_LINKINFO, IFLA_NET_NS_FD, IFLA_XDP = 1, 3, 18, 28, 43
IFLA_NUM_TX_QUEUES, IFLA_NUM_RX_QUEUES = 31, 32
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
VETH_INFO_PEER = 1
IFLA_XDP_FD, IFLA_XDP_FLAGS, IFLA_XDP_EXPECTED_FD = 1, 3, 8
XDP_FLAGS_REPLACE = 1 << 4

IFA_ADDRESS, IFA_LOCAL, IFA_FLAGS = 1, 2, 8
IFA_F_NOPREFIXROUTE = 0x200

RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_MULTIPATH, RTA_TABLE = 1, 4, 5, 9, 15
RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST = 3, 0, 1
RTNH_F_ONLINK = 4

FRA_SRC, FRA_PRIORITY, FRA_TABLE = 2, 6, 15
FR_ACT_TO_TBL = 1

# Requests per sendmsg: the acks of one batch (errors echo the request) must fit the
# receive buffer, and a batch is what one system call asks of the kernel.
BATCH = 64
RECV_BUFFER = 64 << 10
_ADD = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL


class NetlinkError(RuntimeError):
    """A request the kernel refused: label (what it was for), errno, the kernel's text and
    the request's key (what the caller tagged it with)."""

    def __init__(self, label: str, code: int, text: str = "", key=None):
        self.label, self.code, self.text, self.key = label, code, text, key
        reason = os.strerror(code) + (f" ({text})" if text else "")
        super().__init__(f"{label}: {reason}")


# ------------------------------------------------------------------ encoding
def _attr(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("=HH", size, kind) + payload + b"\0" * (-size % 4)


def _nested(kind: int, *attrs: bytes) -> bytes:
    return _attr(kind | NLA_F_NESTED, b"".join(attrs))


def _u32(kind: int, value: int) -> bytes:
    return _attr(kind, struct.pack("=I", value & 0xFFFFFFFF))


def _name(kind: int, text: str) -> bytes:
    return _attr(kind, text.encode() + b"\0")


def _mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def _ip(text: str) -> bytes:
    return IPv4Address(text).packed


def _ifinfo(index: int = 0, flags: int = 0, change: int = 0) -> bytes:
    return struct.pack("=BxHiII", socket.AF_UNSPEC, 0, index, flags, change)


class Request:
    """One request: message type, flags, body (after the netlink header), a label saying
    what it is for and an optional key handed back with its error."""
    __slots__ = ("kind", "flags", "body", "label", "key")

    def __init__(self, kind: int, flags: int, body: bytes, label: str, key=None):
        self.kind, self.flags, self.body, self.label, self.key = kind, flags, body, label, key


def veth(name: str, index: int, mac: str, ns_fd: int, peer_name: str, peer_index: int,
         peer_mac: str, peer_ns_fd: int, label: str = "") -> Request:
    """A veth pair with both ends named, numbered and placed in their namespaces at once.
    Both come up later (link_up): the kernel opens neither end before both exist.

    One queue each way, said explicitly: without the attributes veth allocates a queue per
    possible CPU and then shrinks to one in use, and each shrink of a registered device
    waits for an RCU grace period under the global rtnl lock (most of a veth's cost)."""
    queues = _u32(IFLA_NUM_TX_QUEUES, 1) + _u32(IFLA_NUM_RX_QUEUES, 1)
    peer = _ifinfo(peer_index) + _name(IFLA_IFNAME, peer_name) + \
        _u32(IFLA_NET_NS_FD, peer_ns_fd) + _attr(IFLA_ADDRESS, _mac(peer_mac)) + queues
    body = _ifinfo(index) + _name(IFLA_IFNAME, name) + _u32(IFLA_NET_NS_FD, ns_fd) + \
        _attr(IFLA_ADDRESS, _mac(mac)) + queues + \
        _nested(IFLA_LINKINFO, _name(IFLA_INFO_KIND, "veth"),
                _nested(IFLA_INFO_DATA, _attr(VETH_INFO_PEER, peer)))
    return Request(RTM_NEWLINK, _ADD, body, label or f"veth {name} - {peer_name}")


def link_up(index: int, label: str = "") -> Request:
    return Request(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, _ifinfo(index, IFF_UP, IFF_UP),
                   label or f"link {index} up")


def xdp(index: int, prog_fd: int, flags: int, label: str = "", *, expected_fd: int | None = None) -> Request:
    """Attach prog_fd (-1: detach) to ifindex in the socket's namespace (key: the ifindex).
    expected_fd: only if that program is the one attached now (else EEXIST)."""
    attrs = [struct.pack("=HHi", 8, IFLA_XDP_FD, prog_fd)]
    if expected_fd is not None:
        flags |= XDP_FLAGS_REPLACE
        attrs.append(struct.pack("=HHi", 8, IFLA_XDP_EXPECTED_FD, expected_fd))
    body = _ifinfo(index) + _nested(IFLA_XDP, *attrs, _u32(IFLA_XDP_FLAGS, flags))
    return Request(RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK, body, label or f"XDP on ifindex {index}", index)


def address(index: int, cidr: str, flags: int = 0, label: str = "") -> Request:
    addr = IPv4Interface(cidr)
    body = struct.pack("=BBBBI", socket.AF_INET, addr.network.prefixlen, flags & 0xFF,
                       RT_SCOPE_UNIVERSE, index) + \
        _attr(IFA_LOCAL, addr.ip.packed) + _attr(IFA_ADDRESS, addr.ip.packed) + _u32(IFA_FLAGS, flags)
    return Request(RTM_NEWADDR, _ADD, body, label or f"address {cidr} on ifindex {index}")


def route(dst: str, hops: list[tuple[str, int]], *, table: int = 254, onlink: bool = True,
          label: str = "") -> Request:
    """dst via gateway/oif hops (several: one multipath route, equal weights)."""
    net = IPv4Network(dst)
    hop_flags = RTNH_F_ONLINK if onlink else 0
    single = len(hops) == 1
    head = struct.pack("=BBBBBBBBI", socket.AF_INET, net.prefixlen, 0, 0,
                       table if table < 256 else 0, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST,
                       hop_flags if single else 0)
    attrs = _u32(RTA_TABLE, table)
    if net.prefixlen:
        attrs += _attr(RTA_DST, net.network_address.packed)
    if single:
        gateway, oif = hops[0]
        attrs += _attr(RTA_GATEWAY, _ip(gateway)) + _u32(RTA_OIF, oif)
    else:
        nexthops = b""
        for gateway, oif in hops:
            gw = _attr(RTA_GATEWAY, _ip(gateway))
            nexthops += struct.pack("=HBBi", 8 + len(gw), hop_flags, 0, oif) + gw
        attrs += _attr(RTA_MULTIPATH, nexthops)
    return Request(RTM_NEWROUTE, _ADD, head + attrs, label or f"route {dst} table {table}")


def rule(src: str, table: int, priority: int, label: str = "") -> Request:
    """from src/32 lookup table, at priority."""
    head = struct.pack("=BBBBBBBBI", socket.AF_INET, 0, 32, 0, table if table < 256 else 0,
                       0, 0, FR_ACT_TO_TBL, 0)
    body = head + _attr(FRA_SRC, _ip(src)) + _u32(FRA_TABLE, table) + _u32(FRA_PRIORITY, priority)
    return Request(RTM_NEWRULE, _ADD, body, label or f"rule from {src} table {table}")


# ------------------------------------------------------------------ sending
class Socket(Closing):
    """A NETLINK_ROUTE socket opened in a namespace (None: the caller's). It stays in that
    namespace whatever thread uses it later."""

    def __init__(self, netns: str | None = None):
        with in_netns(netns):
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                      NETLINK_ROUTE)
        try:
            self.sock.bind((0, 0))
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            self.sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
            self.sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)  # errors need not echo the request
        except BaseException:
            self.sock.close()
            raise
        self.seq = 0
        # one receive buffer for the socket's life: a fresh large bytes object per recv
        # is an mmap/munmap pair, and each munmap a TLB shootdown on every CPU
        self.buffer = bytearray(RECV_BUFFER)

    def close(self) -> None:
        self.sock.close()

    def run(self, requests, *, keep_going: bool = False) -> list[NetlinkError]:
        """Send every request, BATCH per system call, in order. Stops at the first batch
        with a refused request and raises its first error; keep_going: sends all and
        returns the errors instead."""
        errors: list[NetlinkError] = []
        batch: list[Request] = []
        for request in requests:
            batch.append(request)
            if len(batch) == BATCH:
                errors += self._send(batch)
                batch = []
                if errors and not keep_going:
                    raise errors[0]
        if batch:
            errors += self._send(batch)
        if errors and not keep_going:
            raise errors[0]
        return errors

    def _send(self, batch: list[Request]) -> list[NetlinkError]:
        first = self.seq + 1
        chunks = []
        for request in batch:
            self.seq += 1
            chunks.append(struct.pack("=IHHII", 16 + len(request.body), request.kind,
                                      request.flags, self.seq, 0) + request.body)
        self.sock.sendall(b"".join(chunks))
        return self._acks(batch, first)

    def _acks(self, batch: list[Request], first: int) -> list[NetlinkError]:
        pending = set(range(first, first + len(batch)))
        errors = []
        while pending:
            size = self.sock.recv_into(self.buffer)
            data = memoryview(self.buffer)[:size]
            offset = 0
            while offset + 16 <= size:
                length, kind, flags, seq, _ = struct.unpack_from("=IHHII", data, offset)
                if length < 16:
                    break
                if kind == NLMSG_ERROR and seq in pending:
                    pending.discard(seq)
                    code = -struct.unpack_from("=i", data, offset + 16)[0]
                    if code:
                        text = _ext_ack_text(bytes(data[offset:offset + length]))
                        request = batch[seq - first]
                        errors.append(NetlinkError(request.label, code, text, request.key))
                offset += (length + 3) & ~3
        return errors


def _ext_ack_text(message: bytes) -> str:
    """The kernel's NLMSGERR_ATTR_MSG text, if it sent one (NETLINK_EXT_ACK)."""
    _, _, flags, _, _ = struct.unpack_from("=IHHII", message, 0)
    # header, error code, then the echoed request's header (capped: NETLINK_CAP_ACK)
    offset = 16 + 4 + 16
    if not flags & 0x200:       # NLM_F_ACK_TLVS
        return ""
    while offset + 4 <= len(message):
        size, kind = struct.unpack_from("=HH", message, offset)
        if size < 4:
            break
        if kind & 0x3FFF == NLMSGERR_ATTR_MSG:
            return message[offset + 4:offset + size].rstrip(b"\0").decode(errors="replace")
        offset += (size + 3) & ~3
    return ""


def run_in(netns: str | None, requests, *, keep_going: bool = False) -> list[NetlinkError]:
    """Send requests on a fresh socket in netns (see Socket.run)."""
    with Socket(netns) as sock:
        return sock.run(requests, keep_going=keep_going)

