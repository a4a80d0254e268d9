"""The emulated NIC's requester side and its selective-repeat responder
(bpf/nic/responder.c, selective.h), through BPF_PROG_TEST_RUN: ACKs, NAKs and CNPs for
our own QPs are booked in nic_reqs (what the send engine reads, through mmap) and
dropped; a selective-repeat responder keeps out-of-order packets, ACKs cumulatively and
NAKs each hole by its own PSN."""
from __future__ import annotations

import ctypes as ct
import mmap

import pytest

from dataplane.wire import roce

from .test_nic_responder import (FAR, NIC_IP, NIC_MAC, PSN0, REQ_IP, REQ_MAC, SRC_QP, Qp, assert_ack,
                                 run, stats)
from .test_nic_responder import nic  # noqa: F401  (the module's loaded responder, a fixture)

SLOT = 3


@pytest.fixture
def fresh(nic):  # noqa: F811
    nic.reset()
    nic.configure(mode="respond", cnp_interval_us=FAR)
    nic.add_requester(REQ_IP, SRC_QP, SLOT)
    yield nic
    nic.reset()


def ack(psn: int, syndrome: int = roce.AETH_ACK, dqpn: int = SRC_QP, becn: bool = False) -> bytes:
    """What a responder sends back to our requester (REQ_IP, SRC_QP)."""
    frame = bytearray(roce.build_ack(src_mac=NIC_MAC, dst_mac=REQ_MAC, src_ip=NIC_IP, dst_ip=REQ_IP,
                                     sport=roce.ROCE_PORT, dqpn=dqpn, psn=psn & roce.PSN_MASK,
                                     msn=0, syndrome=syndrome))
    if becn:
        frame[14 + 20 + 8 + 4] |= 0x40      # BTH resv8a: BECN
    return bytes(frame)


def cnp(dqpn: int = SRC_QP) -> bytes:
    return roce.build_cnp(src_mac=NIC_MAC, dst_mac=REQ_MAC, src_ip=NIC_IP, dst_ip=REQ_IP,
                          sport=roce.ROCE_PORT, dqpn=dqpn)


# ---------------------------------------------------------------- the requester side
def test_acks_naks_and_cnps_for_our_qp_are_booked_and_dropped(fresh):
    assert [run(fresh, f).verdict for f in (ack(PSN0 + 5), ack(PSN0 + 3), ack(PSN0 + 9, becn=True))] == ["drop"] * 3
    r = fresh.requester(SLOT)
    assert (r.acks, r.becns, r.flags) == (3, 1, 1)
    assert r.ack_psn == PSN0 + 9            # the older ACK (PSN0 + 3) did not move it back
    assert run(fresh, ack(PSN0 + 7, syndrome=roce.AETH_NAK_PSN_SEQ)).verdict == "drop"
    assert run(fresh, ack(PSN0 + 11, syndrome=roce.AETH_NAK_PSN_SEQ)).verdict == "drop"
    assert run(fresh, cnp()).verdict == "drop"
    r = fresh.requester(SLOT)
    assert (r.naks, list(r.nak_psn[:2]), r.cnps, r.ack_psn) == (2, [PSN0 + 7, PSN0 + 11], 1, PSN0 + 9)
    c = fresh.counters()
    assert (c["feedback"], c["feedback_unknown"], c["drop"], c["data"]) == (6, 0, 6, 0)


def test_an_ack_across_the_psn_wrap_is_newer(fresh):
    run(fresh, ack(roce.PSN_MASK - 1))
    run(fresh, ack(2))
    assert fresh.requester(SLOT).ack_psn == 2


def test_the_nak_ring_keeps_the_latest_sixteen(fresh):
    for i in range(20):
        run(fresh, ack(PSN0 + i, syndrome=roce.AETH_NAK_PSN_SEQ))
    r = fresh.requester(SLOT)
    assert r.naks == 20
    assert [r.nak_psn[n % 16] for n in range(4, 20)] == [PSN0 + n for n in range(4, 20)]


def test_feedback_for_a_qp_that_is_not_ours_passes(fresh):
    f = ack(PSN0, dqpn=SRC_QP + 1)
    res = run(fresh, f)
    assert res.verdict == "pass" and res.data == f
    assert run(fresh, cnp(dqpn=SRC_QP + 1)).verdict == "pass"
    c = fresh.counters()
    assert (c["feedback"], c["feedback_unknown"]) == (0, 2)
    assert fresh.requester(SLOT).acks == 0


