"""RoCEv2 frames: building (scapy, once per template), fast patching, parsing, ICRC.

Wire format of a railab data frame::

    Ethernet / IPv4 (DSCP, ECN = ECT(0)) / UDP dport 4791 / BTH (12 B)
      [/ RETH (16 B), RDMA WRITE first and only]  / railab header (48 B) / filler
      / pad (0-3 B, BTH padcount) / ICRC (4 B)

ACK frames carry BTH / AETH, CNP frames BTH (opcode 0x81, BECN set) / 16 reserved bytes.

ICRC (IBTA spec, Annex A17 RoCEv2): CRC-32 (the Ethernet/zlib polynomial and
conventions) over 8 bytes of 0xff (the absent LRH), the IP header with TOS (DSCP+ECN),
TTL and header checksum set to all ones (IPv6: traffic class, flow label, hop limit),
the UDP header with the checksum set to all ones, the BTH with its resv8a byte
(FECN, BECN, 6 reserved bits) set to all ones, and everything after the BTH up to the
ICRC. It is put on the wire least significant byte first (what Linux rxe, ConnectX
NICs and scapy do): the wire bytes are ``crc.to_bytes(4, "little")``.

Timestamps in the railab header are ``time.monotonic_ns()`` (CLOCK_MONOTONIC): sender
and receiver must run on the same machine (network namespaces share that clock).
"""
from __future__ import annotations

import struct
import time
import zlib
from dataclasses import dataclass
from enum import IntEnum

from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH, CNPPadding  # noqa: F401  (re-exported)
from scapy.fields import IntField, LongField, XIntField, XLongField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

from dataplane.xdp.abi import ROCE_V2_UDP_PORT

ROCE_PORT = ROCE_V2_UDP_PORT       # the one RoCEv2 port constant, mirrored from bpf/ by dataplane.xdp.abi
PSN_MASK = 0xFFFFFF
PSN_MOD = 1 << 24

ETH_HLEN = 14
IPV4_HLEN = 20
UDP_HLEN = 8
BTH_LEN = 12
RETH_LEN = 16
AETH_LEN = 4
ICRC_LEN = 4
CNP_PAD_LEN = 16

ECN_NOT_ECT = 0
ECN_ECT1 = 1
ECN_ECT0 = 2
ECN_CE = 3

DSCP_DATA = 26        # a common RoCE data DSCP (AF31)
DSCP_CNP = 48         # a common CNP DSCP (CS6)

AETH_ACK = 0x1F       # ACK, credit count "invalid" (unlimited)
AETH_NAK_PSN_SEQ = 0x60

MTUS = (256, 512, 1024, 2048, 4096)


class Opcode(IntEnum):
    """RC opcodes railab uses (BTH opcode byte), plus CNP."""

    SEND_FIRST = 0x00
    SEND_MIDDLE = 0x01
    SEND_LAST = 0x02
    SEND_ONLY = 0x04
    WRITE_FIRST = 0x06
    WRITE_MIDDLE = 0x07
    WRITE_LAST = 0x08
    WRITE_ONLY = 0x0A
    ACK = 0x11
    CNP = 0x81

    @property
    def has_reth(self) -> bool:
        return self in (Opcode.WRITE_FIRST, Opcode.WRITE_ONLY)

    @property
    def is_data(self) -> bool:
        return self <= Opcode.WRITE_ONLY


DATA_OPCODES = frozenset(int(o) for o in Opcode if o.is_data)

#            first                middle               last                only
_SEQ_OPS = {
    "send": (Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST, Opcode.SEND_ONLY),
    "write": (Opcode.WRITE_FIRST, Opcode.WRITE_MIDDLE, Opcode.WRITE_LAST, Opcode.WRITE_ONLY),
}


class RETH(Packet):
    """RDMA Extended Transport Header (RDMA WRITE first/only)."""

    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dmalen", 0)]


bind_layers(BTH, RETH, opcode=int(Opcode.WRITE_FIRST))
bind_layers(BTH, RETH, opcode=int(Opcode.WRITE_ONLY))


# --- railab payload header ------------------------------------------------------------

RAILAB_MAGIC = b"RL"
RAILAB_VERSION = 1
# magic, version, flags, flow_id, src_qp, msg_id, seq, msg_idx, msg_pkts, msg_bytes,
# ts_ns (send time of this packet), msg_start_ns (send time of the message's 1st packet)
_RL = struct.Struct("!2sBBIIIIIIIQQ")
RAILAB_HLEN = _RL.size  # 48


