"""Receiver accounting and responder: exact numbers on crafted packet sequences."""
from __future__ import annotations

import pytest

from dataplane.traffic.receiver import Receiver, Responder, _unwrap
from dataplane.wire import roce
from dataplane.wire.roce import Opcode

MACS = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02")


class Flow:
    """Crafts the packets of one flow: messages of `pkts_per_msg` packets, PSNs from psn0."""

    def __init__(self, flow_id=1, psn0=0, pkts_per_msg=1, src_qp=0x101, dqpn=0x202,
                 payload=200):
        self.flow_id, self.psn0, self.k = flow_id, psn0, pkts_per_msg
        self.src_qp, self.payload = src_qp, payload
        self.tpl = {
            ecn: roce.FrameTemplate(**MACS, src_ip="10.0.0.1", dst_ip="10.0.0.2",
                                    sport=50000 + flow_id, dqpn=dqpn,
                                    opcode=Opcode.SEND_MIDDLE, payload_len=payload,
                                    ecn=ecn)
            for ecn in (roce.ECN_ECT0, roce.ECN_CE)}
        self.length = self.tpl[roce.ECN_ECT0].length

    def pkt(self, seq, ts_ns=1000, msg_start_ns=None, ce=False):
        msg, idx = divmod(seq, self.k)
        t = self.tpl[roce.ECN_CE if ce else roce.ECN_ECT0]
        if msg_start_ns is None:
            msg_start_ns = ts_ns
        frame = bytes(t.fill(self.psn0 + seq, idx == self.k - 1, self.flow_id,
                             self.src_qp, msg, seq, idx, self.k, self.k * self.payload,
                             ts_ns, msg_start_ns))
        return roce.parse(frame)


def feed(rx, flow, seqs, **kw):
    for i, s in enumerate(seqs):
        rx.add(flow.pkt(s, **kw), 10_000 + i)


def test_in_order_no_loss():
    rx, f = Receiver(), Flow()
    feed(rx, f, range(100))
    st = rx.finish()[1]
    assert (st.packets, st.lost, st.duplicates, st.out_of_order, st.ce) == (100, 0, 0, 0, 0)
    assert st.bytes == 100 * f.length and st.payload_bytes == 100 * f.payload
    assert st.reorder_hist == {}


def test_frames_sent_before_the_run_are_stale_and_never_booked():
    """An earlier run's frame (stamped before not_before_ns) arriving first must not set
    the flow's position 0: the run's frames book as they would alone."""
    rx, f = Receiver(not_before_ns=5_000), Flow()
    assert rx.add(f.pkt(900, ts_ns=4_999), 10_000) is None
    feed(rx, f, range(10), ts_ns=5_000)
    st = rx.finish({1: 10})[1]
    assert (rx.stale, st.packets, st.lost, st.out_of_order) == (1, 10, 0, 0)
    assert st.timing.get("note") is None


def test_exact_loss():
    rx, f = Receiver(), Flow()
    lost = {0, 5, 6, 7, 50, 98}
    feed(rx, f, [s for s in range(100) if s not in lost])
    st = rx.finish({1: 100})[1]
    assert st.lost == 6 and st.packets == 94 and st.duplicates == 0 and st.out_of_order == 0
    assert st.loss_ratio == pytest.approx(0.06)


def test_tail_loss_needs_sender_count():
    rx, f = Receiver(), Flow()
    feed(rx, f, range(90))
    assert rx.finish()[1].lost == 0            # unknowable without the sender's count
    assert rx.finish({1: 100})[1].lost == 10
    rx2 = Receiver()
    assert rx2.finish({7: 12})[7].lost == 12   # flow never seen


def test_exact_duplicates():
    rx, f = Receiver(), Flow()
    feed(rx, f, [0, 1, 1, 2, 3, 3, 3, 0, 4])
    st = rx.finish({1: 5})[1]
    assert (st.packets, st.duplicates, st.lost, st.out_of_order) == (5, 4, 0, 0)
    assert st.bytes == 5 * f.length


