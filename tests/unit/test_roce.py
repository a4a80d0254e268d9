"""RoCEv2 packets: ICRC against independent computations and known-good vectors,
building, fast patching, segmentation, parsing."""
from __future__ import annotations

import struct
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.contrib.roce import BTH, AETH, cnp
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from dataplane.wire import roce
from dataplane.wire.roce import Opcode

# A CNP captured on a Mellanox ConnectX-4 Lx (hardware-computed ICRC 82 fd 00 2a);
# the same capture is in scapy's test suite (test/contrib/roce.uts).
CX4_CNP = bytes.fromhex("""
    e41d 2dab 2bc2 7cfe 9064 3b32 0800 45c2
    003c 718c 4000 4011 9161 0a00 1101 0a00
    1201 0000 12b7 0028 0000 8100 ffff 4000
    0118 0000 0000 0000 0000 0000 0000 0000
    0000 0000 0000 82fd 002a""")


def hand_icrc(frame: bytes) -> int:
    """Independent ICRC: mask by hand at fixed offsets (untagged IPv4, no options)."""
    b = bytearray(frame[14:-4])            # IP header .. end of payload
    b[1] = 0xFF                            # TOS
    b[8] = 0xFF                            # TTL
    b[10:12] = b"\xff\xff"                 # IP checksum
    b[20 + 6:20 + 8] = b"\xff\xff"         # UDP checksum
    b[28 + 4] = 0xFF                       # BTH resv8a (FECN, BECN, resv6)
    return zlib.crc32(b"\xff" * 8 + bytes(b))


def scapy_icrc(frame: bytes) -> bytes:
    """scapy's own ICRC computation (its BTH.compute_icrc) as wire bytes."""
    p = Ether(frame)
    p[BTH].icrc = None
    return raw(p)[-4:]


def test_cx4_hardware_vector():
    assert len(CX4_CNP) == 74
    assert roce.verify_icrc(CX4_CNP)
    assert roce.icrc_bytes(CX4_CNP) == bytes.fromhex("82fd002a")
    assert hand_icrc(CX4_CNP) == 0x2A00FD82
    p = roce.parse(CX4_CNP, verify=True)
    assert p.opcode == Opcode.CNP and p.becn and not p.fecn and p.dqpn == 0x118
    assert p.icrc_ok is True and p.ecn == roce.ECN_ECT0 and p.dscp == 0x30


def test_cx4_vector_bit_flip_detected():
    for pos in (20, 45, 50, 60):           # IP id, BTH pkey, dqpn, padding
        bad = bytearray(CX4_CNP)
        bad[pos] ^= 0x01
        assert not roce.verify_icrc(bytes(bad)), pos


def test_scapy_uc_vector():
    # scapy test suite vector: UC SEND_ONLY whose ICRC field reads 0x78f353f3
    pkt = (Ether(dst="24:8a:07:a8:fa:22", src="24:8a:07:a8:fa:22")
           / IP(version=4, ihl=5, tos=0x1, id=1144, flags="DF", frag=0, ttl=64,
                src="192.168.0.7", dst="192.168.0.7", len=64)
           / UDP(sport=49152, dport=4791, len=44)
           / BTH(opcode="UC_SEND_ONLY", migreq=1, padcount=2, pkey=0xFFFF, dqpn=211,
                 psn=13571856)
           / Raw(b"F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P\x00\x00"))
    frame = raw(pkt)
    assert struct.unpack("!I", frame[-4:])[0] == 0x78F353F3
    assert roce.verify_icrc(frame)
    assert roce.compute_icrc(frame) == hand_icrc(frame)


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(min_size=0, max_size=300), psn=st.integers(0, roce.PSN_MASK),
       dqpn=st.integers(0, roce.PSN_MASK), ecn=st.integers(0, 3),
       dscp=st.integers(0, 63), ttl=st.integers(1, 255),
       op=st.sampled_from([o for o in Opcode if o.is_data and not o.has_reth]))
def test_icrc_matches_independent_computations(payload, psn, dqpn, ecn, dscp, ttl, op):
    frame = raw(roce.build_packet(src_ip="10.0.0.1", dst_ip="10.0.1.2", sport=50001,
                                  opcode=op, dqpn=dqpn, psn=psn, ecn=ecn, dscp=dscp,
                                  ttl=ttl, payload=payload))
    assert roce.verify_icrc(frame)
    assert int.from_bytes(frame[-4:], "little") == hand_icrc(frame)
    assert frame[-4:] == scapy_icrc(frame)


def test_icrc_invariant_fields_masked():
    frame = raw(roce.build_packet(src_ip="10.0.0.1", dst_ip="10.0.0.2", payload=b"x" * 64,
                                  psn=77, dqpn=9))
    ref = roce.compute_icrc(frame)
    # variant fields: TOS/ECN (15), TTL (22), IP checksum (24-25), UDP checksum (40-41),
    # BTH resv8a with FECN/BECN (46): switches may rewrite them, ICRC must not change
    for pos, val in ((15, 0x6B), (15, 0x03), (22, 1), (24, 0x12), (25, 0x34),
                     (40, 0xAB), (41, 0xCD), (46, 0x80), (46, 0x40)):
        b = bytearray(frame)
        b[pos] = val
        assert roce.compute_icrc(bytes(b)) == ref, pos
    # invariant fields: addresses, ports, opcode, dqpn, PSN, payload
    for pos in (26, 30, 34, 36, 42, 49, 53, 60, len(frame) - 5):
        b = bytearray(frame)
        b[pos] ^= 0x10
        assert roce.compute_icrc(bytes(b)) != ref, pos


