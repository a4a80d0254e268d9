"""Path navigation (dataplane/agent/nav.py) on deployed labs with real traffic: the global
controller spreads elephants ECMP piles up, without reordering them; bad requests change
nothing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataplane.errors import RuntimeStateError
from dataplane.lab.fabric import Fabric

from .conftest import ROOT, run_experiment, shipped

EXPERIMENTS = ROOT / "experiments"


@pytest.mark.flaky(reruns=1)   # the controller's rate readings (a Python thread) wobble on a loaded machine
def test_nav_spreads_eight_elephants_within_one_interval(tmp_path):
    report = run_experiment(EXPERIMENTS / "nav-elephants.yml", tmp_path, prefix="nav", timeout=900)
    ecmp, nav = report["modes"]["ecmp"], report["modes"]["nav"]
    print({k: (ecmp.get(k), nav.get(k)) for k in ("leaf_uplink_max_mean", "leaf_uplink_max_mean_settled",
                                                 "nav_leaf_uplink_max_mean", "reorder_pct", "loss_packets")})
    # From the controller's second round with traffic on (its first plan came at the end
    # of the round the flows started in), the sending leaf's uplinks carry equal loads:
    # 1.002 on a quiet machine. In a full suite run, after other labs' teardown, the
    # controller's rate readings wobble, it moves flows again, and four runs measured
    # 1.001-1.21; the test allows 1.3 (ECMP on the same run: 2.0-3.75).
    assert nav["nav_leaf_uplink_max_mean"] is not None, "fewer than 3 controller rounds with traffic"
    assert nav["nav_leaf_uplink_max_mean"] <= 1.3, nav
    # Its moves reorder (next to) nothing and lose nothing: 0 on a quiet machine (the paths
    # have no queue); under CPU contention one veth path's softirq can lag another by more
    # than the flow's 13 ms packet gap, and a move lets a few packets overtake (0.18-0.81 %
    # in a full suite run): allowed up to 1.5 %. The 64 KiB buffers hold the first round's
    # collisions, before the controller's first plan.
    assert nav["reorder_pct"] < 1.5 and nav["loss_packets"] == 0
    # ECMP on the same flows, the same lab, the same seeds: luck piles some up.
    assert ecmp["leaf_uplink_max_mean"] > 1.2 > nav["leaf_uplink_max_mean_settled"]


def test_nav_refuses_bad_requests_and_changes_nothing(lab_factory):
    flat = lab_factory(shipped("rail-only"), "navro")      # no spines: nothing to navigate
    with pytest.raises(RuntimeStateError, match="no leaf pair joined by more than one"):
        Fabric(flat.name).nav_start()
    assert Fabric(flat.name).nav_status()["running"] is False

    spec = lab_factory(shipped("clos2"), "navc2")
    fabric = Fabric(spec.name)
    fabric.nav_start(50)
    try:
        host_ip = next(iter(spec.host_nics.values()))[0].address.split("/")[0]
        before = fabric.nav_status()
        for flows, says in (([{"src": "10.99.99.99", "dst": host_ip, "bytes": 1000}], "not a host NIC"),
                            ([{"src": host_ip, "dst": "not-an-ip", "bytes": 1000}], "not an IPv4"),
                            ([{"src": host_ip, "dst": host_ip, "bytes": -5}], "0 or more")):
            with pytest.raises(RuntimeStateError, match=says) as err:
                fabric.nav_announce(flows)
            assert "\n" not in str(err.value)
        after = fabric.nav_status()
        assert after["flows"] == before["flows"] == [] and after["entries_per_switch"] == {}
        assert fabric.tm_list() == []
        # interval 0: refused, the running controller keeps its interval
        with pytest.raises(RuntimeStateError, match="interval must be more than 0"):
            fabric.nav_start(0)
        assert fabric.nav_status()["interval_us"] == 50
    finally:
        fabric.nav_stop()
    assert fabric.nav_status()["running"] is False


@pytest.mark.flaky(reruns=1)   # a starved agent can miss two 50 ms intervals on a shared machine
def test_nav_replans_around_a_dead_link_within_two_intervals(tmp_path):
    report = run_experiment(EXPERIMENTS / "nav-link-failure.yml", tmp_path, prefix="navf", timeout=900)
    results = json.loads((Path(report["folder"]) / "results.json").read_text())
    run = results["modes"]["nav"]["runs"][0]
    nav = run["nav"]
    down = next(e["t_ns"] for e in run["events"] if e["what"].startswith("link-down"))
    up = next(e["t_ns"] for e in run["events"] if e["what"].startswith("link-up"))
    during = [r for r in nav["rounds"] if "plan_t_ns" in r and down < r["plan_t_ns"] < up]
    # the first plan that saw the link dead came within two intervals of the cut, and from
    # it on no entry of the controller points at the dead link
    first = next(r for r in during if r["dead_links"])
    assert first["plan_t_ns"] - down <= 2 * nav["interval_wall_s"] * 1e9
    assert "leaf1-r0:up1" in first["dead_links"]
    assert all(r["entries_on_dead_links"] == 0 for r in during if r["dead_links"])
    # the flows it had placed over the dead uplink were moved off it
    assert any(e["event"] == "moved" and "leaf1-r0:up1" in e["from"] and down < e["t_ns"] < up
               for e in nav["events"])



@pytest.mark.parametrize("experiment", ["nav-collectives.yml", "nav-all-to-all.yml"])
def test_nav_host_places_a_collective_evenly_from_the_first_packet(experiment, tmp_path):
    """A ring all-reduce (nav-collectives) and an all-to-all (nav-all-to-all) across rails
    on a lab whose uplinks bind (4:1): the senders announce their flows, the controller
    places them before the first packet, every uplink of a sending leaf carries the same
    bytes over the whole run, and the collective ends when the fabric's capacity allows.
    ECMP on the same flows misses both."""
    report = run_experiment(EXPERIMENTS / experiment, tmp_path, prefix="navcoll")["modes"]
    ecmp, nav = report["ecmp"], report["nav-host"]
    assert nav["loss_packets"] == 0 and nav["messages_incomplete"] == 0, nav
    # the uplinks, not the senders, set the ideal: the run is sized so
    assert nav["ideal_bound"].startswith(("uplinks", "downlinks")), nav
    # bytes per uplink over the whole run (counters read before the first packet and after
    # the drain): counts, not rates, so the machine's load does not move them
    assert nav["leaf_uplink_max_over_mean"] <= 1.10, nav
    assert nav["leaf_uplink_min_over_mean"] >= 0.90, nav
    # the collective ended when the fabric allowed; senders a loaded machine delays raise
    # that bound (completion_over_achievable), and the margin is wider than the README's 10 %
    assert nav["completion_over_achievable"] <= 1.25, nav
    # ECMP (a fixed hash seed) piles flows up: uneven uplinks and a late collective
    assert ecmp["leaf_uplink_max_over_mean"] > 1.25, ecmp
    assert ecmp["completion_over_achievable"] is None or ecmp["completion_over_achievable"] > 1.25, ecmp
