"""Seed sweeps: the same mode run with many hash seeds. What is the distribution of each
metric, and do the idle uplinks match what uniform random hashing predicts?

For n equal elephants hashed independently and uniformly onto m uplinks, an uplink stays
idle with probability (1 - 1/m)^n, so E[idle] = m (1 - 1/m)^n (idlemodel.expected_idle);
8 elephants on 8 uplinks leave 2.75 idle on average. The measured counterpart is
metrics' idle_leaf_uplinks (an uplink is idle when it carried < 1% of the busiest
uplink's bytes); expected values come from the run's own flows and cabling
(idlemodel.leaf_elephants), so mice crossing the fabric can only make measured < expected.
"""
from __future__ import annotations

from pathlib import Path

from dataplane.report import idlemodel, rundata
from dataplane.report import metrics as m
from dataplane.units import fmt_bps, fmt_us

SWEEP_PERCENTILES = (5, 25, 50, 75, 95)


def sweep_summary(results, percentiles=SWEEP_PERCENTILES) -> dict:
    """Per mode (label): {"runs": N, "seeds": [...], "metrics": {metric: {mean, std, min,
    p5, p25, p50, p75, p95, max, n, values}}, "idle": metrics.idle_summary(...)}."""
    out = {}
    for label, runs in rundata.group_runs(results).items():
        summary = m.mode_summary(runs, percentiles)
        out[label] = {
            "runs": len(runs),
            "seeds": summary["seeds"],
            "metrics": {k: summary[k] for k in m.METRIC_KEYS},
            "idle": m.idle_summary(runs),
        }
    return out


def render_sweep_text(results) -> str:
    """A few plain lines per swept mode: each headline metric's mean ± std [p5, p95], and
    the idle-uplink comparison."""
    fmt = {"goodput_bps": fmt_bps, "fct_p50_us": fmt_us, "fct_p99_us": fmt_us}
    lines = []
    for label, s in sweep_summary(results).items():
        if s["runs"] < 2:
            continue
        lines.append(f"{label}: {s['runs']} runs (seeds {_seed_range(s['seeds'])})")
        for key in ("goodput_bps", "uplink_max_mean", "jain", "idle_leaf_uplinks", "reorder_pct",
                    "fct_p50_us", "fct_p99_us", "loss_packets"):
            d = s["metrics"][key]
            if d is None:
                continue
            f = fmt.get(key, lambda v: f"{v:.3g}")
            lines.append(f"  {key:18} {f(d['mean'])} ± {f(d['std'])}  [p5 {f(d['p5'])}, "
                         f"p95 {f(d['p95'])}]")
        idle = s["idle"]
        if idle["expected_mean"] is not None:
            lines.append(f"  idle leaf uplinks: measured {idle['measured_mean']:.2f} ± "
                         f"{idle['measured_std']:.2f}, expected {idle['expected_mean']:.2f} "
                         f"(uniform random hashing) of {idle['leaf_uplinks']}")
    return "\n".join(lines)


def _seed_range(seeds) -> str:
    known = [s for s in seeds if isinstance(s, int)]
    if len(known) == len(seeds) and known and sorted(known) == list(range(min(known), max(known) + 1)):
        return f"{min(known)}..{max(known)}"
    return ", ".join(str(s) for s in seeds[:6]) + (" ..." if len(seeds) > 6 else "")


def plot_idle_histogram(results, path) -> Path | None:
    """Histogram of idle leaf uplinks per run for every mode with several runs, with the
    measured mean, the expected mean and the expected distribution under uniform random
    hashing; None when no mode has several runs."""
    # matplotlib takes half a second to import: only where a figure is drawn
    from matplotlib.figure import Figure

    groups = {k: v for k, v in rundata.group_runs(results).items() if len(v) > 1}
    if not groups:
        return None
    fig = Figure(figsize=(6.5 * min(len(groups), 3), 4.8), layout="constrained")
    axes = fig.subplots(1, len(groups), squeeze=False)[0]
    for ax, (label, runs) in zip(axes, groups.items()):
        idle = m.idle_summary(runs)
        counts: dict[int, int] = {}
        for k in idle["measured"]:
            counts[int(k)] = counts.get(int(k), 0) + 1
        n = len(runs)
        top = max(list(counts) + [idle["leaf_uplinks"] // 2 or 1])
        pmf = idlemodel.expected_idle_pmf_for_run(runs[0])
        ax.bar(list(counts), [c / n for c in counts.values()], width=0.8, color="#1f77b4",
               edgecolor="black", linewidth=0.4, label=f"measured ({n} runs)")
        if pmf is not None:
            ks = [k for k, p in enumerate(pmf) if p > 1e-4 or k <= top]
            top = max(top, max(ks))
            ax.plot(ks, [pmf[k] for k in ks], "o--", color="#d62728", linewidth=1.2, markersize=5,
                    label="expected, uniform random hashing")
        ax.axvline(idle["measured_mean"], color="#1f77b4", linewidth=2,
                   label=f"measured mean {idle['measured_mean']:.2f}")
        if idle["expected_mean"] is not None:
            ax.axvline(idle["expected_mean"], color="#d62728", linewidth=2, linestyle=":",
                       label=f"expected mean {idle['expected_mean']:.2f}")
        ax.set_xlim(-0.6, top + 0.6)
        ax.set_xticks(range(0, top + 1, max(1, (top + 1) // 12)))
        ax.set_xlabel(f"idle leaf→spine uplinks in a run (of {idle['leaf_uplinks']})")
        ax.set_ylabel("fraction of runs")
        ax.set_title(label, fontsize=11)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.legend(fontsize=8)
    fig.suptitle("Idle uplinks over a seed sweep vs uniform random hashing", fontsize=12,
                 fontweight="bold")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, facecolor="white")
    return path
