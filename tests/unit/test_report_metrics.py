"""Metric definitions (dataplane/report/metrics.py), exact on hand-made runs."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from dataplane.report import faultruns, idlemodel, rundata, table
from dataplane.report import metrics as m


def uplink(a: str, b: str, nbytes: int, *, down: int = 0, scaled=1e8, roles=("leaf", "spine")) -> dict:
    return {"a": a, "b": b, "a_role": roles[0], "b_role": roles[1], "bytes_ab": nbytes, "bytes_ba": down,
            "packets_ab": nbytes // 1000, "packets_ba": down // 1000, "speed_bps": 400e9, "scaled_bps": scaled}


def host_link(host_port: str, leaf_port: str, nbytes: int = 0) -> dict:
    return {"a": host_port, "b": leaf_port, "a_role": "host", "b_role": "leaf", "bytes_ab": nbytes,
            "bytes_ba": 0, "packets_ab": 0, "packets_ba": 0, "speed_bps": 400e9, "scaled_bps": 1e8}


def flow(fid, src="srv1:nic0", dst="srv2:nic0", cls="elephant", **kw) -> dict:
    base = {"flow_id": fid, "cls": cls, "src": src, "dst": dst, "offered_bps": 5e7, "sent_packets": 100,
            "packets": 100, "bytes": 100_000, "payload_bytes": 90_000, "lost": 0, "duplicates": 0,
            "out_of_order": 0, "reorder_hist": {}, "ce": 0, "rx_bps": 0.0, "messages_completed": 0,
            "messages_incomplete": 0, "completions_us": [], "latency_ns": {}}
    base.update(kw)
    return base


def run_with(loads: list[int], flows=(), duration_s: float = 2.0, **extra) -> dict:
    links = [uplink(f"leaf1:up{i + 1}", f"spine{i + 1}:down1", b) for i, b in enumerate(loads)]
    return {"mode": "ecmp", "seed": 1, "duration_s": duration_s, "nodes": [], "links": links,
            "flows": list(flows), "switches": {"drops": 0, "ecn_marked": 0, "drops_by_reason": {}}, **extra}


def test_jain_equal_is_one_and_one_hot_is_one_over_n():
    met = m.run_metrics(run_with([1000] * 8))
    assert met["jain"] == pytest.approx(1.0)
    assert met["uplink_max_mean"] == pytest.approx(1.0)
    assert met["idle_uplinks"] == 0 and met["uplinks"] == 8
    hot = m.run_metrics(run_with([8000] + [0] * 7))
    assert hot["jain"] == pytest.approx(1 / 8)
    assert hot["uplink_max_mean"] == pytest.approx(8.0)
    assert hot["idle_uplinks"] == 7


def test_jain_and_max_mean_known_values():
    # loads 1,2,3 (x const): Jain = 36 / (3 * 14) = 6/7; max/mean = 3/2
    met = m.run_metrics(run_with([1000, 2000, 3000]))
    assert met["jain"] == pytest.approx(6 / 7)
    assert met["uplink_max_mean"] == pytest.approx(1.5)
    assert met["uplink_cv"] == pytest.approx((2 / 3) ** 0.5 / 2)


def test_zero_and_no_uplinks():
    zero = m.run_metrics(run_with([0, 0, 0, 0]))
    assert zero["jain"] == 1.0 and zero["uplink_max_mean"] == 1.0 and zero["idle_uplinks"] == 4
    none = m.run_metrics(run_with([]))
    assert none["jain"] is None and none["uplink_max_mean"] is None and none["uplinks"] == 0
    assert none["max_uplink_util"] is None and none["expected_idle_uplinks"] is None


def test_idle_threshold_is_one_percent_of_the_busiest_uplinks_data():
    # data = bytes - 80 per frame (frames of 1000 bytes here): 92,000 on the busiest;
    # 919 is under 1 % of it, 920 is not
    met = m.run_metrics(run_with([100_000, 919, 920, 50_000, 0]))
    assert met["idle_uplinks"] == 2


def test_an_uplink_that_carried_only_acks_and_cnps_is_idle():
    """Colliding flows get their packets CE-marked and the receivers send a CNP back for
    each: 5,000 CNPs of 74 bytes on an uplink that carried no data frame are 4 % of the
    busiest uplink's bytes, yet the uplink is idle for the data."""
    run = run_with([10_000_000, 5_000_000, 0])
    run["links"][2].update(bytes_ab=5_000 * 74, packets_ab=5_000)
    met = m.run_metrics(run)
    assert met["idle_uplinks"] == 1 and met["idle_leaf_uplinks"] == 1


