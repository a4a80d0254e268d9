"""Path navigation (dataplane/agent/nav.py) on deployed labs with real traffic: the global
controller spreads elephants ECMP piles up, without reordering them; bad requests change
nothing."""
from __future__ import annotations

import json

import pytest

from dataplane.errors import RuntimeStateError
from dataplane.lb import Fabric

from .conftest import ROOT, leftovers, railab, shipped, unique_name

EXPERIMENTS = ROOT / "experiments"


@pytest.mark.flaky(reruns=2)   # Python senders on a shared machine: a starved sender skews a run
def test_nav_spreads_eight_elephants_within_one_interval(tmp_path):
    name = unique_name("nav")
    proc = railab("run", str(EXPERIMENTS / "nav-elephants.yml"), "--json", "--output", str(tmp_path),
                  "--name", name, timeout=900)
    assert leftovers(name) == [], "the lab the experiment deployed must be gone"
    report = json.loads(proc.stdout)
    ecmp, nav = report["modes"]["ecmp"], report["modes"]["nav"]
    # From the controller's second round with traffic on (its first plan came at the end
    # of the round the flows started in), the sending leaf's uplinks carry equal loads.
    assert nav["nav_leaf_uplink_max_mean"] <= 1.05, nav
    # No flow's packets overtook each other, although the controller moved flows.
    assert nav["out_of_order"] == 0 and nav["loss_packets"] == 0
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
