"""PFC frames, pause bookkeeping and the watchdog, without a lab."""
from __future__ import annotations

import pytest

from dataplane.wire import pfc


def test_frame_round_trips_and_is_802_1qbb():
    f = pfc.build_frame("02:00:00:00:00:07", {3: 0xFFFF, 6: 0})
    assert len(f) == 60 and f[:6] == bytes.fromhex("0180c2000001") and f[12:16] == bytes.fromhex("88080101")
    assert f[16:18] == bytes([0, 0b01001000])               # class-enable vector: 3 and 6
    assert pfc.parse_frame(f) == {3: 0xFFFF, 6: 0}
    assert pfc.parse_frame(f[:12] + b"\x08\x00" + f[14:]) is None
    with pytest.raises(ValueError):
        pfc.build_frame("02:00:00:00:00:07", {8: 1})


def test_quanta_are_bit_times_at_the_nominal_speed_stretched_by_the_clock():
    assert pfc.quanta_wall_seconds(65535, 400e9, None) == pytest.approx(65535 * 512 / 400e9)
    assert pfc.quanta_wall_seconds(65535, 400e9, 5e-6) == pytest.approx(65535 * 512 / 400e9 / 5e-6)


def test_pause_xon_expiry_and_time_paused():
    st = pfc.PauseState()
    st.apply({3: 100}, 1_000, quantum_ns=10)                # paused until 2,000
    assert st.verdict(3, 1_500) == 2_000 and st.verdict(0, 1_500) == 0
    assert st.verdict(3, 2_001) == 0                        # expired by itself
    st.apply({3: 100}, 3_000, quantum_ns=10)
    st.apply({3: 0}, 3_400, quantum_ns=10)                  # XON ends it early
    assert st.verdict(3, 3_401) == 0 and st.xon == 1
    assert st.total_paused_ns(10_000) == {3: 1_000 + 400}


def test_watchdog_drops_a_priority_paused_too_long_then_restores():
    st = pfc.PauseState(watchdog_ns=1_000, restore_ns=5_000)
    st.apply({3: 0xFFFF}, 0, quantum_ns=10)
    assert st.verdict(3, 900) > 0                           # paused, not yet a storm
    st.apply({3: 0xFFFF}, 900, quantum_ns=10)               # refreshed: still one pause
    assert st.verdict(3, 1_100) == -1 and st.watchdog_trips == 1
    st.apply({3: 0xFFFF}, 2_000, quantum_ns=10)             # ignored while restoring
    assert st.verdict(3, 3_000) == -1
    assert st.verdict(3, 6_200) == 0                        # restored; the ignored pause is gone
    st.apply({3: 0xFFFF}, 6_300, quantum_ns=10)
    assert st.verdict(3, 6_400) > 0                         # honours pauses again