def test_uplink_direction_and_tiers():
    links = [uplink("leaf1:up1", "spine1:down1", 1000, down=9999),           # a->b is up
             uplink("spine1:down2", "leaf2:up1", 5555, down=3000, roles=("spine", "leaf")),  # b->a is up
             uplink("spine1:up1", "core1:down1", 2000, roles=("spine", "core")),
             uplink("spine1:down9", "spine2:down9", 7777, roles=("spine", "spine"))]  # not an uplink
    run = {"duration_s": 1.0, "links": links, "flows": []}
    ups = rundata.uplinks(run)
    assert [(u["lower"], u["bytes"], u["tier"]) for u in ups] == [
        ("leaf1:up1", 1000, "leaf-spine"), ("leaf2:up1", 3000, "leaf-spine"), ("spine1:up1", 2000, "spine-core")]
    assert ups[0]["load_bps"] == 8000 and ups[0]["util"] == pytest.approx(8000 / 1e8)
    met = m.run_metrics(run)
    assert met["uplinks"] == 3 and met["max_uplink_util"] == pytest.approx(24000 / 1e8)


def test_goodput_loss_reorder_counts():
    flows = [flow(1, payload_bytes=250_000, packets=90, sent_packets=100, lost=10, out_of_order=9,
                  duplicates=2, ce=4, messages_completed=3, messages_incomplete=1),
             flow(2, cls="mice", payload_bytes=50_000, packets=10, sent_packets=10, out_of_order=1),
             flow(3, cls="protocol", payload_bytes=0, packets=0, sent_packets=0)]
    met = m.run_metrics(run_with([1], flows, duration_s=2.0,
                                 switches={"drops": 7, "ecn_marked": 11, "drops_by_reason": {}}))
    assert met["goodput_bps"] == pytest.approx(300_000 * 8 / 2)
    assert met["elephant_goodput_bps"] == pytest.approx(250_000 * 8 / 2)
    assert met["offered_bps"] == pytest.approx(1.5e8)
    assert met["loss_packets"] == 10 and met["loss_pct"] == pytest.approx(10 / 110 * 100)
    assert met["reorder_pct"] == pytest.approx(10 / 100 * 100)
    assert met["duplicates"] == 2 and met["ce_packets"] == 4
    assert met["drops"] == 7 and met["ecn_marked"] == 11
    assert met["messages_completed"] == 3 and met["messages_incomplete"] == 1


def test_latency_is_weighted_by_packets():
    flows = [flow(1, latency_ns={"count": 300, "mean": 10_000, "max": 50_000, "min": 1, "p50": 1, "p99": 1}),
             flow(2, latency_ns={"count": 100, "mean": 50_000, "max": 90_000, "min": 1, "p50": 1, "p99": 1}),
             flow(3)]                                             # received nothing
    met = m.run_metrics(run_with([1], flows))
    assert met["latency_mean_us"] == pytest.approx((300 * 10 + 100 * 50) / 400)
    assert met["latency_max_us"] == pytest.approx(90)
    assert m.run_metrics(run_with([1], [flow(1)]))["latency_mean_us"] is None


def test_receiver_drops_are_reported_apart():
    assert m.run_metrics(run_with([1], [flow(1)], receiver_drops=5))["receiver_drops"] == 5
    assert m.run_metrics(run_with([1], [flow(1)]))["receiver_drops"] == 0


def test_fct_percentiles_over_all_flows():
    flows = [flow(1, completions_us=[float(x) for x in range(1, 51)]),
             flow(2, cls="mice", completions_us=[float(x) for x in range(51, 101)])]
    met = m.run_metrics(run_with([1], flows))
    assert met["fct_p50_us"] == pytest.approx(50.5)      # linear interpolation, 1..100
    assert met["fct_p99_us"] == pytest.approx(99.01)
    assert met["mice_fct_p99_us"] == pytest.approx(51 + 0.99 * 49)
    empty = m.run_metrics(run_with([1], [flow(1)]))
    assert empty["fct_p50_us"] is None and empty["fct_p99_us"] is None