def test_exact_reorder_distances():
    rx, f = Receiver(), Flow()
    # 2 arrives after 3 (distance 1); 5 after 6,7,8 (distance 3); 9 after 10 (distance 1)
    feed(rx, f, [0, 1, 3, 2, 4, 6, 7, 8, 5, 10, 9, 11])
    st = rx.finish({1: 12})[1]
    assert st.out_of_order == 3 and st.lost == 0 and st.duplicates == 0
    assert st.reorder_hist == {1: 2, 3: 1}
    assert st.packets == 12


def test_loss_reorder_duplicates_combined():
    rx, f = Receiver(), Flow()
    seqs = [0, 2, 1, 1, 4, 6, 5, 9, 3, 9]   # 7, 8 lost; 3 late by 6; 1 and 9 duplicated
    feed(rx, f, seqs)
    st = rx.finish({1: 10})[1]
    assert st.lost == 2 and st.duplicates == 2 and st.out_of_order == 3
    assert st.reorder_hist == {1: 2, 6: 1}
    assert st.packets == 8


def test_psn_wraparound():
    rx, f = Receiver(), Flow(psn0=roce.PSN_MASK - 3)   # PSNs ... ffffff, 0, 1 ...
    seqs = [s for s in range(10) if s != 5]
    seqs.insert(8, 5)                                    # late across the wrap
    feed(rx, f, seqs + [4])                              # one duplicate
    st = rx.finish({1: 10})[1]
    assert (st.packets, st.lost, st.duplicates, st.out_of_order) == (10, 0, 1, 1)
    assert st.reorder_hist == {3: 1}


def test_unwrap():
    assert _unwrap(5, roce.PSN_MASK) == roce.PSN_MOD + 5
    assert _unwrap(roce.PSN_MASK, roce.PSN_MOD + 2) == roce.PSN_MASK
    assert _unwrap(100, 90) == 100


def test_initial_loss_counted_via_seq():
    rx, f = Receiver(), Flow(psn0=1000)
    feed(rx, f, range(3, 10))
    st = rx.finish({1: 10})[1]
    assert st.lost == 3 and st.packets == 7


def test_ce_and_latency_exact():
    rx, f = Receiver(), Flow()
    for s in range(10):
        rx.add(f.pkt(s, ts_ns=1_000_000 + s * 100, ce=s in (2, 3, 7)),
               1_000_000 + s * 100 + 5_000 + s)
    rx.add(f.pkt(7, ts_ns=0, ce=True), 99)   # a duplicate CE packet: not counted again
    st = rx.finish()[1]
    assert st.ce == 3
    assert st.latencies_ns == [5_000 + s for s in range(10)]
    lat = st.latency_summary()
    assert lat["min"] == 5_000 and lat["max"] == 5_009 and lat["count"] == 10


def test_message_completion_exact_with_reorder_and_loss():
    rx, f = Receiver(), Flow(pkts_per_msg=3)
    # message 0: seqs 0-2, started at 100, last packet (seq 1, reordered) arrives at 900
    # message 1: seqs 3-5, seq 4 lost -> incomplete
    # message 2: seqs 6-8, started at 300, done at 1200
    arrivals = [(0, 100, 500), (2, 100, 600), (1, 100, 900), (3, 200, 700), (5, 200, 800),
                (6, 300, 1000), (7, 300, 1100), (8, 300, 1200)]
    for seq, start, t in arrivals:
        rx.add(f.pkt(seq, ts_ns=start, msg_start_ns=start), t)
    rx.add(f.pkt(8, ts_ns=300, msg_start_ns=300), 5000)   # duplicate: no effect
    st = rx.finish({1: 9})[1]
    assert st.completions_ns == {0: 800, 2: 900}
    assert st.msgs_incomplete == 1 and st.lost == 1 and st.duplicates == 1


