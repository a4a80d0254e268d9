"""Pictures of experiment results: files exist, are real PNGs of the expected size, and
every picture is produced from synthetic runs shaped like the runner's (no root)."""
from __future__ import annotations

import random

import pytest

pytest.importorskip("matplotlib")

from matplotlib.image import imread  # noqa: E402

from dataplane.report import fabricplot, idlemodel, metrics, plots, sweep, table  # noqa: E402
from dataplane.topology.generate import generate  # noqa: E402

SCALED = 1e8  # 400G emulated at 100 Mb/s
SMALL = {"rail-optimized": dict(leaf_ports=8, spines=4), "clos2": dict(leaf_ports=8),
         "clos3": dict(leaf_ports=8), "dual-plane": dict(servers=8, leaf_ports=8, spines=4)}
MODE_PKTS = {"ecmp": 0, "spray-rr": 1, "flowlet": 2}


def make_run(kind: str = "rail-optimized", mode: str = "ecmp", seed: int | None = 7,
             duration_s: float = 2.0, timeline: bool = False, **params) -> dict:
    """A RUN dict as the runner writes it, with traffic simulated crudely: one elephant per
    NIC to the same rail of the next server; ecmp puts each on one random uplink of its
    leaf, spray spreads it over all uplinks (and reorders), flowlet mostly spreads it."""
    for key, value in SMALL.get(kind, {}).items():  # several leaves, so elephants cross spines
        params.setdefault(key, value)
    topo = generate(kind, **params)
    rng = random.Random(f"{mode}-{seed}")
    nodes = [{"name": n.name, "role": n.role.value, "rail": n.rail, "plane": n.plane}
             for n in topo.nodes.values()]
    role = {n.name: n.role.value for n in topo.nodes.values()}
    links = []
    for l in topo.links:
        links.append({"a": str(l.a), "b": str(l.b), "a_role": role[l.a.node], "b_role": role[l.b.node],
                      "bytes_ab": 0, "bytes_ba": 0, "packets_ab": 0, "packets_ba": 0,
                      "speed_bps": l.speed_bps, "scaled_bps": SCALED})
    by_end = {}
    for link in links:
        by_end.setdefault(link["a"].split(":")[0], []).append(link)
        by_end.setdefault(link["b"].split(":")[0], []).append(link)
    host_links = [l for l in links if l["a_role"] == "host"]
    flows = []
    per_flow_bytes = int(0.7 * SCALED * duration_s / 8)
    for i, hl in enumerate(host_links):
        src = hl["a"]
        srv, nic = src.split(":")
        leaf = hl["b"].split(":")[0]
        same = [h for h in host_links if h["a"].split(":")[1] == nic and h["a"].split(":")[0] != srv]
        other_leaf = [h for h in same if h["b"].split(":")[0] != leaf]
        if not same:
            continue
        dst_link = (other_leaf or same)[i % len(other_leaf or same)]
        ups = [u for u in by_end[leaf] if u["a"].startswith(leaf + ":") and u["b_role"] in ("spine",)]
        crosses = ups and dst_link["b"].split(":")[0] != leaf
        pkts = per_flow_bytes // 1000
        hl["bytes_ab"] += per_flow_bytes
        hl["packets_ab"] += pkts
        if crosses:
            if mode == "ecmp":
                share = {rng.randrange(len(ups)): 1.0}
            else:
                w = [1.0 + (rng.random() * 0.3 if mode == "flowlet" else 0) for _ in ups]
                share = {k: x / sum(w) for k, x in enumerate(w)}
            for k, f in share.items():
                ups[k]["bytes_ab"] += int(per_flow_bytes * f)
                ups[k]["packets_ab"] += int(pkts * f)
        congested = mode == "ecmp" and crosses
        lat = 300.0 if not congested else 300.0 * (1 + rng.random() * 4)
        ooo = int(pkts * 0.03 * MODE_PKTS.get(mode, 0)) if crosses else 0
        hist = {}
        for _ in range(ooo):
            d = min(int(rng.expovariate(0.5)) + 1, 300)
            hist[str(d)] = hist.get(str(d), 0) + 1
        flows.append({
            "flow_id": i, "cls": "elephant", "src": src, "dst": dst_link["a"], "offered_bps": 0.7 * SCALED,
            "sent_packets": pkts, "packets": pkts - (3 if congested else 0), "bytes": per_flow_bytes,
            "payload_bytes": per_flow_bytes * 0.9, "lost": 3 if congested else 0, "duplicates": 0,
            "out_of_order": ooo, "reorder_hist": hist, "ce": 10 if congested else 0,
            "rx_bps": per_flow_bytes * 8 / duration_s, "messages_completed": 50, "messages_incomplete": 0,
            "completions_us": [lat * rng.lognormvariate(0, 0.4) for _ in range(50)], "latency_ns": {},
        })
    run = {"mode": mode, "seed": seed, "duration_s": duration_s, "nodes": nodes, "links": links,
           "flows": flows, "switches": {"drops": 12 if mode == "ecmp" else 0, "ecn_marked": 40,
                                        "drops_by_reason": {}}}
    if timeline:
        base = sum(f["rx_bps"] for f in flows)
        run["timeline"] = [{"t": round(0.05 * k, 2), "bps": base * (0.55 if 20 <= k < 26 else 1.0)
                            * (0.97 + 0.06 * rng.random())} for k in range(41)]
        run["events"] = [{"t": 1.0, "what": "link-down leaf1-r0:up1 spine1:down1"},
                         {"t": 1.3, "what": "link-up leaf1-r0:up1"}]
    return run