class RailabHdr(Packet):
    """Scapy view of the railab header (for show()/pcaps; the fast path uses struct)."""

    name = "Railab"
    fields_desc = [
        XIntField("magic_ver_flags", 0x524C0100),
        IntField("flow_id", 0),
        IntField("src_qp", 0),
        IntField("msg_id", 0),
        IntField("seq", 0),
        IntField("msg_idx", 0),
        IntField("msg_pkts", 1),
        IntField("msg_bytes", 0),
        LongField("ts_ns", 0),
        LongField("msg_start_ns", 0),
    ]


@dataclass(frozen=True)
class RailabHeader:
    flow_id: int
    src_qp: int
    msg_id: int
    seq: int          # per-flow packet sequence number, 0-based, never wraps in practice
    msg_idx: int      # index of this packet inside its message
    msg_pkts: int     # packets in the message
    msg_bytes: int
    ts_ns: int
    msg_start_ns: int

    def pack(self) -> bytes:
        return _RL.pack(RAILAB_MAGIC, RAILAB_VERSION, 0, self.flow_id, self.src_qp,
                        self.msg_id, self.seq, self.msg_idx, self.msg_pkts,
                        self.msg_bytes, self.ts_ns, self.msg_start_ns)

    @classmethod
    def unpack_from(cls, buf, offset: int = 0) -> "RailabHeader | None":
        if len(buf) - offset < RAILAB_HLEN:
            return None
        f = _RL.unpack_from(buf, offset)
        if f[0] != RAILAB_MAGIC or f[1] != RAILAB_VERSION:
            return None
        return cls(*f[3:])


def now_ns() -> int:
    """The one clock railab timestamps use (CLOCK_MONOTONIC)."""
    return time.monotonic_ns()


# --- ICRC -------------------------------------------------------------------------------

def _l3_offset(frame) -> tuple[int, int]:
    """(offset of the IP header, ethertype), skipping one 802.1Q tag."""
    et = (frame[12] << 8) | frame[13]
    off = ETH_HLEN
    if et == 0x8100:
        et = (frame[16] << 8) | frame[17]
        off += 4
    return off, et


def icrc_masked_prefix(frame, l3: int | None = None) -> tuple[bytes, int]:
    """The masked bytes that start the ICRC input, up to and including the first 8 bytes
    of the BTH (everything variant lives there), and the offset in `frame` where the
    rest of the input (BTH byte 8 onward, up to the ICRC) starts."""
    if l3 is None:
        l3, et = _l3_offset(frame)
    else:
        et = 0x0800 if frame[l3] >> 4 == 4 else 0x86DD
    if et == 0x0800:
        ihl = (frame[l3] & 0x0F) * 4
        ip = bytearray(frame[l3:l3 + ihl])
        ip[1] = 0xFF            # TOS (DSCP + ECN)
        ip[8] = 0xFF            # TTL
        ip[10] = ip[11] = 0xFF  # header checksum
        udp_off = l3 + ihl
    elif et == 0x86DD:
        ip = bytearray(frame[l3:l3 + 40])
        ip[0] |= 0x0F           # traffic class (high nibble)
        ip[1] = ip[2] = ip[3] = 0xFF  # traffic class (low nibble) + flow label
        ip[7] = 0xFF            # hop limit
        udp_off = l3 + 40
    else:
        raise ValueError(f"not an IP frame (ethertype 0x{et:04x})")
    udp = bytearray(frame[udp_off:udp_off + UDP_HLEN])
    udp[6] = udp[7] = 0xFF
    bth_off = udp_off + UDP_HLEN
    bth = bytearray(frame[bth_off:bth_off + 8])
    bth[4] = 0xFF               # resv8a: FECN, BECN, reserved
    return b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth), bth_off + 8


def compute_icrc(frame) -> int:
    """ICRC of a RoCEv2 frame (Ethernet onwards, *including* its 4-byte ICRC slot,
    whose content is ignored). Returns the CRC value; the wire bytes are
    ``value.to_bytes(4, "little")``."""
    prefix, rest = icrc_masked_prefix(frame)
    return zlib.crc32(memoryview(frame)[rest:len(frame) - ICRC_LEN], zlib.crc32(prefix))


def icrc_bytes(frame) -> bytes:
    """The 4 ICRC bytes as they go on the wire."""
    return compute_icrc(frame).to_bytes(4, "little")


