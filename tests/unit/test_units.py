"""dataplane.units: the one reader and writer of speeds, ratios, sizes and durations."""
from __future__ import annotations

import pytest

from dataplane import units
from dataplane.errors import PlanError, TopologyError
from dataplane.topology import sizing, generate


@pytest.mark.parametrize("text,bps", [("400G", 400 * 10**9), ("1.6T", 1_600 * 10**9), ("25g", 25 * 10**9),
                                      ("400Gb/s", 400 * 10**9), ("100Mbps", 10**8), (1e11, 10**11)])
def test_speeds_in(text, bps):
    assert units.parse_speed(text) == bps


def test_speed_readers_agree_on_what_they_share():
    for text in ("400G", "1.6T", "51.2T", "200Gb/s"):
        assert generate.parse_speed(text) == units.parse_speed(text) == sizing.parse_speed(text) * 10**9
    with pytest.raises(PlanError):
        sizing.parse_speed("400M")          # the planner counts whole Gb/s
    with pytest.raises(TopologyError):
        generate.parse_speed("fast")
    with pytest.raises(ValueError):
        units.parse_speed("fast")


def test_speeds_out():
    assert units.format_speed(400 * 10**9) == "400G"
    assert units.parse_speed(units.format_speed(2_500_000)) == 2_500_000
    assert units.fmt_bps(95.3e6) == "95.3 Mb/s" and units.fmt_bps(None) == "-"
    assert units.fmt_bps(1.2e12) == "1.2 Tb/s" and units.fmt_bps(812) == "812 b/s"
    assert units.fmt_speed(400e9) == "400G" and units.fmt_speed(2.5e6) == "2.5M"
    assert units.fmt_bps(12.4, short=True, small=".0f") == "12"


def test_ratios():
    assert units.parse_ratio("6:2") == (6, 2) and units.format_ratio(6, 2) == "3:1"
    assert generate.parse_ratio("6:2") == sizing.parse_ratio("6:2") == (3, 1)
    with pytest.raises(TopologyError):
        generate.parse_ratio("0:1")
    with pytest.raises(PlanError):
        sizing.parse_ratio("1:3")


def test_sizes_rates_durations():
    assert units.parse_size("64KiB") == 65536 and units.parse_size("1MB") == 10**6
    assert units.parse_rate("20kpps") == units.Rate(2e4, "pps")
    assert units.parse_duration("500ms") == 0.5 and units.fmt_us(12_400) == "12.4 ms"