def test_the_engine_sees_the_same_through_mmap(fresh):
    """The send engine maps nic_reqs and reads it without a system call."""
    from dataplane.nic.responder import NicReq
    run(fresh, ack(PSN0 + 42))
    run(fresh, cnp())
    size = fresh.max_reqs * ct.sizeof(NicReq)
    view = mmap.mmap(fresh.requesters_fd, (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE,
                     prot=mmap.PROT_READ)
    try:
        r = NicReq.from_buffer_copy(view, SLOT * ct.sizeof(NicReq))
    finally:
        view.close()
    assert (r.acks, r.ack_psn, r.cnps) == (1, PSN0 + 42, 1)


# ---------------------------------------------------------------- selective repeat
def test_selective_repeat_keeps_out_of_order_packets_and_acks_cumulatively(fresh):
    fresh.configure(mode="respond", selective=True, nak_delay_us=FAR, cnp_interval_us=FAR)
    qp = Qp()
    assert [run(fresh, qp.frame(s)).verdict for s in (0, 1, 3, 4)] == ["pass"] * 4
    st = stats(fresh, qp)
    assert (st["epsn"], st["discarded"], st["naks"]) == (PSN0 + 2, 0, 0)    # 3, 4 kept, no NAK yet
    # the hole filled: the expected PSN moves over the kept packets, one cumulative ACK
    assert_ack(run(fresh, qp.frame(2, ackreq=True)), qp, PSN0 + 4, msn=5)
    assert stats(fresh, qp)["epsn"] == PSN0 + 5
    assert_ack(run(fresh, qp.frame(3)), qp, PSN0 + 4, msn=5)                # a duplicate: ACK again


def test_selective_repeat_acks_a_request_that_came_beyond_a_hole_once_the_hole_fills(fresh):
    """The message's last packet (ack-requested) overtook the one before it: the packet that
    fills the hole carries no request, yet the ACK the requester asked for goes then (as
    QpResponder does), not after the requester's RTO. A hole below that fills first owes
    nothing yet."""
    from dataplane.traffic import transport
    fresh.configure(mode="respond", selective=True, ack_every=16, nak_delay_us=FAR, cnp_interval_us=FAR)
    py = transport.QpResponder(transport.TransportConfig(kind="selective-repeat", ack_every=16,
                                                         ack_delay_us=1e9, nak_delay_us=1e9), None)
    qp = Qp()
    for i, (s, ackreq) in enumerate([(0, False), (2, False), (4, True), (1, False), (3, False)]):
        res = run(fresh, qp.frame(s, ackreq=ackreq))
        want = py.on_data(s, ackreq, None, i)
        got = [] if res.verdict != "tx" else [("ack", roce.parse(res.data).psn - PSN0)]
        assert [(k, at) for k, at in want] == got, s
    assert got == [("ack", 4)]                      # 3 filled the last hole: ACK up to 4
    assert stats(fresh, qp)["acks"] == py.stats.acks == 1


def test_selective_repeat_naks_each_hole_by_its_own_psn(fresh):
    fresh.configure(mode="respond", selective=True, nak_delay_us=0, cnp_interval_us=FAR)
    qp = Qp()
    run(fresh, qp.frame(0))
    # holes 1 and 3: each packet carries one NAK, the oldest hole not NAKed yet
    assert_ack(run(fresh, qp.frame(2)), qp, PSN0 + 1, msn=2, syndrome=roce.AETH_NAK_PSN_SEQ)
    assert_ack(run(fresh, qp.frame(4)), qp, PSN0 + 3, msn=3, syndrome=roce.AETH_NAK_PSN_SEQ)
    st = stats(fresh, qp)
    assert (st["epsn"], st["naks"], st["discarded"]) == (PSN0 + 1, 2, 0)
    assert_ack(run(fresh, qp.frame(1, ackreq=True)), qp, PSN0 + 2, msn=4)   # 1 filled: up to 2
    assert_ack(run(fresh, qp.frame(3, ackreq=True)), qp, PSN0 + 4, msn=5)   # 3 filled: up to 4
    assert stats(fresh, qp)["epsn"] == PSN0 + 5


def test_selective_repeat_waits_nak_delay_before_a_nak(fresh):
    fresh.configure(mode="respond", selective=True, nak_delay_us=FAR, cnp_interval_us=FAR)
    qp = Qp()
    verdicts = [run(fresh, qp.frame(s)).verdict for s in (0, 2, 3, 5)]
    assert verdicts == ["pass"] * 4 and stats(fresh, qp)["naks"] == 0
    fresh.configure(mode="respond", selective=True, nak_delay_us=0, cnp_interval_us=FAR)
    assert_ack(run(fresh, qp.frame(6)), qp, PSN0 + 1, msn=5, syndrome=roce.AETH_NAK_PSN_SEQ)


def test_go_back_n_completes_a_message_only_when_it_accepts_its_packets(fresh):
    qp = Qp()
    run(fresh, qp.frame(0, msg_id=0, msg_idx=0, msg_pkts=2))
    run(fresh, qp.frame(2, msg_id=1, msg_idx=0, msg_pkts=1))        # discarded: 1 is missing
    assert stats(fresh, qp)["messages"] == 0
    run(fresh, qp.frame(1, msg_id=0, msg_idx=1, msg_pkts=2))
    run(fresh, qp.frame(2, msg_id=1, msg_idx=0, msg_pkts=1))        # resent, accepted now
    assert stats(fresh, qp)["messages"] == 2
