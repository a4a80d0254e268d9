"""The kernel NIC's maps as the Python receivers' reports (dataplane.nic.report): pure."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from dataplane.nic import report
from dataplane.nic import responder as nicmod
from dataplane.nic.responder import MsgEvent, log_slot
from dataplane.traffic.rxstats import summary


def window(stamps: dict[int, int], highest: int) -> list:
    """responder.loss_dict's open window: positions highest-127 .. highest, oldest first
    (before position 0: delivered, no stamp)."""
    return [0 if p < 0 else stamps.get(p) for p in range(highest - 127, highest + 1)]


def loss(stamps: dict[int, int], highest: int, **over) -> dict:
    return {"flags": 0, "t0": 0, "run": 0, "windows": 0, "first": [], "latest": None,
            "window": window(stamps, highest), **over}


def qp(**over) -> dict:
    base = {"flow_id": 3, "saddr": "10.0.0.1", "daddr": "10.0.0.2", "sport": 50000, "dqpn": 9,
            "src_qp": 4, "psn0": 100, "highest": 109, "holes": 2, "out_of_order": 1,
            "packets": 9, "bytes": 9000, "payload_bytes": 8000, "duplicates": 1, "ce": 2,
            "reorder_hist": {3: 1}, "first_ns": 1_000, "last_ns": 1_000_001_000,
            "lat_bad": 0, "lat_min": 100, "lat_max": 5000, "lat_sum": 9 * 1000,
            "lat_hist": {log_slot(100): 1, log_slot(1000): 7, log_slot(5000): 1},
            "messages_open": 1, "max_gap_ns": 2000, "last_send_ns": 77,
            "loss": loss({p: 1000 * (p + 1) for p in range(10) if p != 4}, 9)}
    return {**base, **over}


def test_losses_are_open_holes_plus_the_missing_tail():
    rec = report.flow_record(qp(), [], sent=12)
    # positions 0..9 covered (one hole still open), 2 more sent than covered
    assert (rec["lost"], rec["packets"]) == (1 + 2, 9)
    assert rec["loss_ratio"] == pytest.approx(3 / 12)
    assert rec["timing_note"] == report.END_NOTE and rec["outage_us"] is None
    rec = report.flow_record(qp(), [], sent=None)
    assert rec["lost"] == 1 and rec["timing_note"] is None
    assert rec["loss_windows_ns"] == [[5000, 6000, 1]] and rec["outage_us"] == rec["recovery_us"] == 1.0


def test_loss_timing_finishes_the_open_window_as_the_responder_does():
    from dataplane.traffic.rxstats import loss_timing
    stamps = {p: 10_000 + 100 * p for p in range(200)}
    got = {p: t for p, t in stamps.items() if p not in (3, 150, 151, 199)}
    # 3 left the window (closed by the responder), 150-151 are still in it, 199 the tail
    state = loss(got, 198, windows=1, first=[(10_200, 10_400, 1)], t0=stamps[70])
    assert report.loss_timing(state, 1) == loss_timing(got, [3, 150, 151, 199])
    assert report.loss_timing(state, 0) == loss_timing(got, [3, 150, 151])
    assert report.loss_timing(loss(got, 198, flags=nicmod.LOSS_BACKWARDS), 0)["note"] == \
        "send clock went backwards"


def test_past_63_windows_the_first_62_and_the_exact_span():
    first = [(1000 * i, 1000 * i + 500, 1) for i in range(62)]
    stamps = {p: 10**6 + p for p in range(100)}
    # 63 closed: the latest slot is the 63rd, every window known
    full = report.loss_timing(loss(stamps, 99, windows=63, first=first, latest=(90_000, 90_500, 1)), 0)
    assert len(full["windows"]) == 63 and "truncated" not in full
    assert full["outage_ns"] == 90_500 - 250
    # 70 closed, one more in the open window: the first 62, the span to the very last
    open_ = dict(stamps)
    del open_[50]
    many = report.loss_timing(loss(open_, 99, windows=70, first=first, latest=(95_000, 95_500, 1),
                                   t0=900_000), 0)
    assert many["truncated"] and len(many["windows"]) == 62
    assert (many["outage_ns"], many["recovery_ns"]) == (10**6 + 51 - 250, 250)


def test_the_record_has_every_field_a_python_receiver_gives():
    from dataplane.traffic.receiver import Receiver
    python = Receiver().finish({3: 1})[3].to_dict()
    python["completions_us"] = []
    assert set(report.flow_record(qp(), [10, 20], 10)) >= set(python) - {"loss_windows_truncated"}
    assert set(report.unseen_flow(3, 5)) >= set(python) - {"loss_windows_truncated", "src_ip", "dst_ip",
                                                           "sport", "dqpn", "src_qp"}


def test_latency_quantiles_fall_in_their_slot_and_completions_are_exact():
    rec = report.flow_record(qp(), [300, 100, 200], 10)
    lat = rec["latency_ns"]
    assert (lat["count"], lat["min"], lat["max"], lat["mean"]) == (9, 100, 5000, 1000)
    assert 1000 * 0.88 <= lat["p50"] <= 1000 * 1.12
    assert rec["completion_ns"] == summary([100, 200, 300])
    assert rec["completions_us"] == [0.3, 0.1, 0.2] and rec["messages_completed"] == 3


def test_flow_records_cover_every_sent_flow():
    events = [MsgEvent(flow_id=3, msg_ns=50), MsgEvent(flow_id=3, msg_ns=70), MsgEvent(flow_id=8, msg_ns=1)]
    out = report.flow_records([qp()], events, {3: 10, 5: 4})
    assert set(out) == {"3", "5"}
    assert out["3"]["messages_completed"] == 2
    assert (out["5"]["lost"], out["5"]["packets"], out["5"]["loss_ratio"]) == (4, 0, 1.0)


@given(st.dictionaries(st.integers(0, 50), st.integers(1, 10_000), min_size=1),
       st.floats(100, 5000))
def test_water_filling_keeps_every_byte_and_no_bin_over_capacity(bins, capacity):
    out = report.water_filled(bins, capacity)
    assert sum(out.values()) == pytest.approx(sum(bins.values()), abs=len(out))
    assert all(n <= capacity + 1 for n in out.values())
    assert max(out) == max(bins)           # nothing moves later than it arrived


def test_water_filling_moves_a_burst_back_in_time():
    assert report.water_filled({5: 2500}, 1000) == {3: 500, 4: 1000, 5: 1000}
    assert report.water_filled({5: 2500}, 0) == {5: 2500}
