"""The emulated NIC's PFC side (bpf/nic/responder.c nic_book_pause, through
BPF_PROG_TEST_RUN): a PFC frame from a switch port registered with add_pause_port is
applied to its nic_pauses slot as dataplane.wire.pfc.PauseState.apply does (pause,
refresh, XON, an expired pause closed at its end) and dropped; from any other MAC, or
with another MAC-control opcode, it passes as before (a Python PauseListener still
reads it). The program stamps with bpf_ktime_get_ns (CLOCK_MONOTONIC), so the tests
bracket each frame with time.monotonic_ns()."""
from __future__ import annotations

import ctypes as ct
import mmap
import struct
import time

import pytest

from dataplane.nic.responder import NicPause
from dataplane.wire import pfc

from .test_nic_responder import run
from .test_nic_responder import nic  # noqa: F401  (the module's loaded responder, a fixture)

SWITCH_MAC, OTHER_MAC = "02:00:00:00:5a:01", "02:00:00:00:5a:02"
SLOT = 5
QUANTUM_NS = 1000.0              # 1 us a quantum: 5,000 quanta pause for 5 ms


@pytest.fixture
def fresh(nic):  # noqa: F811
    nic.reset()
    nic.configure(mode="respond")
    nic.add_pause_port(SWITCH_MAC, SLOT, QUANTUM_NS)
    yield nic
    nic.reset()


def send(nic, quanta: dict[int, int], mac: str = SWITCH_MAC) -> tuple[str, int, int]:
    """The verdict of one PFC frame and the monotonic ns around its run."""
    t0 = time.monotonic_ns()
    verdict = run(nic, pfc.build_frame(mac, quanta)).verdict
    return verdict, t0, time.monotonic_ns()


def test_a_pause_sets_until_and_opens_the_pause(fresh):
    verdict, t0, t1 = send(fresh, {3: 5000})
    assert verdict == "drop"
    p = fresh.pause(SLOT)
    assert t0 <= p.opened_ns[3] <= t1
    assert p.until_ns[3] == p.opened_ns[3] + 5_000_000
    assert (p.frames, p.xon, list(p.paused_ns)) == (1, 0, [0] * 8)
    # only the enabled class moves
    assert [p.until_ns[i] for i in range(8) if i != 3] == [0] * 7 and p.quantum_ps == 1_000_000
    c = fresh.counters()
    assert (c["rx"], c["pause"], c["drop"], c["pause_unknown"], c["not_roce"], c["pass"]) == (1, 1, 1, 0, 0, 0)


def test_a_refresh_restarts_the_time_and_keeps_the_start(fresh):
    send(fresh, {3: 5000})
    first = fresh.pause(SLOT)
    time.sleep(0.001)
    _, t0, t1 = send(fresh, {3: 2000})
    p = fresh.pause(SLOT)
    assert p.opened_ns[3] == first.opened_ns[3]
    assert t0 + 2_000_000 <= p.until_ns[3] <= t1 + 2_000_000      # shorter than before: restarted
    assert p.until_ns[3] < first.until_ns[3] and p.frames == 2 and p.xon == 0


def test_an_xon_ends_the_pause_and_books_its_time(fresh):
    send(fresh, {3: 50_000})
    opened = fresh.pause(SLOT).opened_ns[3]
    time.sleep(0.002)
    _, t0, t1 = send(fresh, {3: 0})
    p = fresh.pause(SLOT)
    assert t0 <= p.until_ns[3] <= t1                                  # sends again from the XON on
    assert p.opened_ns[3] == 0 and p.xon == 1 and p.frames == 2
    assert t0 - opened <= p.paused_ns[3] <= t1 - opened
    # an XON of a priority that is not paused is no resume
    send(fresh, {3: 0, 4: 0})
    assert fresh.pause(SLOT).xon == 1 and fresh.pause(SLOT).paused_ns[3] == p.paused_ns[3]


