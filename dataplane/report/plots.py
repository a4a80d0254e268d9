"""PNG pictures of an experiment (matplotlib, object-oriented API on the Agg canvas: no
pyplot, no global backend switch, safe to call from any process or thread).

`write_plots(results, folder)` writes every picture that the data allows and returns the
paths:
  uplink-loads.png     load of every uplink, one panel per mode, shared y axis
  fct-cdf.png          message completion time CDF per mode (log x) and its tail
  reorder.png          reorder-distance histogram per mode
  fct-slowdown.png     closed-loop runs: FCT slowdown avg / p99 per message size bucket,
                       modes side by side
  fabric-<mode>.png    the fabric, tiers as rows, links coloured by utilisation
  timeline.png         delivered throughput over time with events (when recorded); for
                       fault runs each mode's legend entry carries its fault figures and
                       ticks mark the send times of its lost packets
  idle-sweep.png       idle uplinks over a seed sweep vs uniform random hashing
`results` is what rundata.group_runs accepts (list of RUNs, {mode: RUN | [RUN]}, or an
experiment dict with "runs"/"sweep"). A mode with several runs is drawn from their mean
(bars, with std error bars) or pooled (CDF, histogram); the fabric and the timeline show
its first run.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from dataplane.report import closedloop, faultruns, idlemodel, rundata, sweep
from dataplane.report import metrics as m
from dataplane.report.stats import percentile
from dataplane.report.table import fmt_bps, fmt_us
from dataplane.topology.model import TIER, Endpoint

DPI = 110
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f")
TIER_NAME = {"host": "hosts", "leaf": "leaves", "spine": "spines", "core": "cores"}
ROLE_STYLE = {"host": ("s", "#606060"), "leaf": ("o", "#1f4e9c"), "spine": ("D", "#7b2d8b"),
              "core": ("h", "#8b2d2d")}
LOAD_CMAP = "plasma"


def _rate_unit(max_bps: float) -> tuple[float, str]:
    for div, unit in ((1e12, "Tb/s"), (1e9, "Gb/s"), (1e6, "Mb/s"), (1e3, "kb/s")):
        if max_bps >= div:
            return div, unit
    return 1.0, "b/s"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "mode"


def _node(ref: str) -> str:
    """The node of a link end ("leaf1:up1" -> "leaf1")."""
    return Endpoint.parse(ref).node


def _colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _speed_note(runs: list[dict]) -> str | None:
    """'port 100 Mb/s emulated = 400 Gb/s nominal' from the first uplink (or any link)."""
    for run in runs:
        for link in rundata.uplinks(run) or []:
            if link["scaled_bps"]:
                nominal = f" = {fmt_bps(link['speed_bps'])} nominal" if link["speed_bps"] else ""
                return f"port {fmt_bps(link['scaled_bps'])} emulated{nominal}"
        for link in run.get("links", []):
            if link.get("scaled_bps"):
                nominal = f" = {fmt_bps(link['speed_bps'])} nominal" if link.get("speed_bps") else ""
                return f"port {fmt_bps(link['scaled_bps'])} emulated{nominal}"
    return None


def _save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, facecolor="white")
    return path


# --------------------------------------------------------------------------- (a) loads

def plot_uplink_loads(results, path) -> Path | None:
    """Bars of every uplink's load, one panel per mode (shared y); None without uplinks."""
    groups = rundata.group_runs(results)
    data = []
    for label, runs in groups.items():
        per_run = [rundata.uplinks(r) for r in runs]
        if not per_run or not per_run[0]:
            continue
        names = [u["name"] for u in per_run[0]]
        loads = [[u["load_bps"] for u in ups] for ups in per_run if len(ups) == len(names)]
        if len(loads) > 1:  # several runs: per-link means hide imbalance; rank loads instead
            loads = [sorted(row, reverse=True) for row in loads]
        mean = [sum(col) / len(col) for col in zip(*loads)]
        std = ([math.sqrt(sum((x - mu) ** 2 for x in col) / (len(col) - 1)) for col, mu in zip(zip(*loads), mean)]
               if len(loads) > 1 else None)
        data.append((label, runs, per_run[0], mean, std))
    if not data:
        return None
    top = max(max(d[3]) + (max(d[4]) if d[4] else 0) for d in data)
    scaled = [u["scaled_bps"] for d in data for u in d[2] if u["scaled_bps"]]
    cap = max(scaled) if scaled else None
    div, unit = _rate_unit(max(top, cap or 0) or 1)
    n_modes = len(data)
    ncols = n_modes if n_modes <= 4 else 3
    nrows = math.ceil(n_modes / ncols)
    n_up = max(len(d[3]) for d in data)
    panel_w = min(8.0, max(3.4, 0.2 * n_up + 1.2))
    fig = Figure(figsize=(min(26, panel_w * ncols + 1.0), 5.0 * nrows + 0.9), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False)
    for idx, (label, runs, ups, mean, std) in enumerate(data):
        ax = axes[idx // ncols][idx % ncols]
        ranked = len(runs) > 1
        nodes = []
        for u in ups:
            if u["node"] not in nodes:
                nodes.append(u["node"])
        colours = ["#4c72b0"] * len(ups) if ranked else [_colour(nodes.index(u["node"])) for u in ups]
        xs = range(len(ups))
        ax.bar(xs, [v / div for v in mean], color=colours, edgecolor="black", linewidth=0.4,
               yerr=[s / div for s in std] if std else None, capsize=2 if std else 0,
               error_kw={"linewidth": 0.8})
        carried = [idlemodel.data_bytes(u) for u in ups]     # idle as the table counts it
        idle = ([i for i, v in enumerate(carried) if v < idlemodel.IDLE_FRACTION * max(carried)]
                if max(carried) > 0 and not ranked else [])
        if idle:
            ax.plot(idle, [0] * len(idle), linestyle="none", marker="x", color="#555555", markersize=6,
                    clip_on=False, zorder=5, label=f"idle ({len(idle)})")
        mu = sum(mean) / len(mean)
        ax.axhline(mu / div, color="black", linestyle=":", linewidth=1.2, label=f"mean {fmt_bps(mu)}")
        if cap:
            ax.axhline(cap / div, color="#c00000", linestyle="--", linewidth=1.2,
                       label=f"port speed {fmt_bps(cap)} (emulated)")
        tiers = [u["tier"] for u in ups] if not ranked else []
        for k in range(1, len(tiers)):
            if tiers[k] != tiers[k - 1]:
                ax.axvline(k - 0.5, color="grey", linewidth=1.0)
        if ranked:
            step = max(1, len(ups) // 16)
            ax.set_xticks(range(0, len(ups), step))
            ax.set_xticklabels([str(k + 1) for k in range(0, len(ups), step)], fontsize=8)
            ax.set_xlabel("uplinks ranked by load in each run (1 = busiest)", fontsize=9)
            ax.set_xlim(-0.6, len(ups) - 0.4)
        else:
            _group_ticks(ax, ups)
        if len(runs) == 1:
            met = m.run_metrics(runs[0])
            stats = (f"max/mean {met['uplink_max_mean']:.2f} · Jain {met['jain']:.3f} · "
                     f"idle {met['idle_uplinks']}/{met['uplinks']}")
        else:
            s = m.mode_summary(runs)
            stats = (f"{len(runs)} runs, ranked, mean ± std · max/mean {s['uplink_max_mean']['mean']:.2f}"
                     f" · Jain {s['jain']['mean']:.3f} · idle {s['idle_uplinks']['mean']:.1f}/{len(ups)}")
        ax.set_title(f"{label}\n{stats}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        if idx % ncols == 0:
            ax.set_ylabel(f"uplink load, upward ({unit})")
        ax.legend(fontsize=7, loc="upper right")
    for idx in range(n_modes, nrows * ncols):
        axes[idx // ncols][idx % ncols].set_visible(False)
    ax0 = axes[0][0]
    ax0.set_ylim(0, max(top, cap or 0) / div * 1.12 or 1)
    note = _speed_note([d[1][0] for d in data])
    fig.suptitle("Uplink load per mode (bars coloured by switch)" + (f" — {note}" if note else ""),
                 fontsize=12, fontweight="bold")
    return _save(fig, path)


def _group_ticks(ax, ups: list[dict]) -> None:
    """Port names as tick labels, the switch name once under its group of bars."""

    n = len(ups)
    ports = [Endpoint.parse(u["lower"]).interface for u in ups]
    fontsize = 8 if n <= 16 else (7 if n <= 32 else 5.5)
    ax.set_xticks(range(n))
    ax.set_xticklabels(ports, rotation=90, fontsize=fontsize)
    ax.set_xlim(-0.6, n - 0.4)
    groups: list[tuple[str, int, int]] = []
    for i, u in enumerate(ups):
        if groups and groups[-1][0] == u["node"]:
            groups[-1] = (u["node"], groups[-1][1], i)
        else:
            groups.append((u["node"], i, i))
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    widest = max(len(g[0]) for g in groups)
    per_group = n / len(groups)
    rotate = widest * 0.55 > per_group * 1.6
    longest_port = max(len(p) for p in ports)
    drop = 0.04 + 0.018 * longest_port * fontsize / 8
    for name, lo, hi in groups:
        ax.text((lo + hi) / 2, -drop, name, transform=trans, ha="right" if rotate else "center",
                va="top", fontsize=7.5, rotation=35 if rotate else 0, rotation_mode="anchor",
                clip_on=False)
        if hi < n - 1:
            ax.axvline(hi + 0.5, color="#cccccc", linewidth=0.6, zorder=0)


# --------------------------------------------------------------------------- (b) FCT

def plot_fct_cdf(results, path) -> Path | None:
    """Message completion time CDF per mode (log x) and the tail (1 - CDF, log-log)."""
    groups = rundata.group_runs(results)
    series = []
    for label, runs in groups.items():
        xs = sorted(x for r in runs for x in rundata.completions(r) if x > 0)
        if xs:
            series.append((label, xs))
    if not series:
        return None
    fig = Figure(figsize=(12, 5), layout="constrained")
    ax, tail = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for i, (label, xs) in enumerate(series):
        n = len(xs)
        ys = [(k + 1) / n for k in range(n)]
        p50, p99 = percentile(xs, 50), percentile(xs, 99)
        colour = _colour(i)
        ax.step(xs, ys, where="post", color=colour, linewidth=1.8,
                label=f"{label}: p50 {fmt_us(p50)}, p99 {fmt_us(p99)} (n={n:,})")
        ax.plot([p99], [0.99], marker="o", color=colour, markersize=5)
        tail.step(xs, [max(1 - y, 0.5 / n) for y in ys], where="post", color=colour, linewidth=1.6)
    ax.set_xscale("log")
    ax.set_ylim(0, 1.01)
    ax.axhline(0.5, color="grey", linestyle=":", linewidth=0.8)
    ax.axhline(0.99, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("message completion time (µs, log scale)")
    ax.set_ylabel("fraction of messages completed within x")
    ax.set_title("CDF (dots: p99)")
    ax.grid(which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    tail.set_xscale("log")
    tail.set_yscale("log")
    tail.set_xlabel("message completion time (µs, log scale)")
    tail.set_ylabel("fraction of messages slower than x")
    tail.set_title("tail (1 − CDF)")
    tail.grid(which="both", alpha=0.25)
    fig.suptitle("Message completion times", fontsize=12, fontweight="bold")
    return _save(fig, path)


def plot_slowdown(results, path) -> Path | None:
    """FCT slowdown per message size bucket, modes side by side: average (bars) and p99
    (markers above them), log y -- the HPCC/ConWeave figure style. None for open loop."""
    groups = rundata.group_runs(results)
    series = []
    for label, runs in groups.items():
        pooled = {"flows": [f for r in runs for f in r.get("flows", [])]}
        buckets = closedloop.slowdown_buckets(pooled)
        if any(b["count"] for b in buckets):
            series.append((label, buckets))
    if not series:
        return None
    fig = Figure(figsize=(11, 5), layout="constrained")
    ax = fig.subplots()
    names = [_bucket_label_bytes(b["lo"], b["hi"]) for b in series[0][1]]
    width = 0.8 / len(series)
    for i, (label, buckets) in enumerate(series):
        xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(buckets))]
        avg = [b["avg"] or 0 for b in buckets]
        p99 = [b["p99"] or 0 for b in buckets]
        ax.bar(xs, avg, width=width * 0.95, color=_colour(i), label=f"{label} avg")
        ax.plot(xs, p99, linestyle="none", marker="v", color=_colour(i), markersize=7,
                label=f"{label} p99")
    ax.axhline(1, color="grey", linestyle=":", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names)
    ax.set_xlabel("message size")
    ax.set_ylabel("FCT slowdown (completion / ideal at line rate)")
    ax.grid(axis="y", which="both", alpha=0.25)
    ax.legend(fontsize=8, ncol=2)
    fig.suptitle("FCT slowdown by message size", fontsize=12, fontweight="bold")
    return _save(fig, path)


def _bucket_label_bytes(lo: int, hi: int | None) -> str:
    kib = lambda n: f"{n // 1024} KiB" if n >= 1024 else f"{n} B"   # noqa: E731
    return f"≥{kib(lo)}" if hi is None else f"<{kib(hi)}" if lo == 0 else f"{kib(lo)}–{kib(hi)}"


# --------------------------------------------------------------------------- (c) reorder

REORDER_BUCKETS = ((1, 1), (2, 2), (3, 3), (4, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 256),
                   (257, None))


def _bucket_label(lo: int, hi: int | None) -> str:
    if hi is None:
        return f"≥{lo}"
    return str(lo) if lo == hi else f"{lo}–{hi}"


def plot_reorder_hist(results, path) -> Path:
    """Reorder distances (log2 buckets) per mode as grouped bars, log y."""
    groups = rundata.group_runs(results)
    fig = Figure(figsize=(11, 5), layout="constrained")
    ax = fig.subplots()
    labels = list(groups)
    width = 0.8 / max(1, len(labels))
    any_bar = False
    quiet = []
    for i, label in enumerate(labels):
        hist: dict[int, int] = {}
        for run in groups[label]:
            for k, v in rundata.reorder_histogram(run).items():
                hist[k] = hist.get(k, 0) + v
        counts = [sum(v for k, v in hist.items() if k >= lo and (hi is None or k <= hi))
                  for lo, hi in REORDER_BUCKETS]
        runs = groups[label]
        pct = (m.mode_summary(runs)["reorder_pct"] or {"mean": 0.0})["mean"]
        if sum(counts) == 0:
            quiet.append(label)
            continue
        any_bar = True
        xs = [b + (i - (len(labels) - 1) / 2) * width for b in range(len(REORDER_BUCKETS))]
        ax.bar(xs, counts, width=width, color=_colour(i), edgecolor="black", linewidth=0.3,
               label=f"{label}: {pct:.2f} % of packets out of order")
    ax.set_xticks(range(len(REORDER_BUCKETS)))
    ax.set_xticklabels([_bucket_label(lo, hi) for lo, hi in REORDER_BUCKETS])
    ax.set_xlabel("reorder distance (packets that overtook it)")
    ax.set_ylabel("out-of-order packets" + (" (log scale)" if any_bar else ""))
    if any_bar:
        ax.set_yscale("log")
        ax.legend(fontsize=9)
    if quiet:
        ax.text(0.99, 0.97 if not any_bar else 0.70, "in order, no reordering: " + ", ".join(quiet),
                transform=ax.transAxes, ha="right", va="top", fontsize=10,
                bbox={"boxstyle": "round", "facecolor": "#f0f0f0", "edgecolor": "#999999"})
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    fig.suptitle("Reorder distance per mode", fontsize=12, fontweight="bold")
    return _save(fig, path)


# --------------------------------------------------------------------------- (d) fabric

def fabric_layout(run: dict) -> dict[str, tuple[float, float]]:
    """Node -> (x, y): tiers as rows (hosts 0, leaves 1, spines 2, cores 3); with several
    planes each plane gets its own column band, left to right; hosts span the width."""
    nodes = run.get("nodes", [])
    planes = sorted({n.get("plane") for n in nodes if n.get("plane") is not None})
    bands = max(1, len(planes))
    rows: dict[tuple[str, object], list[str]] = {}
    for n in nodes:
        plane = n.get("plane") if n.get("role") != "host" else None
        rows.setdefault((n.get("role", "host"), plane if bands > 1 else None), []).append(n["name"])
    widest = max([len(v) * (bands if k[1] is not None else 1) for k, v in rows.items()] + [1])
    width = float(max(widest, 4))
    pos = {}
    for (role, plane), names in rows.items():
        names.sort(key=rundata.natural_key)
        if plane is None:
            lo, span = 0.0, width
        else:
            band = width / bands
            lo, span = planes.index(plane) * band, band
        step = span / len(names)
        for i, name in enumerate(names):
            pos[name] = (lo + (i + 0.5) * step, float(TIER.get(role, 0)))
    return pos


def plot_fabric(run: dict, path, *, vmax_bps: float | None = None, title: str | None = None) -> Path:
    """The fabric of one run, links coloured (and thickened) by the busier direction's load:
    utilisation = load / emulated port speed when known, else load in b/s (0..vmax_bps)."""
    d = rundata.duration(run)
    pos = fabric_layout(run)
    roles = {n["name"]: n.get("role", "host") for n in run.get("nodes", [])}
    links = [l for l in run.get("links", [])
             if _node(l["a"]) in pos and _node(l["b"]) in pos]
    use_util = bool(links) and all(l.get("scaled_bps") for l in links)
    values = []
    for l in links:
        load = max(int(l.get("bytes_ab") or 0), int(l.get("bytes_ba") or 0)) * 8 / d
        values.append(load / l["scaled_bps"] if use_util else load)
    if use_util:
        norm = Normalize(0.0, 1.0)
    else:
        norm = Normalize(0.0, vmax_bps or max(values + [1.0]))
    cmap = matplotlib.colormaps[LOAD_CMAP]
    xs = [p[0] for p in pos.values()] or [0.0]
    width = max(xs) + 0.5
    tiers = sorted({TIER.get(r, 0) for r in roles.values()})
    fig_w = min(26.0, max(9.0, width * 0.55 + 2.5))
    fig = Figure(figsize=(fig_w, 1.7 * len(tiers) + 1.3), layout="constrained")
    ax = fig.subplots()
    # parallel links between the same pair of nodes fan out side by side
    pairs = _link_pairs(links)
    min_gap = _min_gap(pos)
    segs, cols, widths, order = [], [], [], []
    for members in pairs.values():
        p = len(members)
        spread = min(0.7 * min_gap, 0.12 * p) if p > 1 else 0.0
        for k, i in enumerate(members):
            l = links[i]
            (xa, ya), (xb, yb) = pos[_node(l["a"])], pos[_node(l["b"])]
            dx = (k / (p - 1) - 0.5) * spread if p > 1 else 0.0
            segs.append([(xa + dx, ya), (xb + dx, yb)])
            v = values[i]
            frac = min(1.0, norm(v)) if norm.vmax else 0.0
            cols.append(cmap(0.08 + 0.92 * frac) if v > 0 else (0.82, 0.82, 0.82, 1.0))
            widths.append(0.8 + 3.2 * frac)
            order.append(v)
    idx = sorted(range(len(segs)), key=lambda i: order[i])  # busiest drawn last, on top
    ax.add_collection(LineCollection([segs[i] for i in idx], colors=[cols[i] for i in idx],
                                     linewidths=[widths[i] for i in idx], zorder=1,
                                     capstyle="round"))
    _pause_marks(ax, run, links, segs, d)
    # nodes and labels
    per_row: dict[float, int] = {}
    for name, (x, y) in pos.items():
        per_row[y] = per_row.get(y, 0) + 1
    for name, (x, y) in pos.items():
        role = roles.get(name, "host")
        marker, colour = ROLE_STYLE.get(role, ("o", "black"))
        crowded = per_row[y] * 0.55 > fig_w * 0.9 or max(len(n) for n in pos) * per_row[y] > fig_w * 10
        ax.scatter([x], [y], s=150 if role != "host" else 110, marker=marker, color=colour,
                   edgecolor="white", linewidth=1.2, zorder=3)
        fontsize = 7 if crowded else 8.5
        if role == "host":
            ax.text(x, y - 0.16, name, ha="center", va="top", fontsize=fontsize,
                    rotation=90 if crowded else 0, zorder=4)
        else:
            ax.text(x, y + 0.15, name, ha="center", va="bottom", fontsize=fontsize,
                    rotation=35 if crowded else 0, zorder=4,
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none",
                          "alpha": 0.8})
    for role in {r for r in roles.values()}:
        y = TIER.get(role, 0)
        ax.text(-0.35, y, TIER_NAME.get(role, role), ha="right", va="center", fontsize=10,
                fontweight="bold", color="#444444")
    planes = sorted({n.get("plane") for n in run.get("nodes", []) if n.get("plane") is not None})
    if len(planes) > 1:
        for p in planes:
            px = [pos[n["name"]][0] for n in run.get("nodes", []) if n.get("plane") == p]
            ax.text((min(px) + max(px)) / 2, max(tiers) + 0.6, f"plane {p}", ha="center",
                    fontsize=11, fontweight="bold", color="#333333")
        for a, b in zip(planes, planes[1:]):
            left = max(pos[n["name"]][0] for n in run.get("nodes", []) if n.get("plane") == a)
            right = min(pos[n["name"]][0] for n in run.get("nodes", []) if n.get("plane") == b)
            ax.axvline((left + right) / 2, ymin=0.25, color="#999999", linestyle="--", linewidth=1)
    ax.set_xlim(-1.6, width + 0.3)
    ax.set_ylim(min(tiers) - (0.62 if any(per_row[y] * 0.55 > fig_w * 0.9 for y in per_row) else 0.42),
                max(tiers) + (0.8 if len(planes) > 1 else 0.5))
    ax.axis("off")
    mappable = ScalarMappable(norm=norm, cmap=cmap)
    over = use_util and any(v > 1.0 for v in values)
    bar = fig.colorbar(mappable, ax=ax, fraction=0.03, pad=0.01, extend="max" if over else "neither")
    if use_util:
        bar.set_label("utilisation of the busier direction\n(load / emulated port speed)", fontsize=9)
        bar.ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    else:
        bar.set_label("load, busier direction (b/s)", fontsize=9)
        bar.ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: fmt_bps(v)))
    met = m.run_metrics(run)
    seed = f", seed {run['seed']}" if run.get("seed") is not None else ""
    stats = ""
    if met["uplinks"]:
        stats = (f"\nuplinks: max/mean {met['uplink_max_mean']:.2f}, Jain {met['jain']:.3f}, "
                 f"idle {met['idle_uplinks']}/{met['uplinks']} (grey = idle)")
    note = _speed_note([run])
    if note:
        stats += f"\n{note}"
    ax.set_title(title or f"{rundata.run_label(run)}{seed}: link load{stats}", fontsize=12, fontweight="bold",
                 loc="center")
    return _save(fig, path)


def _pause_marks(ax, run: dict, links: list[dict], segs: list, d: float) -> None:
    """PFC: a red bar on each link a switch port paused, near that port's end, sized by
    the share of the run it kept its neighbour paused (the percentage beside it)."""
    ports = run.get("pfc_ports") or {}
    if not ports or not d:
        return
    for seg, l in _segments_by_link(links, segs):
        for end, (x0, y0), (x1, y1) in ((l["a"], seg[0], seg[1]), (l["b"], seg[1], seg[0])):
            c = ports.get(end)
            frac = (c or {}).get("paused_ns", 0) / 1e9 / d
            if frac <= 0:
                continue
            x, y = x0 + 0.3 * (x1 - x0), y0 + 0.3 * (y1 - y0)
            ax.scatter([x], [y], s=40 + 260 * min(frac, 1.0), marker="s", color="#d62728",
                       edgecolor="white", linewidth=0.8, zorder=5)
            ax.text(x + 0.08, y, f"{frac:.0%}", fontsize=7, color="#d62728", va="center", zorder=6)
    ax.text(0.0, 1.0, "red squares: PFC pause, share of the run the port kept its neighbour paused",
            transform=ax.transAxes, fontsize=8, color="#d62728", va="top")


def _segments_by_link(links: list[dict], segs: list) -> list:
    """(segment, link) pairs: segs were appended per node pair in first-seen order."""
    order = [i for members in _link_pairs(links).values() for i in members]
    return [(segs[k], links[i]) for k, i in enumerate(order)]


def _link_pairs(links: list[dict]) -> dict[frozenset, list[int]]:
    """Indexes of the links between each pair of nodes, pairs in first-seen order."""
    pairs: dict[frozenset, list[int]] = {}
    for i, l in enumerate(links):
        pairs.setdefault(frozenset((_node(l["a"]), _node(l["b"]))), []).append(i)
    return pairs


def _min_gap(pos: dict[str, tuple[float, float]]) -> float:
    rows: dict[float, list[float]] = {}
    for x, y in pos.values():
        rows.setdefault(y, []).append(x)
    gaps = [b - a for xs in rows.values() for a, b in zip(sorted(xs), sorted(xs)[1:]) if b > a]
    return min(gaps) if gaps else 1.0


# --------------------------------------------------------------------------- (e) timeline

def _fault_label(label: str, run: dict) -> str:
    """The mode's legend entry with its fault figures (faultruns.fault_metrics), if any."""
    f = faultruns.fault_metrics(run)
    if not f:
        return label
    ms = lambda v: fmt_us(v * 1000 if v is not None else None)  # noqa: E731
    text = (f"{label}: outage {ms(f['outage_ms'])}, recovery {ms(f['recovery_ms'])} (net); "
            f"host gap {ms(f['host_gap_on_failed_ms'])}")
    if f["host_gap_elsewhere_ms"] is not None:
        text += f" vs {ms(f['host_gap_elsewhere_ms'])} others"
    if f["failover_ms"] is not None:
        text += f"; failover {ms(f['failover_ms'])}"
    if f["notice_ms"] is not None:
        text += f", notice {ms(f['notice_ms'])}"
    return text


def _loss_rug(ax, run: dict, colour: str, row: int) -> None:
    """Ticks under the curve where the run's flows lost packets (loss windows by send
    time, on the timeline's clock: run["t0_ns"])."""
    t0 = run.get("t0_ns")
    if not t0:
        return
    xs = [(w[0] - t0) / 1e9 for f in run.get("flows", []) for w in f.get("loss_windows_ns") or []]
    if xs:
        y = 0.02 + 0.03 * row
        ax.plot(xs, [y] * len(xs), "|", color=colour, markersize=10, transform=ax.get_xaxis_transform())

def plot_timeline(results, path) -> Path | None:
    """Delivered throughput over time per mode (first run of each), from the frames'
    receive stamps (dataplane.experiment.timeline), with what the host links can carry
    and events as vertical lines; None when no run has a timeline."""
    groups = rundata.group_runs(results)
    series = [(label, runs[0]) for label, runs in groups.items() if runs and runs[0].get("timeline")]
    if not series:
        return None
    top = max(float(p.get("bps") or 0) for _, r in series for p in r["timeline"])
    capacity = max((float(r.get("timeline_capacity_bps") or 0) for _, r in series), default=0.0)
    top = max(top, capacity)
    div, unit = _rate_unit(top or 1)
    fig = Figure(figsize=(12, 5), layout="constrained")
    ax = fig.subplots()
    if capacity:
        ax.axhline(capacity / div, color="grey", linestyle=":", linewidth=1.2,
                   label="what the host links can carry")
    events: dict[tuple[float, str], list[int]] = {}
    for i, (label, run) in enumerate(series):
        colour = _colour(i)
        pts = sorted(run["timeline"], key=lambda p: p["t"])
        ax.plot([p["t"] for p in pts], [float(p.get("bps") or 0) / div for p in pts], color=colour,
                linewidth=1.8, label=_fault_label(label, run), drawstyle="steps-mid" if len(pts) < 40 else "default")
        _loss_rug(ax, run, colour, i)
        for ev in run.get("events") or []:
            events.setdefault((float(ev["t"]), str(ev.get("what", "event"))), []).append(i)
    # an event every mode had is drawn once, in black; others in their mode's colour
    for row, ((t, what), who) in enumerate(sorted(events.items())):
        shared = len(who) == len(series)
        colour = "black" if shared else _colour(who[0])
        text = what if shared else f"{what} ({', '.join(series[i][0] for i in who)})"
        ax.axvline(t, color=colour, linestyle="--", linewidth=1.1, alpha=0.8)
        ax.annotate(text, xy=(t, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(4, -4 - 14 * (row % 6)), textcoords="offset points", fontsize=8,
                    color=colour, va="top",
                    bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none",
                          "alpha": 0.85})
    note = _speed_note([r for _, r in series])
    ax.set_ylim(0, top / div * 1.2 if top else 1)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel(f"delivered throughput ({unit})")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    fig.suptitle("Delivered throughput over time (dashed: events; ticks: lost packets' send times)" + (f" — {note}" if note else ""),
                 fontsize=12, fontweight="bold")
    return _save(fig, path)


# --------------------------------------------------------------------------- all

def write_plots(results, folder) -> list[Path]:
    """Write every picture the results allow into `folder`; the paths written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    groups = rundata.group_runs(results)
    written: list[Path | None] = [
        plot_uplink_loads(results, folder / "uplink-loads.png"),
        plot_fct_cdf(results, folder / "fct-cdf.png"),
        plot_reorder_hist(results, folder / "reorder.png"),
        plot_slowdown(results, folder / "fct-slowdown.png"),
    ]
    link_max = max([max(int(l.get("bytes_ab") or 0), int(l.get("bytes_ba") or 0)) * 8 / rundata.duration(r)
                    for runs in groups.values() for r in runs[:1] for l in r.get("links", [])] + [1.0])
    for label, runs in groups.items():
        if runs and runs[0].get("nodes"):
            written.append(plot_fabric(runs[0], folder / f"fabric-{_slug(label)}.png", vmax_bps=link_max))
    written.append(plot_timeline(results, folder / "timeline.png"))
    if any(len(runs) > 1 for runs in groups.values()):
        written.append(sweep.plot_idle_histogram(results, folder / "idle-sweep.png"))
    return [p for p in written if p is not None]