def test_build_packet_fields_and_ecn():
    p = roce.build_packet(src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=51000,
                          opcode=Opcode.SEND_FIRST, dqpn=0x123, psn=0xABCDEF,
                          ackreq=True, payload=b"\x01" * 49)
    assert p[IP].tos & 3 == roce.ECN_ECT0 and p[IP].tos >> 2 == roce.DSCP_DATA
    assert p[UDP].dport == 4791 and p[UDP].sport == 51000
    b = p[BTH]
    assert (b.opcode, b.dqpn, b.psn, b.ackreq, b.padcount, b.pkey) == \
        (0x00, 0x123, 0xABCDEF, 1, 3, 0xFFFF)
    frame = raw(p)
    assert len(frame) == roce.frame_len(49) == 14 + 20 + 8 + 12 + 52 + 4
    q = roce.parse(frame, verify=True)
    assert q.payload_len == 49 and q.padcount == 3 and q.icrc_ok


def test_ack_and_cnp_frames():
    kw = dict(src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01",
              src_ip="10.0.0.2", dst_ip="10.0.0.1", sport=4791)
    ack = roce.build_ack(**kw, dqpn=0x222, psn=0x10, msn=5)
    s = Ether(ack)
    assert s[BTH].opcode == 0x11 and s[AETH].syndrome == 0x1F and s[AETH].msn == 5
    p = roce.parse(ack, verify=True)
    assert p.icrc_ok and p.aeth == (0x1F, 5) and p.dqpn == 0x222 and p.psn == 0x10
    c = roce.build_cnp(**kw, dqpn=0x333)
    assert len(c) == 14 + 20 + 8 + 12 + 16 + 4
    p = roce.parse(c, verify=True)
    assert p.opcode == 0x81 and p.becn and p.dqpn == 0x333 and p.icrc_ok
    # same layout as scapy's cnp() helper
    ref = raw(Ether(src=kw["src_mac"], dst=kw["dst_mac"])
              / IP(src=kw["src_ip"], dst=kw["dst_ip"], tos=roce.DSCP_CNP << 2, flags="DF", id=0)
              / UDP(sport=4791, dport=4791, chksum=0) / cnp(0x333))
    assert c[:-4] == ref[:-4] and c[-4:] == scapy_icrc(c)


def test_write_reth_parsed_by_scapy_and_us():
    frame = raw(roce.build_packet(src_ip="10.0.0.1", dst_ip="10.0.0.2",
                                  opcode=Opcode.WRITE_FIRST, payload=b"z" * 64,
                                  reth=(0x1000, 0xBEEF, 4096)))
    s = Ether(frame)
    assert s[roce.RETH].rkey == 0xBEEF and s[roce.RETH].dmalen == 4096
    p = roce.parse(frame, verify=True)
    assert p.reth == (0x1000, 0xBEEF, 4096) and p.payload_len == 64 and p.icrc_ok


def test_segment_message_and_opcodes():
    assert roce.segment_message(10, 1024) == [48]
    assert roce.segment_message(1024, 1024) == [1024]
    assert roce.segment_message(3000, 1024) == [1024, 1024, 952]
    assert roce.segment_message(2050, 1024) == [1024, 978, 48]   # short tail rebalanced
    for size in (48, 1025, 4096, 100_000, 1 << 20):
        c = roce.segment_message(size, 1024)
        assert sum(c) == size and all(48 <= x <= 1024 for x in c)
    assert roce.message_opcodes(1, "send") == [Opcode.SEND_ONLY]
    assert roce.message_opcodes(2, "write") == [Opcode.WRITE_FIRST, Opcode.WRITE_LAST]
    assert roce.message_opcodes(4, "send") == [Opcode.SEND_FIRST, Opcode.SEND_MIDDLE,
                                               Opcode.SEND_MIDDLE, Opcode.SEND_LAST]


def test_template_fill_equals_scapy_build():
    kw = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
              src_ip="10.1.0.1", dst_ip="10.1.0.2", sport=50123, dqpn=0x456)
    t = roce.FrameTemplate(**kw, opcode=Opcode.SEND_MIDDLE, payload_len=1024)
    hdr = roce.RailabHeader(7, 0x99, 3, 12345, 2, 5, 5000, 111_222_333, 111_000_000)
    for psn in (0, 1, 0xFFFFFF, 0x1000000 + 5):
        got = bytes(t.fill(psn, True, hdr.flow_id, hdr.src_qp, hdr.msg_id, hdr.seq,
                           hdr.msg_idx, hdr.msg_pkts, hdr.msg_bytes, hdr.ts_ns,
                           hdr.msg_start_ns))
        want = raw(roce.build_packet(**kw, opcode=Opcode.SEND_MIDDLE, psn=psn & 0xFFFFFF,
                                     ackreq=True,
                                     payload=hdr.pack() + b"\x5a" * (1024 - 48)))
        assert got == want
        p = roce.parse(got, verify=True)
        assert p.icrc_ok and p.psn == psn & 0xFFFFFF and p.hdr == hdr


def test_parse_rejects_non_roce():
    assert roce.parse(raw(Ether() / IP() / UDP(dport=53) / Raw(b"x" * 40))) is None
    assert roce.parse(b"\x00" * 20) is None
    assert roce.parse(raw(Ether(type=0x86DD) / Raw(b"\x00" * 80))) is None
