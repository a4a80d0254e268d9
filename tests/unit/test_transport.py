"""Closed-loop transport state machines: exact outcomes on crafted sequences."""
from __future__ import annotations

import random

import pytest

from dataplane.traffic.receiver import Responder
from dataplane.wire import roce
from dataplane.traffic.transport import (Dcqcn, DcqcnParams, QpResponder, Requester,
                                         TransportConfig, position)

GBN = TransportConfig(kind="go-back-n", ack_every=4, window=1000, rto_us=100)
SR = TransportConfig(kind="selective-repeat", ack_every=4, window=1000, rto_us=100, nak_delay_us=10)


def deliver(cfg, order, lose=(), scale=None, step_ns=1000):
    """Run requester and responder against each other over a wire that delivers
    packets in `order` of first transmission (positions) and loses the first copy of
    positions in `lose`; returns (requester, responder)."""
    n = len(order)
    req = Requester(n, cfg, scale, 0)
    rsp = QpResponder(cfg, scale)
    now = 0
    lost_once = set()
    first = []
    while len(first) < n:                       # first transmissions, in send order
        pos = req.next_position()
        first.append(pos)
        req.sent(pos, 1000, now)
    queue = [first[i] for i in order]
    for _ in range(100 * n):
        if req.done:
            break
        now += step_ns
        if queue:
            pos = queue.pop(0)
            if pos in lose and pos not in lost_once:
                lost_once.add(pos)
                continue
            for kind, at in rsp.on_data(pos, pos == n - 1, (1000, 0) if pos == n - 1 else None, now):
                (req.on_ack if kind == "ack" else req.on_nak)(at, now)
        elif req.check_timeout(now + 10**9):
            pass
        nxt = req.next_position()
        while nxt is not None and nxt < req.sent_max:          # resend
            req.sent(nxt, 1000, now)
            queue.append(nxt)
            nxt = req.next_position()
    return req, rsp


def test_in_order_needs_no_retransmission():
    for cfg in (GBN, SR):
        req, rsp = deliver(cfg, list(range(20)))
        assert req.done and req.stats.retx_packets == 0 and rsp.stats.naks == 0
        assert rsp.stats.acks == 5                      # coalesced: every 4th packet
        assert len(rsp.stats.messages) == 1


def test_go_back_n_resends_everything_after_a_loss():
    req, rsp = deliver(GBN, list(range(10)), lose={3})
    assert req.done
    assert rsp.stats.naks == 1 and req.stats.naks == 1
    assert req.stats.retx_packets == 7                  # 3..9 again
    assert rsp.stats.discarded == 6                     # 4..9 the first time


def test_selective_repeat_resends_only_the_hole():
    req, rsp = deliver(SR, list(range(30)), lose={3})
    assert req.done
    assert req.stats.retx_packets == 1
    assert rsp.stats.buffered_max > 0


def test_reordering_costs_go_back_n_but_not_selective_repeat():
    order = list(range(40))
    random.Random(4).shuffle(order[5:15])
    order[5:15] = sorted(order[5:15], reverse=True)     # packets 5..14 overtake each other
    gbn, _ = deliver(GBN, order, step_ns=1000)
    sr, _ = deliver(SR, order, step_ns=1)               # the holes close well within nak_delay
    assert gbn.done and sr.done
    assert gbn.stats.retx_packets > 0
    assert sr.stats.retx_packets == 0


def test_selective_repeat_acks_a_reordered_tail_without_a_timeout():
    """The last packet (ack-requested) overtakes the ones before it: once they fill the
    hole the responder ACKs, so the requester never times out (go-back-N instead NAKs,
    discards the last packet and gets it back by the NAK's resend)."""
    order = list(range(10))
    order[7:10] = [9, 7, 8]
    req, rsp = deliver(SR, order, step_ns=1)         # the hole closes well within nak_delay
    assert req.done and req.stats.timeouts == 0 and req.stats.retx_packets == 0
    assert rsp.stats.naks == 0


def test_lost_tail_is_recovered_by_timeout():
    for cfg in (GBN, SR):
        req, _ = deliver(cfg, list(range(5)), lose={4})
        assert req.done and req.stats.timeouts >= 1 and req.stats.retx_packets == 1


def test_window_limits_outstanding_packets():
    req = Requester(10, TransportConfig(kind="go-back-n", window=3), None, 0)
    for _ in range(3):
        req.sent(req.next_position(), 100, 0)
    assert req.next_position() is None
    req.on_ack(0, 1)
    assert req.next_position() == 3