def set_icrc(frame: bytearray) -> bytearray:
    """Write the correct ICRC into the last 4 bytes of `frame` (in place)."""
    frame[-ICRC_LEN:] = icrc_bytes(frame)
    return frame


def verify_icrc(frame) -> bool:
    """True when the last 4 bytes of `frame` are its correct ICRC."""
    try:
        return bytes(frame[-ICRC_LEN:]) == icrc_bytes(frame)
    except (ValueError, IndexError):
        return False


# --- building with scapy ------------------------------------------------------------------

def segment_message(size: int, mtu: int = 1024) -> list[int]:
    """IB payload length of each packet of a `size`-byte message (>= RAILAB_HLEN bytes
    each: every packet carries the railab header; smaller messages grow to it)."""
    if mtu < 2 * RAILAB_HLEN:
        raise ValueError(f"mtu {mtu} too small")
    size = max(int(size), RAILAB_HLEN)
    n = -(-size // mtu)
    chunks = [mtu] * (n - 1) + [size - (n - 1) * mtu]
    if n > 1 and chunks[-1] < RAILAB_HLEN:
        short = RAILAB_HLEN - chunks[-1]
        chunks[-2] -= short
        chunks[-1] = RAILAB_HLEN
    return chunks


def message_opcodes(npkts: int, kind: str = "send") -> list[Opcode]:
    """first/middle.../last opcodes, or [only], for an `npkts`-packet message."""
    first, middle, last, only = _SEQ_OPS[kind]
    if npkts == 1:
        return [only]
    return [first] + [middle] * (npkts - 2) + [last]


def build_packet(*, src_mac: str = "02:00:00:00:00:01", dst_mac: str = "02:00:00:00:00:02",
                 src_ip: str, dst_ip: str, sport: int = 49152, dport: int = ROCE_PORT,
                 dscp: int = DSCP_DATA, ecn: int = ECN_ECT0, ttl: int = 64,
                 opcode: int = Opcode.SEND_ONLY, dqpn: int = 1, psn: int = 0,
                 ackreq: bool = False, solicited: bool = False, migreq: bool = True,
                 pkey: int = 0xFFFF, fecn: bool = False, becn: bool = False,
                 payload: bytes = b"", reth: tuple[int, int, int] | None = None,
                 aeth: tuple[int, int] | None = None) -> Packet:
    """A scapy RoCEv2 packet with a correct ICRC (computed by us, checked by tests
    against scapy's own computation). `payload` is the IB payload before padding."""
    pad = (-len(payload)) % 4
    bth = BTH(opcode=int(opcode), solicited=int(solicited), migreq=int(migreq),
              padcount=pad, version=0, pkey=pkey, fecn=int(fecn), becn=int(becn),
              dqpn=dqpn & PSN_MASK, ackreq=int(ackreq), psn=psn & PSN_MASK, icrc=0)
    pkt = (Ether(src=src_mac, dst=dst_mac)
           / IP(tos=((dscp & 0x3F) << 2) | (ecn & 3), ttl=ttl, flags="DF", id=0,
                src=src_ip, dst=dst_ip)
           / UDP(sport=sport, dport=dport, chksum=0)
           / bth)
    if reth is not None:
        pkt = pkt / RETH(va=reth[0], rkey=reth[1], dmalen=reth[2])
    if aeth is not None:
        pkt = pkt / AETH(syndrome=aeth[0], msn=aeth[1])
    if payload or pad:
        pkt = pkt / Raw(payload + b"\x00" * pad)
    frame = bytearray(raw(pkt))
    set_icrc(frame)
    return Ether(bytes(frame))


def build_ack(*, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int,
              dqpn: int, psn: int, msn: int, syndrome: int = AETH_ACK,
              dscp: int = DSCP_DATA, ecn: int = ECN_NOT_ECT) -> bytes:
    return raw(build_packet(src_mac=src_mac, dst_mac=dst_mac, src_ip=src_ip,
                            dst_ip=dst_ip, sport=sport, dscp=dscp, ecn=ecn,
                            opcode=Opcode.ACK, dqpn=dqpn, psn=psn, migreq=True,
                            aeth=(syndrome, msn & PSN_MASK)))


def build_cnp(*, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int,
              dqpn: int, dscp: int = DSCP_CNP, ecn: int = ECN_NOT_ECT) -> bytes:
    return raw(build_packet(src_mac=src_mac, dst_mac=dst_mac, src_ip=src_ip,
                            dst_ip=dst_ip, sport=sport, dscp=dscp, ecn=ecn,
                            opcode=Opcode.CNP, dqpn=dqpn, psn=0, migreq=False,
                            becn=True, payload=b"\x00" * CNP_PAD_LEN))


class AckTemplate:
    """ACK/NAK frames of one QP, built once with scapy; ``frame()`` patches the BTH PSN and
    the AETH (syndrome, MSN) and recomputes the ICRC (what a responder sends per ACK)."""

    def __init__(self, **addr):
        self.buf = bytearray(build_ack(**addr, psn=0, msn=0))
        prefix, rest = icrc_masked_prefix(self.buf)
        self.bth_off = rest - 8
        self._prefix_crc = zlib.crc32(prefix)

    def frame(self, psn: int, syndrome: int = AETH_ACK, msn: int = 0) -> bytes:
        b, o = self.buf, self.bth_off
        struct.pack_into("!II", b, o + 8, psn & PSN_MASK,
                         ((syndrome & 0xFF) << 24) | (msn & PSN_MASK))
        crc = zlib.crc32(memoryview(b)[o + 8:len(b) - ICRC_LEN], self._prefix_crc)
        struct.pack_into("<I", b, len(b) - ICRC_LEN, crc)
        return bytes(b)


# --- fast per-flow frame templates ----------------------------------------------------------

class FrameTemplate:
    """One prebuilt frame (built once with scapy) for one (opcode, payload length) of a
    flow. `fill()` patches PSN, ack-request, railab header fields and recomputes the ICRC
    in place: the masked ICRC prefix (LRH+IP+UDP+BTH[0:8]) is constant per template, so
    per packet only ``zlib.crc32`` over BTH[8:] .. end (C speed) runs."""

    __slots__ = ("buf", "view", "bth_off", "hdr_off", "_prefix_crc", "length", "opcode")

    def __init__(self, *, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str,
                 sport: int, dqpn: int, opcode: int, payload_len: int,
                 dscp: int = DSCP_DATA, ecn: int = ECN_ECT0, rkey: int = 0,
                 dmalen: int = 0, filler: int = 0x5A):
        if payload_len < RAILAB_HLEN:
            raise ValueError(f"payload_len {payload_len} < railab header {RAILAB_HLEN}")
        op = Opcode(opcode)
        reth = (0, rkey, dmalen) if op.has_reth else None
        hdr = RailabHeader(0, 0, 0, 0, 0, 1, 0, 0, 0).pack()
        payload = hdr + bytes([filler]) * (payload_len - RAILAB_HLEN)
        pkt = build_packet(src_mac=src_mac, dst_mac=dst_mac, src_ip=src_ip, dst_ip=dst_ip,
                           sport=sport, dscp=dscp, ecn=ecn, opcode=op, dqpn=dqpn,
                           payload=payload, reth=reth)
        self.buf = bytearray(raw(pkt))
        self.view = memoryview(self.buf)
        self.length = len(self.buf)
        self.opcode = op
        l3, _ = _l3_offset(self.buf)
        prefix, rest = icrc_masked_prefix(self.buf, l3)
        self.bth_off = rest - 8
        self.hdr_off = self.bth_off + BTH_LEN + (RETH_LEN if op.has_reth else 0)
        self._prefix_crc = zlib.crc32(prefix)

    def set_dmalen(self, dmalen: int) -> None:
        if self.opcode.has_reth:
            struct.pack_into("!I", self.buf, self.bth_off + BTH_LEN + 12, dmalen)

    def fill(self, psn: int, ackreq: bool, flow_id: int, src_qp: int, msg_id: int,
             seq: int, msg_idx: int, msg_pkts: int, msg_bytes: int, ts_ns: int,
             msg_start_ns: int) -> memoryview:
        b = self.buf
        o = self.bth_off
        struct.pack_into("!I", b, o + 8, (psn & PSN_MASK) | (0x80000000 if ackreq else 0))
        _RL.pack_into(b, self.hdr_off, RAILAB_MAGIC, RAILAB_VERSION, 0, flow_id, src_qp,
                      msg_id, seq, msg_idx, msg_pkts, msg_bytes, ts_ns, msg_start_ns)
        crc = zlib.crc32(self.view[o + 8:self.length - ICRC_LEN], self._prefix_crc)
        struct.pack_into("<I", b, self.length - ICRC_LEN, crc)
        return self.view


def frame_len(payload_len: int, opcode: int = Opcode.SEND_ONLY) -> int:
    """Ethernet frame length (no FCS) of a data packet with this IB payload length."""
    reth = RETH_LEN if Opcode(opcode).has_reth else 0
    return (ETH_HLEN + IPV4_HLEN + UDP_HLEN + BTH_LEN + reth + payload_len
            + (-payload_len) % 4 + ICRC_LEN)


# --- parsing ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RocePacket:
    """A parsed RoCEv2 frame (IPv4). `hdr` is the railab header of data packets."""

    length: int              # frame length in bytes
    src_mac: bytes
    dst_mac: bytes
    src_ip: str
    dst_ip: str
    dscp: int
    ecn: int
    sport: int
    dport: int
    opcode: int
    solicited: bool
    padcount: int
    pkey: int
    fecn: bool
    becn: bool
    dqpn: int
    ackreq: bool
    psn: int
    payload_len: int         # IB payload length (without pad and ICRC)
    aeth: tuple[int, int] | None = None      # (syndrome, msn) of ACKs
    reth: tuple[int, int, int] | None = None  # (va, rkey, dmalen)
    hdr: RailabHeader | None = None
    icrc_ok: bool | None = None              # None: not checked

    @property
    def is_data(self) -> bool:
        return self.opcode in DATA_OPCODES

    @property
    def ce(self) -> bool:
        return self.ecn == ECN_CE


_IP4 = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")
_BTH = struct.Struct("!BBHII")


def _ip(b: bytes) -> str:
    return f"{b[0]}.{b[1]}.{b[2]}.{b[3]}"


def parse(frame, verify: bool = False) -> RocePacket | None:
    """Parse an Ethernet/IPv4/UDP:4791 RoCEv2 frame; None for anything else or a frame
    too short for its headers. With `verify`, icrc_ok tells whether the ICRC is right."""
    n = len(frame)
    if n < ETH_HLEN + IPV4_HLEN + UDP_HLEN + BTH_LEN + ICRC_LEN:
        return None
    l3, et = _l3_offset(frame)
    if et != 0x0800:
        return None
    vihl, tos, tot, _id, _frag, _ttl, proto, _ck, s, d = _IP4.unpack_from(frame, l3)
    if vihl >> 4 != 4 or proto != 17:
        return None
    u = l3 + (vihl & 0x0F) * 4
    sport, dport, ulen, _uck = _UDP.unpack_from(frame, u)
    if dport != ROCE_PORT:
        return None
    end = min(n, u + ulen)  # ignore Ethernet padding beyond the UDP datagram
    bo = u + UDP_HLEN
    if end - bo < BTH_LEN + ICRC_LEN:
        return None
    op, flags, pkey, w1, w2 = _BTH.unpack_from(frame, bo)
    pad = (flags >> 4) & 3
    off = bo + BTH_LEN
    aeth = reth = hdr = None
    if op == Opcode.ACK:
        if end - off < AETH_LEN + ICRC_LEN:
            return None
        a = struct.unpack_from("!I", frame, off)[0]
        aeth = (a >> 24, a & PSN_MASK)
        off += AETH_LEN
    elif op in (Opcode.WRITE_FIRST, Opcode.WRITE_ONLY):
        if end - off < RETH_LEN + ICRC_LEN:
            return None
        reth = struct.unpack_from("!QII", frame, off)
        off += RETH_LEN
    payload_len = end - ICRC_LEN - pad - off
    if payload_len < 0:
        return None
    if op in DATA_OPCODES:
        hdr = RailabHeader.unpack_from(frame[:end - ICRC_LEN - pad], off)
    icrc_ok = None
    if verify:
        icrc_ok = verify_icrc(frame[:end])
    return RocePacket(
        length=n, src_mac=bytes(frame[6:12]), dst_mac=bytes(frame[0:6]),
        src_ip=_ip(s), dst_ip=_ip(d), dscp=tos >> 2, ecn=tos & 3, sport=sport,
        dport=dport, opcode=op, solicited=bool(flags & 0x80), padcount=pad, pkey=pkey,
        fecn=bool(w1 & 0x80000000), becn=bool(w1 & 0x40000000), dqpn=w1 & PSN_MASK,
        ackreq=bool(w2 & 0x80000000), psn=w2 & PSN_MASK, payload_len=payload_len,
        aeth=aeth, reth=reth, hdr=hdr, icrc_ok=icrc_ok)


def mac_str(mac: bytes) -> str:
    return ":".join(f"{x:02x}" for x in mac)