def test_an_expired_pause_is_closed_at_its_end_by_the_next_frame(fresh):
    send(fresh, {6: 1000})                                           # 1 ms
    first = fresh.pause(SLOT)
    time.sleep(0.003)
    _, t0, t1 = send(fresh, {6: 1000})
    p = fresh.pause(SLOT)
    assert p.paused_ns[6] == 1_000_000                               # until it ran out, not until now
    assert t0 <= p.opened_ns[6] <= t1 and p.opened_ns[6] > first.until_ns[6] and p.xon == 0


def test_a_fractional_quantum_and_several_priorities_in_one_frame(fresh):
    fresh.add_pause_port(SWITCH_MAC, SLOT, 5.12)                     # 100 Gb/s at scale 1
    send(fresh, {0: 1000, 7: 65535})
    p = fresh.pause(SLOT)
    assert p.until_ns[0] - p.opened_ns[0] == 5120
    assert p.until_ns[7] - p.opened_ns[7] == 65535 * 5120 // 1000


def test_pfc_from_an_unknown_mac_passes_untouched(fresh):
    frame = pfc.build_frame(OTHER_MAC, {3: 5000})
    res = run(fresh, frame)
    assert res.verdict == "pass" and res.data == frame
    assert fresh.pause(SLOT).frames == 0
    c = fresh.counters()
    assert (c["pause_unknown"], c["not_roce"], c["pass"], c["pause"]) == (1, 1, 1, 0)


def test_another_mac_control_opcode_passes(fresh):
    # 802.3x PAUSE (opcode 0x0001) from the registered MAC: not PFC
    frame = bytearray(pfc.build_frame(SWITCH_MAC, {3: 5000}))
    frame[14:16] = struct.pack("!H", 0x0001)
    res = run(fresh, bytes(frame))
    assert res.verdict == "pass" and res.data == bytes(frame)
    assert fresh.pause(SLOT).frames == 0
    c = fresh.counters()
    assert (c["not_roce"], c["pause_unknown"], c["pause"]) == (1, 0, 0)
    # cut short: no PFC frame either
    assert run(fresh, bytes(frame[:20])).verdict == "pass"


def test_the_engine_sees_the_same_through_mmap_and_reset_forgets(fresh):
    send(fresh, {3: 5000})
    size = fresh.max_pauses * ct.sizeof(NicPause)
    view = mmap.mmap(fresh.pauses_fd, (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE,
                     prot=mmap.PROT_READ)
    try:
        p = NicPause.from_buffer_copy(view, SLOT * ct.sizeof(NicPause))
    finally:
        view.close()
    assert bytes(p) == bytes(fresh.pause(SLOT)) and p.frames == 1
    fresh.reset()
    assert bytes(fresh.pause(SLOT)) == bytes(NicPause())
    assert send(fresh, {3: 5000})[0] == "pass"                      # no longer registered


def test_the_totals_are_pause_states(fresh):
    """The same frames through PauseState (at the program's own arrival stamps): frames,
    XONs and paused time agree."""
    state = pfc.PauseState()
    script = [({3: 3000}, 0.001), ({3: 3000}, 0.004), ({3: 2000, 1: 500}, 0.001), ({3: 0}, 0.001),
              ({3: 0}, 0.0), ({1: 4000, 3: 1000}, 0.002)]
    for quanta, pause_s in script:
        _, t0, t1 = send(fresh, quanta)
        p = fresh.pause(SLOT)
        now = max(p.until_ns[i] if q == 0 else p.until_ns[i] - q * 1000 for i, q in quanta.items())
        assert t0 <= now <= t1
        state.apply(quanta, now, QUANTUM_NS)
        time.sleep(pause_s)
    p = fresh.pause(SLOT)
    # the XON count depends on whether a sleep outlasted a pause: PauseState at the same
    # stamps says which, the constant cannot
    assert (p.frames, p.xon) == (state.frames, state.xon) and p.frames == 6 and p.xon in (0, 1)
    assert {i: p.until_ns[i] for i in (1, 3)} == {i: state.until_ns[i] for i in (1, 3)}
    end = max(p.until_ns) + 1
    total = {i: p.paused_ns[i] + (max(0, min(p.until_ns[i], end) - p.opened_ns[i]) if p.opened_ns[i] else 0)
             for i in range(8)}
    assert {i: ns for i, ns in total.items() if ns} == state.total_paused_ns(end)