def test_position_unwraps_psn():
    assert position(5, 0xFFFFFE, 0) == 7
    assert position(0xFFFFFE, 0xFFFFFE, 7) == 0


def test_dcqcn_cut_and_recovery_follow_the_paper():
    p = DcqcnParams()
    cc = Dcqcn(p, 10e6, None, 0)
    cc.on_cnp(0)
    assert cc.rt == 10e6 and cc.rc == pytest.approx(5e6)          # alpha 1: halve
    assert cc.alpha == pytest.approx((1 - p.g) + p.g)
    period = cc.rate_period
    cc.tick(5 * period)                                          # five fast-recovery steps
    assert cc.rc == pytest.approx(10e6 - 5e6 / 32)
    assert cc.rt == 10e6
    cc.on_cnp(5 * period)
    rt = cc.rt
    cc.tick(5 * period + 6 * period)                              # fast recovery, then one AI step
    assert cc.rt == pytest.approx(min(rt + p.rai_fraction * 10e6, 10e6))


def test_dcqcn_alpha_decays_without_cnp_and_timers_stretch_with_scale():
    p = DcqcnParams()
    cc = Dcqcn(p, 10e6, 0.001, 0)
    assert cc.alpha_period == 55_000_000                          # 55 us real at scale 1/1000
    cc.tick(cc.alpha_period * 10)
    assert cc.alpha == pytest.approx((1 - p.g) ** 10)


def test_byte_counter_drives_increase():
    p = DcqcnParams(byte_counter=1000)
    cc = Dcqcn(p, 10e6, None, 0)
    cc.on_cnp(0)
    cc.on_sent(5000)
    assert cc.byte_events == 5 and cc.rc > 5e6


def test_responder_sends_real_ack_and_nak_frames():
    rsp = Responder(transport=GBN)
    tpl = roce.FrameTemplate(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                             src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=50000, dqpn=0x200,
                             opcode=roce.Opcode.SEND_MIDDLE, payload_len=200)

    def pkt(seq):
        return roce.parse(bytes(tpl.fill(100 + seq, False, 7, 0x101, 0, seq, seq, 10, 2000, 1, 1)), verify=True)

    out = [roce.parse(f, verify=True) for s in (0, 1, 2, 3, 5) for f in rsp.respond(pkt(s), s)]
    assert [o.aeth[0] for o in out] == [roce.AETH_ACK, roce.AETH_NAK_PSN_SEQ]
    assert all(o.icrc_ok and o.opcode == roce.Opcode.ACK and o.dqpn == 0x101 for o in out)
    assert out[0].psn == 103 and out[1].psn == 104               # ACK: last in order; NAK: expected


def test_duplicates_are_acknowledged_so_a_requester_that_missed_acks_moves_on():
    req = Requester(20, GBN, None, 0)
    rsp = QpResponder(GBN, None)
    for _ in range(20):
        pos = req.next_position()
        req.sent(pos, 1000, 0)
        rsp.on_data(pos, False, None, 0)       # every ACK lost on the way back
    assert req.una == 0 and req.check_timeout(10**12)
    answers = rsp.on_data(req.next_position(), False, None, 1)
    assert answers == [("ack", 19)]
    req.on_ack(19, 2)
    assert req.done


def test_a_slowly_served_qp_is_acknowledged_by_time_not_only_by_count():
    """ACK coalescing by count alone would leave a QP that gets one packet per RTO/2 (one
    of many QPs sharing its NIC) unacknowledged past its RTO: it would resend what had
    arrived. The responder also ACKs the first packet ack_delay after its last ACK."""
    cfg = TransportConfig(kind="go-back-n", ack_every=8, window=64, rto_us=200, ack_delay_us=20)
    rsp = QpResponder(cfg, None)
    acks = [out for i in range(6) for out in rsp.on_data(i, False, None, i * 100_000)]
    assert acks == [("ack", i) for i in range(1, 6)]        # every packet after the first
    fast = QpResponder(cfg, None)
    acks = [out for i in range(16) for out in fast.on_data(i, False, None, i * 1_000)]
    assert acks == [("ack", 7), ("ack", 15)]                 # back to back: by count only
    req = Requester(6, cfg, None, 0)
    slow = QpResponder(cfg, None)
    for i in range(6):                # one packet per 100 us, each answered as it arrives
        now = i * 100_000
        req.check_timeout(now)
        pos = req.next_position()
        req.sent(pos, 1000, now)
        for kind, at in slow.on_data(pos, pos == 5, None, now + 1_000):
            req.on_ack(at, now + 2_000)
    assert req.done and req.stats.timeouts == 0 and req.stats.retx_packets == 0