def test_flows_kept_apart_and_acks_cnps_counted():
    rx = Receiver()
    a, b = Flow(flow_id=1), Flow(flow_id=2, psn0=500)
    feed(rx, a, [0, 1, 2])
    feed(rx, b, [0, 2])
    kw = dict(src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01",
              src_ip="10.0.0.2", dst_ip="10.0.0.1", sport=4791)
    rx.add(roce.parse(roce.build_cnp(**kw, dqpn=0x101)), 1)
    rx.add(roce.parse(roce.build_ack(**kw, dqpn=0x101, psn=1, msn=1)), 1)
    rx.add(None, 1)
    fl = rx.finish({1: 3, 2: 3})
    assert fl[1].packets == 3 and fl[1].lost == 0
    assert fl[2].packets == 2 and fl[2].lost == 1
    assert rx.cnps_by_qp == {0x101: 1} and rx.acks_by_qp == {0x101: 1} and rx.other == 1
    assert rx.totals()["packets"] == 5


def test_responder_cnp_only_for_ce():
    r, f = Responder(), Flow(src_qp=0x1AB)
    out = []
    ce = {1, 4, 5}
    for s in range(8):
        out += r.respond(f.pkt(s, ce=s in ce), s)
    cnps = [roce.parse(x, verify=True) for x in out]
    cnps = [p for p in cnps if p.opcode == Opcode.CNP]
    assert len(cnps) == 3 and r.cnps_sent == 3
    for p in cnps:
        assert p.icrc_ok and p.becn and p.dqpn == 0x1AB
        assert p.dst_ip == "10.0.0.1" and p.src_ip == "10.0.0.2" and p.ecn == 0


def test_responder_cnp_coalescing():
    r, f = Responder(cnp_interval_ns=50_000, ack=False), Flow()
    n = sum(len(r.respond(f.pkt(s, ce=True), s * 10_000)) for s in range(20))
    assert n == 4   # at t = 0, 50, 100, 150 us


def test_responder_acks_per_message():
    r, f = Responder(), Flow(pkts_per_msg=4, src_qp=0x77)
    acks = []
    for s in range(12):
        for x in r.respond(f.pkt(s), s):
            acks.append(roce.parse(x, verify=True))
    assert [a.opcode for a in acks] == [Opcode.ACK] * 3
    assert [a.aeth[1] for a in acks] == [1, 2, 3]            # MSN
    assert [a.psn for a in acks] == [3, 7, 11]
    assert all(a.dqpn == 0x77 and a.icrc_ok for a in acks)


def test_longest_delivery_gap_is_the_recovery_time():
    from dataplane.traffic.receiver import Receiver
    from dataplane.wire import roce

    rx = Receiver()
    tpl = roce.FrameTemplate(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                             src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=50000, dqpn=7,
                             opcode=roce.Opcode.SEND_ONLY, payload_len=roce.RAILAB_HLEN)
    arrivals = [0, 1_000, 2_000, 9_000, 10_000]           # ns: a 7 us pause in the middle
    for seq, t in enumerate(arrivals):
        frame = bytes(tpl.fill(seq, False, 1, 5, seq, seq, 0, 1, roce.RAILAB_HLEN, 0, 0))
        rx.add(roce.parse(frame), 1_000_000 + t)
    stats = rx.finish()[1]
    assert stats.max_gap_ns == 7_000
    assert stats.to_dict()["max_gap_us"] == 7.0


# --- outage and recovery from send times (issue 17) ----------------------------------

STEP = 1_000_000        # 1 ms between packets (send times)
T0 = 5_000_000_000


def play(rx, flow, records):
    """records: (seq, send offset in packet times, receive ns) in receive order."""
    for seq, send, rx_ns in records:
        rx.add(flow.pkt(seq, ts_ns=T0 + int(send * STEP)), rx_ns)


def paced(seqs, rx_start=T0 + 50_000, late: dict | None = None):
    """Packets seqs sent every STEP and received 50 us later, unless `late` moves them."""
    late = late or {}
    return sorted(((s, s, late.get(s, rx_start + s * STEP)) for s in seqs), key=lambda r: r[2])


