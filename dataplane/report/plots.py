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
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from dataplane.report import closedloop, faultruns, idlemodel, rundata, sweep
from dataplane.report import metrics as m
from dataplane.report.fabricplot import plot_fabric
from dataplane.report.plotstyle import palette_colour, rate_unit, save, slug, speed_note
from dataplane.report.stats import percentile
from dataplane.report.table import fmt_bps, fmt_us
from dataplane.topology.model import Endpoint


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
    div, unit = rate_unit(max(top, cap or 0) or 1)
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
        colours = ["#4c72b0"] * len(ups) if ranked else [palette_colour(nodes.index(u["node"])) for u in ups]
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
    note = speed_note([d[1][0] for d in data])
    fig.suptitle("Uplink load per mode (bars coloured by switch)" + (f" — {note}" if note else ""),
                 fontsize=12, fontweight="bold")
    return save(fig, path)


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
        colour = palette_colour(i)
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
    return save(fig, path)


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
        ax.bar(xs, avg, width=width * 0.95, color=palette_colour(i), label=f"{label} avg")
        ax.plot(xs, p99, linestyle="none", marker="v", color=palette_colour(i), markersize=7,
                label=f"{label} p99")
    ax.axhline(1, color="grey", linestyle=":", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names)
    ax.set_xlabel("message size")
    ax.set_ylabel("FCT slowdown (completion / ideal at line rate)")
    ax.grid(axis="y", which="both", alpha=0.25)
    ax.legend(fontsize=8, ncol=2)
    fig.suptitle("FCT slowdown by message size", fontsize=12, fontweight="bold")
    return save(fig, path)


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
        ax.bar(xs, counts, width=width, color=palette_colour(i), edgecolor="black", linewidth=0.3,
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
    return save(fig, path)


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
    div, unit = rate_unit(top or 1)
    fig = Figure(figsize=(12, 5), layout="constrained")
    ax = fig.subplots()
    if capacity:
        ax.axhline(capacity / div, color="grey", linestyle=":", linewidth=1.2,
                   label="what the host links can carry")
    events: dict[tuple[float, str], list[int]] = {}
    for i, (label, run) in enumerate(series):
        colour = palette_colour(i)
        pts = sorted(run["timeline"], key=lambda p: p["t"])
        ax.plot([p["t"] for p in pts], [float(p.get("bps") or 0) / div for p in pts], color=colour,
                linewidth=1.8, label=_fault_label(label, run), drawstyle="steps-mid" if len(pts) < 40 else "default")
        _loss_rug(ax, run, colour, i)
        for ev in run.get("events") or []:
            events.setdefault((float(ev["t"]), str(ev.get("what", "event"))), []).append(i)
    # an event every mode had is drawn once, in black; others in their mode's colour
    for row, ((t, what), who) in enumerate(sorted(events.items())):
        shared = len(who) == len(series)
        colour = "black" if shared else palette_colour(who[0])
        text = what if shared else f"{what} ({', '.join(series[i][0] for i in who)})"
        ax.axvline(t, color=colour, linestyle="--", linewidth=1.1, alpha=0.8)
        ax.annotate(text, xy=(t, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(4, -4 - 14 * (row % 6)), textcoords="offset points", fontsize=8,
                    color=colour, va="top",
                    bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none",
                          "alpha": 0.85})
    note = speed_note([r for _, r in series])
    ax.set_ylim(0, top / div * 1.2 if top else 1)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel(f"delivered throughput ({unit})")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=9)
    fig.suptitle("Delivered throughput over time (dashed: events; ticks: lost packets' send times)" + (f" — {note}" if note else ""),
                 fontsize=12, fontweight="bold")
    return save(fig, path)


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
            written.append(plot_fabric(runs[0], folder / f"fabric-{slug(label)}.png", vmax_bps=link_max))
    written.append(plot_timeline(results, folder / "timeline.png"))
    if any(len(runs) > 1 for runs in groups.values()):
        written.append(sweep.plot_idle_histogram(results, folder / "idle-sweep.png"))
    return [p for p in written if p is not None]
