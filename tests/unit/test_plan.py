"""`railab plan`: the sizing rule (dataplane/topology/sizing.py) and its CLI (dataplane/cli/plan.py)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import dataplane.cli.main as cli_main
from dataplane.errors import PlanError, RailabError
from dataplane.topology import sizing
from dataplane.topology.sizing import (
    Switch,
    format_speed,
    leaf_layout,
    parse_speed,
    plan_dual_plane,
    plan_fat_tree,
    plan_rail_fabric,
    plan_rail_only,
    plan_rail_optimized,
)


def run(capsys, monkeypatch, *argv: str) -> tuple[int, str, str]:
    """Run `railab plan ...` through the real entry point (other verbs left out)."""
    monkeypatch.setattr(cli_main, "VERB_MODULES", ("plan",))
    code = cli_main.main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, monkeypatch, *argv: str) -> dict:
    code, out, err = run(capsys, monkeypatch, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


# --------------------------------------------------------------------------- BRIEF rows


def test_brief_row_512_gpus_python_api():
    p = plan_dual_plane(gpus=512, switch="51.2T", nic_speed="400G")
    assert (p.servers, p.gpus, p.planes) == (64, 512, 2)
    assert (p.leaves, p.spines, p.links_per_leaf_spine) == (8, 4, 32)
    assert (p.leaves_per_plane, p.spines_per_plane) == (4, 2)
    assert p.host_port_speed == 200 and p.link_speed == 400
    assert p.leaf_downlinks == 128 and p.leaf_uplinks == 64 and p.spine_ports == 128
    assert p.rails_per_leaf == 2
    assert p.spine_ports_used == p.spine_ports          # spines fully used
    assert p.fabric_cables == 2 * 4 * 2 * 32


def test_brief_row_16384_gpus_python_api():
    p = plan_dual_plane(servers=2048)
    assert p.gpus == 16384
    assert (p.leaves, p.spines, p.links_per_leaf_spine) == (256, 128, 1)
    assert (p.leaves_per_plane, p.spines_per_plane, p.leaves_per_rail) == (128, 64, 16)
    assert p.max_gpus == 16384                           # the largest two-tier dual plane
    assert p.spine_ports_used == p.spine_ports


def test_brief_row_512_gpus_cli_json(capsys, monkeypatch):
    d = run_json(capsys, monkeypatch, "dual-plane", "--gpus", "512", "--switch", "51.2T",
                 "--nic", "400G", "--planes", "2")
    assert (d["leaves"], d["spines"], d["links_per_leaf_spine"]) == (8, 4, 32)
    assert (d["servers"], d["gpus"], d["planes"]) == (64, 512, 2)
    assert d["link_speed_gbps"] == 400 and d["host_port_speed_gbps"] == 200
    assert d["per_plane"]["leaves"] == 4 and d["per_plane"]["spines"] == 2


def test_brief_row_16384_gpus_cli_json(capsys, monkeypatch):
    d = run_json(capsys, monkeypatch, "dual-plane", "--servers", "2048")
    assert (d["leaves"], d["spines"], d["links_per_leaf_spine"]) == (256, 128, 1)
    assert (d["servers"], d["gpus"]) == (2048, 16384)
    assert d["per_plane"] == {**d["per_plane"], "leaves": 128, "spines": 64}


def test_brief_rail_only_about_a_thousand_gpus():
    p = plan_rail_only(gpus=1024)
    assert (p.leaves, p.spines, p.max_gpus) == (8, 0, 1024)
    assert p.host_port_speed == 400 and p.leaf_downlinks == 128


def test_dual_plane_doubles_single_plane_scale():
    single = plan_rail_optimized(gpus=8)
    dual = plan_dual_plane(gpus=8)
    assert dual.max_gpus == 2 * single.max_gpus == 16384


# --------------------------------------------------------------------------- fat-tree


@pytest.mark.parametrize("k", [2, 4, 8, 16, 32, 48, 64, 128])
def test_fat_tree_two_tier(k):
    p = plan_fat_tree(k, 2)
    assert p.max_end_ports == k * k // 2
    assert (p.leaves, p.spines, p.cores, p.links_per_leaf_spine) == (k, k // 2, 0, 1)
    assert p.leaves * p.leaf_downlinks == p.max_end_ports
    assert p.spines * k == p.leaf_spine_links == p.leaves * p.leaf_uplinks


@pytest.mark.parametrize("k", [2, 4, 8, 16, 32, 48, 64, 128])
def test_fat_tree_three_tier(k):
    p = plan_fat_tree(k, 3)
    assert p.max_end_ports == k ** 3 // 4
    assert (p.pods, p.leaves, p.spines, p.cores) == (k, k * k // 2, k * k // 2, k * k // 4)
    assert p.cores * k == p.spine_core_links          # every core port used, one per pod link
    assert p.spines * (k // 2) == p.spine_core_links


def test_fat_tree_cli_json(capsys, monkeypatch):
    d = run_json(capsys, monkeypatch, "fat-tree", "--radix", "64", "--tiers", "3")
    assert d["max_end_ports"] == 65536 and d["cores"] == 1024 and d["tiers"] == 3
    assert {"leaves", "spines", "links_per_leaf_spine", "radix"} <= set(d)
    d2 = run_json(capsys, monkeypatch, "fat-tree", "--radix", "64")
    assert (d2["max_end_ports"], d2["leaves"], d2["spines"], d2["tiers"]) == (2048, 64, 32, 2)
    assert "cores" not in d2


def test_fat_tree_table(capsys, monkeypatch):
    code, out, _ = run(capsys, monkeypatch, "fat-tree", "--radix", "8", "--tiers", "3")
    assert code == 0 and "128" in out and "K^3/4" in out


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("argv, words", [
    (["fat-tree", "--radix", "7"], "odd"),
    (["fat-tree", "--radix", "0"], "too small"),
    (["fat-tree", "--radix", "-4"], "too small"),
    (["fat-tree", "--radix", "8", "--tiers", "4"], "tiers must be 2 or 3"),
    (["dual-plane", "--gpus", "513"], "not a multiple of 8"),
    (["dual-plane"], "--gpus N or --servers N"),
    (["dual-plane", "--gpus", "512", "--servers", "63"], "512 GPUs != 63 servers"),
    (["dual-plane", "--gpus", "0"], "gpus must be >= 1"),
    (["dual-plane", "--gpus", "512", "--planes", "0"], "planes must be >= 1"),
    (["dual-plane", "--gpus", "512", "--planes", "3"], "does not split evenly"),
    (["dual-plane", "--gpus", "512", "--spines", "3"], "do not divide evenly over 3 spines"),
    (["dual-plane", "--gpus", "512", "--spines", "1"], "too few"),
    (["dual-plane", "--gpus", "16392"], "three tiers"),
    (["rail-optimized", "--gpus", "16384"], "three tiers"),
    (["dual-plane", "--gpus", "512", "--nic", "100G", "--switch", "12.8T"],
     "cannot break out to"),
    (["dual-plane", "--gpus", "512", "--link-speed", "300G"], "cannot run 300G"),
    (["dual-plane", "--gpus", "512", "--nic", "fast"], "not a speed"),
    (["dual-plane", "--gpus", "512", "--switch", "9T"], "unknown switch"),
    (["dual-plane", "--gpus", "512", "--switch", "custom", "--ports", "32"],
     "needs both --ports and --port-speed"),
    (["dual-plane", "--gpus", "512", "--oversubscription", "1:3"], "more uplink"),
    (["rail-only", "--gpus", "2048"], "rail-only tops out at 128 servers"),
])
def test_refusals_are_one_line_with_nonzero_exit(capsys, monkeypatch, argv, words):
    code, out, err = run(capsys, monkeypatch, *argv)
    assert code != 0
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("railab: error: ")
    assert words in lines[0]
    assert "Traceback" not in err


def test_refusal_in_a_real_process():
    script = ("import sys, dataplane.cli.main as m; m.VERB_MODULES = ('plan',); "
              "sys.exit(m.main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", script, "plan", "fat-tree", "--radix", "5"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "odd" in proc.stderr


def test_plan_error_is_a_railab_error():
    with pytest.raises(RailabError):
        plan_fat_tree(3, 2)


# --------------------------------------------------------------------------- other designs


def test_custom_switch_and_oversubscription():
    sw = sizing.get_switch("custom", 32, "400G")
    assert sw.capacity == 12800 and sw.speeds == (400, 200, 100)
    p = plan_rail_optimized(gpus=256, switch=sw, nic_speed="200G", ratio="3:1",
                            link_speed="400G")
    # leaf: 9.6T down = 48 x 200G, 3.2T up = 8 x 400G
    assert (p.leaf_downlinks, p.leaf_uplinks) == (48, 8)
    assert p.leaf_downlink_capacity == 3 * p.leaf_uplink_capacity
    # uplinks default to the NIC speed: 16 x 200G
    assert plan_rail_optimized(gpus=256, switch=sw, nic_speed="200G", ratio="3:1").leaf_uplinks == 16


def test_single_leaf_plane_needs_no_spine():
    p = plan_dual_plane(gpus=16)
    assert (p.leaves, p.spines, p.links_per_leaf_spine) == (2, 0, 0)
    assert p.fabric_cables == 0


def test_spine_override():
    p = plan_dual_plane(gpus=512, spines_per_plane=4)
    assert (p.spines_per_plane, p.links_per_leaf_spine, p.spine_ports_used) == (4, 16, 64)


def test_twelve_point_eight_switch():
    p = plan_rail_optimized(gpus=512, switch="12.8T")
    # 400G hosts: 16 down + 16 up per leaf; spine 32 x 400G
    assert (p.leaf_downlinks, p.leaf_uplinks, p.spine_ports) == (16, 16, 32)
    assert (p.leaves, p.spines, p.links_per_leaf_spine) == (32, 16, 1)


def test_human_tables(capsys, monkeypatch):
    code, out, _ = run(capsys, monkeypatch, "dual-plane", "--gpus", "512")
    assert code == 0
    assert "per plane" in out and "total (2 planes)" in out
    assert "32 x 400G" in out and "two-tier max" in out
    code, out, _ = run(capsys, monkeypatch, "rail-only", "--gpus", "1024")
    assert code == 0 and "rail-only max" in out and "1,024 GPUs" in out


def test_units():
    assert parse_speed("400G") == 400 and parse_speed("51.2T") == 51200
    assert parse_speed("200gb/s") == 200 and parse_speed(100) == 100
    assert format_speed(51200) == "51.2T" and format_speed(400) == "400G"
    for bad in ("", "G", "0G", "12.5G", "-4G"):
        with pytest.raises(PlanError):
            parse_speed(bad)


# --------------------------------------------------------------------------- properties

SWITCH_CHOICES = st.sampled_from([
    sizing.SWITCHES["51.2T"], sizing.SWITCHES["12.8T"], sizing.SWITCHES["25.6T"],
    Switch("16x400G", 16, 400), Switch("48x100G", 48, 100), Switch("8x800G", 8, 800),
])


@st.composite
def rail_requests(draw, anything=False):
    """Sizing requests; by default NIC speeds the switch can take, so most are buildable."""
    switch = draw(SWITCH_CHOICES)
    planes = draw(st.sampled_from([1, 2, 4]))
    if anything:
        nic = draw(st.sampled_from([100, 200, 400, 800]))
    else:
        nic = draw(st.sampled_from(switch.speeds)) * planes
    return dict(
        servers=draw(st.one_of(st.integers(1, 64), st.integers(1, 3000))),
        gpus_per_server=draw(st.sampled_from([1, 2, 4, 8, 16])),
        switch=switch, nic_speed=nic, planes=planes,
    )


@settings(max_examples=300, deadline=None)
@given(rail_requests())
def test_any_valid_plan_is_consistent(req):
    try:
        p = plan_rail_fabric(**req)
    except PlanError as err:
        assert "three tiers" in str(err)     # speeds are valid: only size can fail
        return
    gpus = req["servers"] * req["gpus_per_server"]
    assert p.gpus == gpus
    assert p.host_port_speed * p.planes == p.nic_speed
    # enough downlinks for every NIC port of the plane, and rails stay whole
    assert p.leaves_per_plane * p.leaf_downlinks >= gpus
    assert p.leaf_downlinks_used_max <= p.leaf_downlinks
    if p.leaves_per_rail == 1:
        assert p.rails_per_leaf * p.servers <= p.leaf_downlinks
    assert p.leaves_per_plane <= p.spine_ports
    assert p.servers <= p.max_servers
    # 1:1: uplink capacity = downlink capacity on each leaf
    if p.spines_per_plane:
        assert p.leaf_uplink_capacity == p.leaf_downlink_capacity
        assert p.leaf_uplink_capacity + p.leaf_downlink_capacity == p.switch.capacity
        assert p.links_per_leaf_spine >= 1
        assert p.spines_per_plane * p.links_per_leaf_spine == p.leaf_uplinks
        assert p.spine_ports_used <= p.spine_ports
        # fewest spines: one spine fewer could not take all leaf uplinks in equal bundles
        fewer = p.spines_per_plane - 1
        assert fewer == 0 or p.leaf_uplinks % fewer or \
            p.leaves_per_plane * (p.leaf_uplinks // fewer) > p.spine_ports
    else:
        assert p.leaves_per_plane == 1 and p.fabric_cables == 0
    assert p.leaves == p.leaves_per_plane * p.planes
    assert p.spines == p.spines_per_plane * p.planes
    assert p.host_cables == gpus * p.planes
    assert p.optics == 2 * p.cables


@settings(max_examples=200, deadline=None)
@given(rail_requests())
def test_limit_is_exact(req):
    """max_servers fits; one server more is refused with a three-tier hint."""
    try:
        p = plan_rail_fabric(**{**req, "servers": 1})
    except PlanError:
        return
    assume(p.max_servers >= 1)
    at_max = plan_rail_fabric(**{**req, "servers": p.max_servers})
    assert at_max.leaves_per_plane <= at_max.spine_ports
    with pytest.raises(PlanError, match="three tiers"):
        plan_rail_fabric(**{**req, "servers": p.max_servers + 1})


@settings(max_examples=200, deadline=None)
@given(rail_requests())
def test_more_servers_never_fewer_switches(req):
    try:
        small = plan_rail_fabric(**req)
        big = plan_rail_fabric(**{**req, "servers": req["servers"] + 1})
    except PlanError:
        return
    assert big.leaves >= small.leaves
    assert big.spines >= small.spines


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.sampled_from([1, 2, 4, 8, 16]), st.integers(1, 512))
def test_leaf_layout_covers_every_server(servers, rails, downlinks):
    leaves, per_leaf, per_rail = leaf_layout(servers, rails, downlinks)
    assert leaves * downlinks >= servers * rails
    assert per_leaf == 1 or per_rail == 1
    assert per_rail * downlinks >= servers
    assert leaves == rails * per_rail if per_leaf == 1 else leaves == -(-rails // per_leaf)


@settings(max_examples=200, deadline=None)
@given(st.integers(-10, 300), st.sampled_from([0, 1, 2, 3, 4]))
def test_fat_tree_any_radix(k, tiers):
    try:
        p = plan_fat_tree(k, tiers)
    except PlanError as err:
        assert tiers not in (2, 3) or k < 2 or k % 2
        assert "\n" not in str(err)
        return
    assert k >= 2 and k % 2 == 0
    assert p.max_end_ports == (k * k // 2 if tiers == 2 else k ** 3 // 4)
    assert p.max_end_ports == p.leaves * (k // 2)       # every leaf downlink is an end port
    # a full fat-tree uses every port of every switch exactly once
    assert p.host_links + 2 * p.fabric_links == p.switches * k


@settings(max_examples=100, deadline=None)
@given(rail_requests(anything=True),
       st.sampled_from(["dual-plane", "rail-optimized", "rail-only"]))
def test_cli_never_tracebacks(req, design):
    argv = ["plan", design, "--servers", str(req["servers"]), "--gpus-per-server",
            str(req["gpus_per_server"]), "--ports", str(req["switch"].ports), "--port-speed",
            f"{req['switch'].port_speed}G", "--nic", f"{req['nic_speed']}G",
            "--planes", str(req["planes"]), "--json"]
    mp = pytest.MonkeyPatch()
    mp.setattr(cli_main, "VERB_MODULES", ("plan",))
    try:
        code = cli_main.main(argv)
    finally:
        mp.undo()
    assert code in (0, PlanError.exit_code)