def test_late_but_complete_flow_has_no_outage_only_a_host_gap():
    rx, f = Receiver(), Flow()
    # packets 10..14 reach the receiver 40 ms late (held in a queue), out of order
    late = {s: T0 + 60 * STEP + (14 - s) * 1000 for s in range(10, 15)}
    play(rx, f, paced(range(30), late=late))
    st = rx.finish({1: 30})[1]
    assert st.lost == 0 and st.out_of_order > 0
    d = st.to_dict()
    assert d["outage_us"] == 0 and d["recovery_us"] == 0 and d["timing_note"] is None
    assert d["max_gap_us"] >= 5_000        # the hosts saw a pause; the network lost nothing


def test_real_hole_outage_is_the_lost_send_times_plus_one_interval():
    rx, f = Receiver(), Flow()
    play(rx, f, paced([s for s in range(40) if s not in (8, 9, 10)]))
    st = rx.finish({1: 40})[1]
    assert st.lost == 3
    d = st.to_dict()
    # lost packets were sent at 8, 9, 10 ms: span 2 ms + one 1 ms interval
    assert d["outage_us"] == pytest.approx(3_000) and d["recovery_us"] == pytest.approx(3_000)
    assert d["loss_windows_ns"] == [[T0 + 8 * STEP, T0 + 11 * STEP, 3]]
    assert d["max_gap_us"] == pytest.approx(4_000)   # receive side: 7 -> 11


def test_spread_loss_outage_spans_it_recovery_is_the_first_hole():
    rx, f = Receiver(), Flow()
    lost = {20, 24, 28}                     # every 4th packet on a dead path (spraying)
    play(rx, f, paced([s for s in range(40) if s not in lost]))
    d = rx.finish({1: 40})[1].to_dict()
    assert d["outage_us"] == pytest.approx(9_000)     # 20 .. 28 ms, plus 1 ms
    assert d["recovery_us"] == pytest.approx(1_000)   # 21 got through


def test_stalled_receiver_shows_in_the_host_gap_not_the_outage():
    rx, f = Receiver(), Flow()
    # the receiver read nothing for 80 ms, then everything at once (kernel stamps late too)
    late = {s: T0 + 100 * STEP + s * 1000 for s in range(5, 40)}
    play(rx, f, paced(range(40), late=late))
    d = rx.finish({1: 40})[1].to_dict()
    assert d["lost"] == 0 and d["outage_us"] == 0 and d["recovery_us"] == 0
    assert d["max_gap_us"] > 80_000


def test_no_packets_is_unknown():
    rx = Receiver()
    d = rx.finish({7: 100})[7].to_dict()
    assert d["lost"] == 100
    assert d["outage_us"] is None and d["recovery_us"] is None and "no packet" in d["timing_note"]


def test_clock_going_backwards_is_unknown():
    rx, f = Receiver(), Flow()
    records = paced([s for s in range(20) if s != 10])
    records = [(s, send - 5 if s >= 15 else send, r) for s, send, r in records]   # clock stepped back
    play(rx, f, records)
    d = rx.finish({1: 20})[1].to_dict()
    assert d["lost"] == 1 and d["outage_us"] is None and "backwards" in d["timing_note"]


@pytest.mark.parametrize("missing, note", [((0, 1), "first packet"), ((18, 19), "until the end")])
def test_loss_without_a_delivered_packet_on_both_sides_is_unknown(missing, note):
    rx, f = Receiver(), Flow()
    play(rx, f, paced([s for s in range(20) if s not in missing]))
    d = rx.finish({1: 20})[1].to_dict()
    assert d["lost"] == 2 and d["outage_us"] is None and note in d["timing_note"]


def test_missing_send_timestamps_are_unknown_not_zero():
    from dataplane.traffic.rxstats import loss_timing
    assert loss_timing({0: 0, 2: 0}, [1])["outage_ns"] is None            # stamps missing
    assert loss_timing({0: 100, 2: 100}, [1])["outage_ns"] is None        # no time passed
    assert loss_timing({}, [])["note"] == "no packet received"
    assert loss_timing({0: 100, 1: 200}, []) == {"outage_ns": 0, "recovery_ns": 0, "windows": [],
                                                 "note": None}