def test_reorder_hist_keys_from_json():
    run = run_with([1], [flow(1, reorder_hist={"1": 3, "2": 1}), flow(2, reorder_hist={1: 2})])
    assert rundata.reorder_histogram(json.loads(json.dumps(run))) == {1: 5, 2: 1}


def test_expected_idle():
    assert idlemodel.expected_idle(8, 8) == pytest.approx(8 * (7 / 8) ** 8)
    assert idlemodel.expected_idle(8, 8) == pytest.approx(2.75, abs=0.01)
    assert idlemodel.expected_idle(0, 4) == 4
    assert idlemodel.expected_idle(1, 1) == 0


@given(st.integers(0, 30), st.integers(1, 16))
def test_idle_pmf_is_a_distribution_with_the_right_mean(n, k):
    pmf = idlemodel.idle_pmf(n, k)
    assert len(pmf) == k + 1 and sum(pmf) == pytest.approx(1.0)
    assert sum(i * p for i, p in enumerate(pmf)) == pytest.approx(idlemodel.expected_idle(n, k))


def test_expected_idle_for_run_from_cabling():
    # leaf1 has srv1, srv2; leaf2 has srv3; 4 uplinks each. Elephants: 2 leave leaf1, one
    # stays inside it (srv1 -> srv2), one leaves leaf2; mice are ignored.
    links = [host_link("srv1:nic0", "leaf1:down1"), host_link("srv2:nic0", "leaf1:down2"),
             host_link("srv3:nic0", "leaf2:down1")]
    links += [uplink(f"leaf{l}:up{i}", f"spine{i}:down{l}", 1000) for l in (1, 2) for i in range(1, 5)]
    flows = [flow(1, "srv1:nic0", "srv3:nic0"), flow(2, "srv2:nic0", "srv3:nic0"),
             flow(3, "srv1:nic0", "srv2:nic0"), flow(4, "srv3:nic0", "srv1:nic0"),
             flow(5, "srv3:nic0", "srv1:nic0", cls="mice")]
    run = {"duration_s": 1.0, "links": links, "flows": flows}
    assert idlemodel.leaf_elephants(run) == {"leaf1": (2, 4), "leaf2": (1, 4)}
    assert idlemodel.expected_idle_for_run(run) == pytest.approx(4 * 0.75 ** 2 + 4 * 0.75)
    run["flows"].append(flow(6, "srv9:nic0", "srv1:nic0"))      # unknown endpoint
    assert idlemodel.expected_idle_for_run(run) is None


def test_mode_summary_and_idle_summary():
    runs = [run_with(loads, seed=s) for s, loads in enumerate(([1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]))]
    s = m.mode_summary(runs)
    idle = s["idle_uplinks"]
    assert idle["values"] == [2, 3, 1] and idle["mean"] == 2 and idle["std"] == pytest.approx(1.0)
    assert idle["min"] == 1 and idle["p50"] == 2 and idle["max"] == 3 and idle["n"] == 3
    assert s["seeds"] == [0, 1, 2] and len(s["runs"]) == 3
    assert s["fct_p50_us"] is None                        # no completions anywhere
    single = m.mode_summary(runs[:1])["jain"]
    assert single["std"] == 0.0 and single["mean"] == single["min"] == single["max"]
    summary = m.idle_summary(runs)
    assert summary["measured"] == [2, 3, 1] and summary["measured_mean"] == 2
    assert summary["leaf_uplinks"] == 4


def test_group_runs_accepts_the_result_shapes():
    a, b = run_with([1]), {**run_with([1]), "mode": "spray-rr"}
    assert list(rundata.group_runs([a, b])) == ["ecmp", "spray-rr"]
    assert list(rundata.group_runs({"x": a, "y": [a, b]})) == ["x", "y"]
    grouped = rundata.group_runs({"name": "e", "runs": [a, b], "sweep": [a, a]})
    assert list(grouped) == ["ecmp", "spray-rr", "ecmp sweep"] and len(grouped["ecmp sweep"]) == 2
    assert list(rundata.group_runs({**a, "label": "ecmp-s1"})) == ["ecmp-s1"]
    assert rundata.results_title({"name": "e", "runs": []}) == "e"


