"""Loss windows in the kernel NIC (bpf/nic/stats.h nic_loss_*, finished by
dataplane.nic.report.loss_timing): the same packets, delivered in the same order, give
the kernel NIC and the Python receiver's rxstats.loss_timing the same windows, outage,
recovery and notes. Frames as tests/bpf/test_nic_responder.py builds them, each run
through the program with BPF_PROG_TEST_RUN."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dataplane.nic import report
from dataplane.nic import responder as nicmod
from dataplane.traffic.rxstats import loss_timing

from .test_nic_responder import NIC_IP, Qp, run

T0 = 1_000_000_000          # the first send stamp (ns)
STEP = 1_000                # one packet interval (ns)


@pytest.fixture(scope="module")
def nic():
    with nicmod.NicResponder(max_qps=64) as r:
        r.configure(mode="count")
        yield r


@pytest.fixture
def fresh(nic):
    nic.reset()
    yield nic
    nic.reset()


def deliver(nic, order: list[int], stamps: dict[int, int], qp: Qp | None = None) -> Qp:
    """Run positions `order` (a position may repeat: a duplicate) with their send stamps."""
    qp = qp or Qp()
    for pos in order:
        assert run(nic, qp.frame(pos, ts_ns=stamps[pos])).verdict == "pass"
    return qp


def kernel(nic, qp: Qp, sent: int) -> tuple[dict, dict]:
    """(the NIC's loss timing, its flow record) with `sent` packets sent."""
    st_ = nic.qp(NIC_IP, qp.dqpn)
    rec = report.flow_record(st_, [], sent)
    expected = ((st_["highest"] - st_["psn0"]) & 0xFFFFFF) + 1
    return report.loss_timing(st_["loss"], max(0, sent - expected)), rec


def python(order: list[int], stamps: dict[int, int], sent: int) -> dict:
    """What the Python receiver makes of the same packets (Receiver.finish's lost set)."""
    got = set(order)
    return loss_timing({p: stamps[p] for p in got}, [p for p in range(sent) if p not in got])


def steady(n: int) -> dict[int, int]:
    return {p: T0 + p * STEP for p in range(n)}


def check(nic, order, stamps, sent) -> dict:
    qp = deliver(nic, order, stamps)
    got, rec = kernel(nic, qp, sent)
    want = python(order, stamps, sent)
    assert got == want
    assert rec["lost"] == sent - len(set(order))
    return got


# ---------------------------------------------------------------- examples
def test_a_gap_never_filled_is_the_window_loss_timing_gives(fresh):
    stamps = steady(400)
    order = [p for p in range(400) if not 100 <= p < 105]
    got = check(fresh, order, stamps, 400)
    assert got["windows"] == [[T0 + 100 * STEP, T0 + 105 * STEP, 5]]
    assert got["outage_ns"] == got["recovery_ns"] == 5 * STEP and got["note"] is None
    # closed by the responder itself: the lost positions left its window long ago
    assert fresh.qp(NIC_IP, Qp().dqpn)["loss"]["windows"] == 1


def test_a_gap_still_in_the_window_at_the_end_is_finished_by_python(fresh):
    stamps = steady(60)
    order = [p for p in range(60) if p not in (10, 11, 40)]
    got = check(fresh, order, stamps, 60)
    assert got["windows"] == [[T0 + 10 * STEP, T0 + 12 * STEP, 2], [T0 + 40 * STEP, T0 + 41 * STEP, 1]]
    assert fresh.qp(NIC_IP, Qp().dqpn)["loss"]["windows"] == 0     # none left the window yet
    assert (got["outage_ns"], got["recovery_ns"]) == (31 * STEP, 2 * STEP)


def test_a_gap_filled_later_is_reordering_not_a_window(fresh):
    stamps = steady(300)
    order = list(range(300))
    order.remove(50)
    order.insert(order.index(150), 50)         # 100 positions late: inside the window
    got = check(fresh, order, stamps, 300)
    assert got == {"outage_ns": 0, "recovery_ns": 0, "windows": [], "note": None}
    st_ = fresh.qp(NIC_IP, Qp().dqpn)
    assert (st_["out_of_order"], st_["loss"]["windows"], st_["late"]) == (1, 0, 0)


def test_uneven_send_times_interpolate_the_window_start(fresh):
    stamps = {p: T0 + p * p * 7 for p in range(1, 300)}
    stamps[0] = T0 - 5
    order = [p for p in range(300) if not 20 <= p < 23 and p != 200]
    got = check(fresh, order, stamps, 300)
    assert len(got["windows"]) == 2


def test_a_jump_past_the_whole_window(fresh):
    stamps = steady(1000)
    order = [p for p in range(1000) if not 10 <= p < 610]     # 600 lost in a row
    got = check(fresh, order, stamps, 1000)
    assert got["windows"] == [[T0 + 10 * STEP, T0 + 610 * STEP, 600]]


def test_loss_at_the_end_and_at_the_start_give_the_notes(fresh):
    stamps = steady(300)
    got = check(fresh, list(range(250)), stamps, 300)                       # 250-299 never came
    assert got["note"] == report.END_NOTE and got["outage_ns"] is None
    fresh.reset()
    got = check(fresh, list(range(3, 300)), stamps, 300)                    # 0-2 never came
    assert got["note"].startswith("lost before the first packet") and got["windows"] == []
    fresh.reset()
    got = check(fresh, list(range(3, 60)), stamps, 60)                      # ... still in the window
    assert got["note"].startswith("lost before the first packet")


def test_stamps_that_do_not_advance_or_go_back_give_the_notes(fresh):
    stamps = steady(300)
    stamps[6] = stamps[4]                      # 5 lost between two equal stamps
    got = check(fresh, [p for p in range(300) if p != 5], stamps, 300)
    assert got["note"] == "send timestamps do not advance across a loss"
    fresh.reset()
    stamps = steady(300)
    stamps[150] = T0                           # a resent packet's later stamp, seen backwards
    got = check(fresh, [p for p in range(300) if p != 7], stamps, 300)
    assert got["note"] == "send clock went backwards"
    fresh.reset()
    stamps = steady(300)
    stamps[20] = 0                             # no send stamp
    got = check(fresh, [p for p in range(300) if p != 7], stamps, 300)
    assert got["note"] == "a send timestamp is missing"


def test_many_windows_keep_the_first_ones_and_the_exact_outage(fresh):
    n = 1000
    stamps = steady(n)
    lost = set(range(5, 905, 9))               # 100 windows of one packet
    order = [p for p in range(n) if p not in lost]
    qp = deliver(fresh, order, stamps)
    got, rec = kernel(fresh, qp, n)
    want = python(order, stamps, n)
    assert (got["outage_ns"], got["recovery_ns"], got["note"]) == \
        (want["outage_ns"], want["recovery_ns"], want["note"])
    assert got["truncated"] and got["windows"] == want["windows"][:nicmod.LOSS_LAST]
    assert rec["loss_windows_truncated"] and rec["outage_us"] == want["outage_ns"] / 1000


def test_duplicates_change_nothing(fresh):
    stamps = steady(300)
    order = [p for p in range(300) if p != 30]
    order[100:100] = [90, 91, 92]              # resent copies of delivered positions
    check(fresh, order, stamps, 300)


# ---------------------------------------------------------------- property
@st.composite
def deliveries(draw):
    """A flow of n packets: some lost (runs and single ones), the rest delivered in an
    order where no packet is overtaken by 128 or more (the responder's window)."""
    n = draw(st.integers(1, 400))
    seed = draw(st.integers(0, 2**32 - 1))
    rnd = random.Random(seed)
    lost: set[int] = set()
    for _ in range(draw(st.integers(0, 6))):
        start = rnd.randrange(n)
        lost.update(range(start, min(n, start + rnd.choice((1, 1, 2, 5, 40, 150)))))
    spread = draw(st.sampled_from((0, 3, 30, 100)))
    kept = [p for p in range(n) if p not in lost]
    order = sorted(kept, key=lambda p: p + rnd.random() * spread)
    stamps, t = {}, T0
    for p in range(n):
        t += rnd.choice((STEP, STEP, 1, 3 * STEP))
        stamps[p] = t
    return order, stamps, n


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=deliveries())
def test_the_kernel_nic_gives_what_loss_timing_gives(nic, case):
    order, stamps, n = case
    nic.reset()
    if not order:
        return                                 # no packet: no QP (report.unseen_flow)
    check(nic, order, stamps, n)