def check_png(path, min_kb: float = 10, min_w: int = 600, min_h: int = 300) -> tuple[int, int]:
    assert path.exists() and path.suffix == ".png"
    assert path.stat().st_size > min_kb * 1024, f"{path.name}: only {path.stat().st_size} bytes"
    img = imread(path)
    h, w = img.shape[:2]
    assert w >= min_w and h >= min_h, (path.name, w, h)
    assert img.std() > 0.01  # not a blank canvas
    return w, h


def comparison(kind="rail-optimized", **params):
    return {"name": f"demo-{kind}",
            "runs": [make_run(kind, mode, timeline=True, **params) for mode in ("ecmp", "spray-rr", "flowlet")]}


def test_write_plots_comparison(tmp_path):
    paths = plots.write_plots(comparison(), tmp_path)
    names = {p.name for p in paths}
    assert {"uplink-loads.png", "fct-cdf.png", "reorder.png", "timeline.png", "fabric-ecmp.png",
            "fabric-spray-rr.png", "fabric-flowlet.png"} <= names
    assert "idle-sweep.png" not in names  # one run per mode: no sweep
    for p in paths:
        check_png(p)


def test_write_plots_sweep(tmp_path):
    results = {"name": "sweep", "runs": [make_run(mode="spray-rr")],
               "sweep": [make_run(mode="ecmp", seed=s) for s in range(12)]}
    paths = plots.write_plots(results, tmp_path)
    names = {p.name for p in paths}
    assert "idle-sweep.png" in names and "uplink-loads.png" in names
    for p in paths:
        check_png(p)


@pytest.mark.parametrize("kind,params", [("dual-plane", {}), ("clos3", {}), ("clos2", {}),
                                         ("rail-only", {})])
def test_fabric_drawing_all_kinds(tmp_path, kind, params):
    run = make_run(kind, **params)
    w, h = check_png(fabricplot.plot_fabric(run, tmp_path / "f.png"))
    assert w > h  # tiers as rows: wider than tall


def test_no_timeline_no_completions(tmp_path):
    run = make_run()
    for f in run["flows"]:
        f["completions_us"] = []
    assert plots.plot_fct_cdf([run], tmp_path / "c.png") is None
    assert plots.plot_timeline([run], tmp_path / "t.png") is None
    assert not (tmp_path / "t.png").exists()


def test_rail_only_has_no_uplinks(tmp_path):
    run = make_run("rail-only")
    assert metrics.run_metrics(run)["uplinks"] == 0
    assert plots.plot_uplink_loads([run], tmp_path / "u.png") is None
    assert "rail-only" not in table.render_text([run])  # the run's mode is ecmp
    assert "ecmp" in table.render_text([run])


def test_sweep_text_and_summary():
    runs = [make_run(mode="ecmp", seed=s) for s in range(10)]
    s = sweep.sweep_summary(runs)["ecmp"]
    assert s["runs"] == 10 and s["seeds"] == list(range(10))
    assert {"p5", "p95", "mean", "std"} <= set(s["metrics"]["jain"])
    # 8 leaves x 4 uplinks, 4 NICs per leaf, each with an elephant to another leaf
    assert s["idle"]["expected_mean"] == pytest.approx(8 * idlemodel.expected_idle(4, 4))
    text = sweep.render_sweep_text(runs)
    assert "ecmp: 10 runs (seeds 0..9)" in text and "expected" in text


def test_without_port_model(tmp_path):
    """No emulated speed known: links coloured by load in b/s, no capacity line."""
    runs = [make_run(mode=mode) for mode in ("ecmp", "spray-rr")]
    for run in runs:
        for link in run["links"]:
            link["scaled_bps"] = None
    paths = plots.write_plots(runs, tmp_path)
    for p in paths:
        check_png(p)
    assert "emulated" not in table.render_text(runs)


def test_timeline_of_a_fault_run_carries_its_figures(tmp_path):
    """The legend entry shows the fault figures; the lost packets' send times are ticked."""
    run = make_run(timeline=True)
    t0 = 7_000_000_000
    run["t0_ns"] = t0
    for i, ev in enumerate(run["events"]):
        ev.update(at=ev["t"], t_ns=t0 + int(ev["t"] * 1e9), failover_us=400.0 + i, notice_us=None)
    for i, f in enumerate(run["flows"]):
        f.update(on_failed_element=i == 0, max_gap_us=40_000.0 + i)
    hit = run["flows"][0]
    start = t0 + 1_000_300_000
    hit.update(lost=2, outage_us=200.0, recovery_us=200.0, timing_note=None,
               loss_windows_ns=[[start, start + 200_000, 2]])
    label = plots._fault_label("ecmp", run)
    assert label.startswith("ecmp: outage 200 µs, recovery 200 µs (net); host gap 40 ms vs ")
    assert "failover 401 µs" in label
    check_png(plots.plot_timeline([run], tmp_path / "t.png"))