def test_render_text_units_and_sweep_line():
    flows = [flow(1, payload_bytes=12_500_000, completions_us=[120.0, 130.0, 2500.0])]
    one = run_with([1000] * 4, flows, duration_s=1.0)
    text = table.render_text({"name": "demo", "runs": [one]})
    assert "demo" in text and "100 Mb/s" in text and "130 µs" in text and "2.45 ms" in text
    assert "emulated at 100 Mb/s (nominal 400 Gb/s)" in text
    sweep = [run_with([1, 1, 0, 0], seed=s) for s in range(3)]
    text = table.render_text({"name": "s", "sweep": sweep})
    assert "ecmp sweep" in text and "±" in text and "idle leaf uplinks 2.00 ± 0.00 of 4 measured" in text
    assert "\x1b[" not in text   # plain text


def test_metrics_json_round_trip_keeps_every_value():
    """results.json holds mode_summary as it is: strict JSON (no NaN), and reading it back
    gives the same values (no tuples, no numpy scalars that json turns into something else)."""
    runs = [run_with([1, 2, 3], [flow(1, completions_us=[1.0])]), run_with([2, 2, 2], seed=2)]
    s = m.mode_summary(runs)
    assert set(m.METRIC_KEYS) <= set(s)
    assert json.loads(json.dumps(s, allow_nan=False)) == s
    assert s["seeds"] == [1, 2] and s["label"] == "ecmp" and len(s["runs"]) == 2
    assert s["jain"]["n"] == 2 and s["jain"]["values"] == pytest.approx([6 / 7, 1.0])
    assert s["jain"]["mean"] == pytest.approx((6 / 7 + 1) / 2)


# --- fault figures (issue 17) ---------------------------------------------------------

MS = 1_000_000
T_DOWN, T_UP = 10_000 * MS, 11_000 * MS          # CLOCK_MONOTONIC ns of the two events


def fault_run(flows, events=None) -> dict:
    events = events if events is not None else [
        {"t": 1.0, "what": "link-down leaf1:up1 spine1:down1", "t_ns": T_DOWN},
        {"t": 2.0, "what": "link-up leaf1:up1 spine1:down1", "t_ns": T_UP}]
    return run_with([1000], flows, events=events)


def timed(fid, on_failed, windows=(), gap_us=1000.0, note=None, **kw):
    """A flow record as the receiver writes it: loss windows [start, end, lost] in ns."""
    lost = sum(w[2] for w in windows)
    outage = (windows[-1][1] - windows[0][0]) / 1000 if windows else 0.0
    recovery = (windows[0][1] - windows[0][0]) / 1000 if windows else 0.0
    if note:
        outage = recovery = None
    return flow(fid, on_failed_element=on_failed, lost=lost, packets=100 - lost, max_gap_us=gap_us,
                outage_us=outage, recovery_us=recovery, loss_windows_ns=[list(w) for w in windows],
                timing_note=note, **kw)


