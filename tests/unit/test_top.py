"""`railab top`: rates from two synthetic counter snapshots, sorting, and `--once` end to
end against a fake agent (no root, no lab)."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from dataplane.agent.protocol import CounterSnapshot
from dataplane.cli import top
from dataplane.lab.ports import compute_rows
from dataplane.runtime import labspec
from dataplane.topology.generate import generate


def port(tx_bytes=0, rx_bytes=0, drops=None, **extra):
    return {"tx_packets": tx_bytes // 1000, "tx_bytes": tx_bytes, "rx_packets": rx_bytes // 1000,
            "rx_bytes": rx_bytes, "drops": drops or {"queue_full": 0, "no_route": 0}, **extra}


def snapshot(ports: dict[str, dict[str, dict]]) -> dict:
    """A counters reply as the agent sends it (its field names)."""
    return {"switches": {sw: {"ports": p, "groups": {}} for sw, p in ports.items()}}


def rows(prev, cur, dt, spec=None):
    return compute_rows(prev and CounterSnapshot.from_wire(prev), CounterSnapshot.from_wire(cur),
                        dt, spec)


@pytest.fixture(scope="module")
def spec():
    return labspec.build(generate("clos2", name="toptest"))


def test_rates_from_two_snapshots(spec):
    prev = snapshot({"leaf1": {"up1": port(1_000_000, 500, speed_bps=100_000_000, nominal_speed_bps=400e9),
                               "up2": port(0, 0, speed_bps=100_000_000, nominal_speed_bps=400e9)}})
    cur = copy.deepcopy(prev)
    c = cur["switches"]["leaf1"]["ports"]
    c["up1"].update(tx_bytes=1_000_000 + 3_125_000, rx_bytes=500 + 1_250_000, ecn_marked=40,
                    utilization=0.49, queue_bytes=1500)
    c["up1"]["drops"] = {"queue_full": 10, "no_route": 0}
    c["up2"].update(tx_bytes=625_000)
    found = rows(prev, cur, 0.5, spec)
    assert [r.port for r in found] == ["up1", "up2"]          # busiest first
    up1, up2 = found
    assert up1.tx_bps == pytest.approx(3_125_000 * 8 / 0.5)   # 50 Mb/s
    assert up1.rx_bps == pytest.approx(1_250_000 * 8 / 0.5)   # 20 Mb/s
    assert up1.util == pytest.approx(0.5)                     # 50 Mb/s of 100 Mb/s emulated
    assert up1.model_util == pytest.approx(0.49) and up1.queue_bytes == 1500
    assert up1.drops_per_s == pytest.approx(20.0) and up1.drops_delta == {"queue_full": 10}
    assert up1.drops_total == 10
    assert up1.ecn_per_s == pytest.approx(80.0)
    assert up1.speed_bps == 100_000_000 and up1.nominal_bps == 400e9
    assert up1.direction == "up" and up1.peer.startswith("spine")
    assert up2.util == pytest.approx(0.1) and up2.model_util == 0.0 and up2.queue_bytes == 0


def test_speeds_as_the_agent_names_them_and_no_model():
    prev = snapshot({"s": {"a": port(0, speed_bps=1e8, nominal_speed_bps=400e9), "b": port(0)}})
    cur = snapshot({"s": {"a": port(1_250_000, speed_bps=1e8, nominal_speed_bps=400e9),
                          "b": port(2_500_000)}})
    found = rows(prev, cur, 1.0)
    a = next(r for r in found if r.port == "a")
    b = next(r for r in found if r.port == "b")
    assert a.util == pytest.approx(0.1) and a.nominal_bps == 400e9 and a.speed_bps == 1e8
    assert b.util is None and b.tx_bps == pytest.approx(20e6)   # no port model: rate only
    assert b.model_util is None and b.queue_bytes is None
    assert [r.port for r in found] == ["a", "b"]   # known utilisation ranks before raw rate


def test_a_field_the_agent_never_sends_is_refused():
    with pytest.raises(TypeError):   # the runner once read a 'scaled_bps' nobody sent
        rows(None, snapshot({"s": {"a": port(0, scaled_bps=1e8)}}), 1.0)


def test_counter_reset_and_first_poll():
    prev = snapshot({"s": {"a": port(10_000_000)}})
    cur = snapshot({"s": {"a": port(1_000)}})          # agent restarted: counts from zero
    assert rows(prev, cur, 1.0)[0].tx_bps == pytest.approx(8_000)
    first = rows(None, cur, 1.0)[0]
    assert first.tx_bps == 0 and first.drops_per_s == 0


def test_table_renders(spec):
    from rich.console import Console

    prev = snapshot({"leaf1": {"up1": port(0, speed_bps=10**8, nominal_speed_bps=4 * 10**11)}})
    cur = snapshot({"leaf1": {"up1": port(10_000_000, speed_bps=10**8, nominal_speed_bps=4 * 10**11,
                                          drops={"queue_full": 5})}})
    table_rows = rows(prev, cur, 1.0, spec) * 3
    console = Console(width=200, record=True, color_system=None)
    console.print(top.build_table(table_rows, lab="toptest", interval=0.5, limit=2))
    text = " ".join(console.export_text().split())  # the caption wraps at the table width
    assert "80M" in text and "80%" in text and "5 queue_full" in text and "15 since start" in text
    assert "100Mb/s emulated, 400Gb/s nominal" in text
    assert "1 quieter ports not shown" in text


def test_once_end_to_end(monkeypatch, capsys, spec):
    monkeypatch.setenv("COLUMNS", "160")
    import dataplane.cli.main as cli_main
    from dataplane.agent import client

    snaps = [snapshot({"leaf1": {"up1": port(0, speed_bps=10**8, nominal_speed_bps=4 * 10**11),
                                 "down1": port(0, speed_bps=10**8, nominal_speed_bps=4 * 10**11)}}),
             snapshot({"leaf1": {"up1": port(2_500_000, speed_bps=10**8, nominal_speed_bps=4 * 10**11),
                                 "down1": port(0, speed_bps=10**8, nominal_speed_bps=4 * 10**11)}})]
    calls = []

    def fake_request(lab, op, **fields):
        calls.append((lab, op, fields))
        return snaps[len(calls) - 1]

    clock = iter([0.0, 0.0, 0.5, 0.5])
    monkeypatch.setattr(client, "request", fake_request)
    monkeypatch.setattr(top, "load_lab", lambda lab: SimpleNamespace(spec=spec))
    monkeypatch.setattr(top.time, "sleep", lambda s: None)
    monkeypatch.setattr(top.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(cli_main, "VERB_MODULES", ("top",))
    status = cli_main.main(["top", "toptest", "--once", "--interval", "0.5"])
    out = capsys.readouterr().out
    assert status == 0
    assert [c[:2] for c in calls] == [("toptest", "counters")] * 2
    assert "40M" in out and "40%" in out           # 2.5 MB in 0.5 s = 40 Mb/s of 100 Mb/s
    assert out.index("up1") < out.index("down1")   # busiest first


def test_bad_interval(monkeypatch, capsys):
    import dataplane.cli.main as cli_main

    monkeypatch.setattr(cli_main, "VERB_MODULES", ("top",))
    assert cli_main.main(["top", "x", "--interval", "0"]) == 2
    assert "--interval" in capsys.readouterr().err


def test_real_queue_shows_the_shaper_backlog():
    prev = snapshot({"s": {"a": port(0, speed_bps=1e7)}})
    cur = copy.deepcopy(prev)
    cur["switches"]["s"]["ports"]["a"].update(queue_bytes=900, shaper={"backlog_bytes": 4_000, "drops": 0})
    (row,) = rows(prev, cur, 1.0)
    assert row.queue_bytes == 4_000


def test_paused_column_shows_the_share_of_time_a_port_paused_its_neighbour():
    pfc0 = {"paused_ns": 0, "pause_frames_sent": 0, "pause_frames_received": 0}
    prev = snapshot({"leaf1": {"down1": port(speed_bps=2_000_000, pfc=pfc0),
                               "up1": port(speed_bps=2_000_000, pfc=pfc0)}})
    cur = copy.deepcopy(prev)
    cur["switches"]["leaf1"]["ports"]["down1"]["pfc"] = {**pfc0, "paused_ns": 250_000_000,
                                                         "pause_frames_sent": 3}
    cur["switches"]["leaf1"]["ports"]["up1"]["pfc"] = {**pfc0, "pause_frames_received": 2}
    by_port = {r.port: r for r in rows(prev, cur, 0.5)}
    assert by_port["down1"].paused == pytest.approx(0.5) and by_port["up1"].paused == 0
    assert by_port["up1"].pauses_received == 2
    table = top.build_table(list(by_port.values()), lab="x")
    assert "paused" in [c.header for c in table.columns]
    plain = snapshot({"leaf1": {"down1": port(speed_bps=2_000_000)}})    # PFC off: no column
    table = top.build_table(rows(plain, plain, 0.5), lab="x")
    assert "paused" not in [c.header for c in table.columns]