def test_fault_figures_network_side_apart_from_host_side():
    flows = [
        # lost 2 packets sent 0.5 ms after the link went down: 0.2 ms outage, but its
        # receiver saw a 50 ms pause
        timed(1, True, [(T_DOWN + MS // 2, T_DOWN + MS // 2 + 200_000, 2)], gap_us=50_000),
        # spread loss: three single holes over 0.9 ms, each recovered by the next packet
        timed(2, True, [(T_DOWN + k * 300_000, T_DOWN + k * 300_000 + 100_000, 1) for k in range(4)],
              gap_us=3_000),
        timed(3, False, gap_us=47_000),   # untouched, but its host stalled 47 ms
    ]
    met = m.run_metrics(fault_run(flows))
    assert met["flows_on_failed"] == 2 and met["loss_on_failed"] == 6 and met["loss_elsewhere"] == 0
    assert met["outage_ms"] == pytest.approx(1.0)        # flow 2: 0 .. 0.9 ms + its last 0.1 ms
    assert met["recovery_ms"] == pytest.approx(0.2)      # flow 1's hole
    assert met["outage_elsewhere_ms"] == 0
    assert met["host_gap_on_failed_ms"] == pytest.approx(50.0)
    assert met["host_gap_elsewhere_ms"] == pytest.approx(47.0)
    assert met["timing_unknown"] == 0


def test_a_repair_a_second_later_is_a_second_outage_not_one_long_one():
    f = timed(1, True, [(T_DOWN + 100_000, T_DOWN + 200_000, 1), (T_UP + 50_000, T_UP + 350_000, 3)])
    assert f["outage_us"] > 1e6                      # the flow-level span covers both
    t = faultruns.flow_outage(f, [T_DOWN, T_UP])
    assert t["outage_ms"] == pytest.approx(0.3) and t["recovery_ms"] == pytest.approx(0.3)
    # without event times: the flow's own span (the definition, coarser)
    assert faultruns.flow_outage(f)["outage_ms"] == pytest.approx(f["outage_us"] / 1000)


def test_unknown_timing_is_none_never_a_number():
    flows = [timed(1, True, [(T_DOWN, T_DOWN + MS, 5)]),
             timed(2, True, [(T_DOWN, T_DOWN + MS, 5)], note="send clock went backwards"),
             flow(3, on_failed_element=False, packets=0, lost=100)]       # never received
    met = m.run_metrics(fault_run(flows))
    assert met["outage_ms"] is None and met["recovery_ms"] is None
    assert met["outage_elsewhere_ms"] is None and met["timing_unknown"] == 2
    text = table.render_text(fault_run(flows), title="t")
    line = next(x for x in text.split("t: faults")[1].splitlines() if x.startswith("│ ecmp"))
    row = [c.strip() for c in line.split("│")[1:-1]]
    assert row[0] == "ecmp" and row[4:7] == ["- (2 unknown)", "-", "-"]
    # a record from before send times were kept: no loss is still 0, a loss is unknown
    assert faultruns.flow_outage(flow(4, lost=0))["outage_ms"] == 0
    assert faultruns.flow_outage(flow(5, lost=3, packets=97))["outage_ms"] is None


def test_dataplane_reaction_from_the_agent_log():
    fired = [{"t": 1.0, "what": "link-down a b", "t_ns": T_DOWN}, {"t": 2.0, "what": "link-up a b", "t_ns": T_UP}]
    log = [
        {"event": "port_down", "switch": "leaf1", "port": "up1", "t_rx_ns": T_DOWN + 300_000, "t_map_ns": T_DOWN + 350_000},
        {"event": "port_down", "switch": "spine1", "port": "down1", "t_rx_ns": T_DOWN + 400_000, "t_map_ns": T_DOWN + 420_000},
        {"event": "withdraw_sent", "switch": "spine1", "to": "leaf2", "seq": 4, "t_tx_ns": T_DOWN + 430_000, "t_ns": T_DOWN + 440_000},
        {"event": "withdraw_received", "switch": "leaf2", "from": "spine1", "seq": 4, "t_rx_ns": T_DOWN + 500_000, "t_map_ns": T_DOWN + 530_000},
        {"event": "port_up", "switch": "leaf1", "port": "up1", "t_rx_ns": T_UP + 9 * MS, "t_map_ns": T_UP + 9 * MS},
    ]
    down, up = faultruns.dataplane_reaction(fired, log, until_ns=T_UP + 100 * MS)
    assert down["failover_us"] == pytest.approx(420) and down["notice_us"] == pytest.approx(100)
    assert [x["netlink_to_mask_us"] for x in down["local"]] == [pytest.approx(50), pytest.approx(20)]
    assert down["remote"][0]["rx_to_map_us"] == pytest.approx(30)
    assert up["failover_us"] == pytest.approx(9000) and up["local"][0]["netlink_to_mask_us"] is None
    assert up["notice_us"] is None
    met = m.run_metrics(fault_run([timed(1, True)], events=[down, up]))
    assert met["failover_ms"] == pytest.approx(9.0) and met["notice_ms"] == pytest.approx(0.1)


def stamp(dead=0, notice=0, excl=0, avoid=0) -> dict:
    return {"dead_ns": dead, "notice_ns": notice, "excl_ns": excl, "avoid_ns": avoid}


def test_reaction_from_the_data_planes_stamps():
    """spine1 met the dead group first; leaf1 and leaf2 avoided it 0.3 / 0.8 ms later (the
    reaction is the first of them); leaf3's
    avoid stamp is older than the failure (steered by something else): not an upstream."""
    stamps = {"spine1": stamp(dead=T_DOWN + 2 * MS, notice=T_DOWN + 2 * MS + 20_000),
              "leaf1": stamp(excl=T_DOWN + 2 * MS + 250_000, avoid=T_DOWN + 2 * MS + 300_000),
              "leaf2": stamp(avoid=T_DOWN + 2 * MS + 800_000),
              "leaf3": stamp(avoid=T_DOWN + MS),
              "leaf4": stamp(dead=T_DOWN + 3 * MS)}
    r = faultruns.reaction_from_stamps(stamps)
    assert r["reporter"] == "spine1" and r["reaction_us"] == pytest.approx(300)
    assert r["slowest_us"] == pytest.approx(800)
    assert r["per_upstream_us"] == {"leaf1": pytest.approx(300), "leaf2": pytest.approx(800)}
    assert r["notice_us"] == pytest.approx(20)
    # the agent path: no data-plane notice; no dead packet or no avoiding upstream: no figure
    assert faultruns.reaction_from_stamps({"spine1": stamp(dead=T_DOWN), "leaf1": stamp(avoid=T_DOWN + MS)}) \
        == {"reporter": "spine1", "reaction_us": pytest.approx(1000), "slowest_us": pytest.approx(1000),
            "per_upstream_us": {"leaf1": pytest.approx(1000)},
            "notice_us": None}
    assert faultruns.reaction_from_stamps({"leaf1": stamp(avoid=T_DOWN)}) is None
    assert faultruns.reaction_from_stamps({"spine1": stamp(dead=T_DOWN)}) is None
    assert faultruns.reaction_from_stamps(None) is None


def test_avoided_after_the_cut_is_measured_with_or_without_a_dead_packet():
    """The agent path's WITHDRAW usually leaves before any packet meets the dead group:
    the time from the cut to the first avoiding packet is there all the same; an avoid
    stamp older than the cut, or none, gives no figure."""
    agent = {"t_ns": T_DOWN, "stamps": {"leaf1": stamp(avoid=T_DOWN + 5 * MS), "leaf2": stamp(avoid=T_DOWN + 7 * MS),
                                        "leaf3": stamp(avoid=T_DOWN - MS)}}
    assert faultruns.reaction_from_stamps(agent["stamps"]) is None
    assert faultruns.avoided_after_us(agent) == pytest.approx(5000)
    assert faultruns.avoided_after_us({"t_ns": T_DOWN, "stamps": {"leaf3": stamp(avoid=T_DOWN - MS)}}) is None
    assert faultruns.avoided_after_us({"t_ns": T_DOWN, "stamps": None}) is None


def test_fault_table_shows_the_reaction_in_wall_and_fabric_time():
    events = [{"t": 1.0, "what": "link-down a b", "t_ns": T_DOWN,
               "stamps": {"spine1": stamp(dead=T_DOWN + MS), "leaf1": stamp(avoid=T_DOWN + MS + 400_000)}},
              {"t": 2.0, "what": "link-up a b", "t_ns": T_UP}]
    run = fault_run([timed(1, True)], events=events)
    run["clock"] = {"stretch": 4000.0}
    met = m.run_metrics(run)
    assert met["reaction_ms"] == pytest.approx(0.4) and met["reaction_fabric_ms"] == pytest.approx(0.4 / 4000)
    text = table.render_text(run, title="t", width=400)
    line = next(x for x in text.split("t: faults")[1].splitlines() if x.startswith("│ ecmp"))
    row = [c.strip() for c in line.split("│")[1:-1]]
    assert row[-2:] == [table.fmt_value("ms", 0.4), table.fmt_value("ms", 0.0001)]
    del run["clock"]
    assert m.run_metrics(run)["reaction_fabric_ms"] is None
    run["events"][0].pop("stamps")
    assert m.run_metrics(run)["reaction_ms"] is None


def test_links_cut_at_the_same_time_are_one_fault():
    events = [{"t": 1.0, "at": 1.0, "what": f"link-down spine1:down{i}", "t_ns": T_DOWN + i * MS} for i in range(4)]
    f = timed(1, True, [(T_DOWN + 500_000, T_DOWN + 600_000, 1), (T_DOWN + 3_500_000, T_DOWN + 3_800_000, 3)])
    assert faultruns.flow_outage(f, faultruns.fault_starts({"events": events}))["outage_ms"] == pytest.approx(3.3)


def test_fault_table_says_when_receivers_dropped_frames():
    run = fault_run([timed(1, True, [(T_DOWN, T_DOWN + MS, 2)])])
    run["receiver_drops"] = 2
    text = table.render_text(run, title="t", width=400)
    assert "ecmp: the receivers' sockets dropped 2 frames" in text


def test_a_port_event_belongs_to_the_fault_that_named_its_port():
    """Four links cut one after the other: the agent, late, handles the first link's
    ports after the last cut; they are still the first cut's reaction."""
    fired = [{"t": 1.0, "at": 1.0, "what": f"link-down spine1:down{i} leaf1:up{i}", "t_ns": T_DOWN + i * MS}
             for i in (1, 2)]
    log = [{"event": "port_down", "switch": "spine1", "port": "down2", "t_rx_ns": T_DOWN + 2 * MS + 10,
            "t_map_ns": T_DOWN + 2 * MS + 20},
           {"event": "port_down", "switch": "spine1", "port": "down1", "t_rx_ns": T_DOWN + 3 * MS,
            "t_map_ns": T_DOWN + 3 * MS + 50_000},
           {"event": "host_learned", "switch": "leaf1", "t_ns": T_DOWN + 99 * MS}]
    one, two = faultruns.dataplane_reaction(fired, log, until_ns=T_DOWN + 50 * MS)
    assert [x["port"] for x in one["local"]] == ["down1"] and one["failover_us"] == pytest.approx(2050)
    assert [x["port"] for x in two["local"]] == ["down2"] and two["failover_us"] == pytest.approx(0.02)


def test_fault_table_says_when_faults_came_late():
    t0 = T_DOWN - 1_000 * MS
    run = fault_run([timed(1, True)], events=[
        {"t": 1.3, "at": 1.0, "what": "link-down a b", "t_ns": t0 + 1_250 * MS},
        {"t": 2.3, "at": 1.8, "what": "link-up a b", "t_ns": t0 + 2_300 * MS}])
    run["t0_ns"] = t0
    assert faultruns.fault_lateness_s(run) == (pytest.approx(0.5), True)
    text = table.render_text(run, title="t", width=400)
    assert "ecmp: faults made up to 0.50 s after their scheduled time (some after the senders" in text
    run["events"][1]["t_ns"] = t0 + 1_850 * MS
    assert "after the senders" not in table.render_text(run, title="t", width=400)


def test_pfc_table_shows_pauses_holds_victims_and_the_ports_that_paused():
    flows = [flow(1, dscp=26), flow(2, cls="mice", dscp=26, payload_bytes=25_000, lost=3),
             flow(3, cls="mice", dscp=0, payload_bytes=25_000, lost=5)]
    ports = {f"leaf1:down{i}": {"pause_frames_sent": 10, "paused_ns": 500_000_000} for i in (1, 2, 3, 10)}
    ports["spine1:down2"] = {"pause_frames_sent": 2, "paused_ns": 100_000_000, "pause_frames_received": 1,
                             "holds": 1, "held_ns": 250_000_000}
    run = run_with([1000] * 4, flows, duration_s=1.0, port_model={"pfc_dscp": 26}, pfc_ports=ports)
    met = m.run_metrics(run)
    assert met["mice_goodput_bps"] == 50_000 * 8
    assert met["lossless_lost"] == 3 and met["lossy_lost"] == 5
    assert met["pause_frames"] == 42 and met["pause_fraction"] == 0.5 and met["held_fraction"] == 0.25
    assert met["held_ports"] == ["spine1:down2"]
    text = table.render_text({"name": "hol", "runs": [run]})
    assert "hol: PFC" in text and "50.0 %" in text and "25.0 %" in text and "400 kb/s" in text
    assert "leaf1:down1..down10, spine1:down2" in text
    assert table.build_pfc_table({"name": "no pfc", "runs": [run_with([1000] * 4, flows)]}) is None
