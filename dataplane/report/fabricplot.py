"""The fabric picture of a run: every node at its tier, every link coloured by its load
(both directions), PFC pauses marked (dataplane.report.plots writes it per mode)."""
from __future__ import annotations

from pathlib import Path

import matplotlib
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from dataplane.report import metrics as m
from dataplane.report import rundata
from dataplane.report.plotstyle import LOAD_CMAP, ROLE_STYLE, TIER_NAME, node_of, save, speed_note
from dataplane.report.table import fmt_bps
from dataplane.topology.model import TIER


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
             if node_of(l["a"]) in pos and node_of(l["b"]) in pos]
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
            (xa, ya), (xb, yb) = pos[node_of(l["a"])], pos[node_of(l["b"])]
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
    note = speed_note([run])
    if note:
        stats += f"\n{note}"
    ax.set_title(title or f"{rundata.run_label(run)}{seed}: link load{stats}", fontsize=12, fontweight="bold",
                 loc="center")
    return save(fig, path)


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
        pairs.setdefault(frozenset((node_of(l["a"]), node_of(l["b"]))), []).append(i)
    return pairs


def _min_gap(pos: dict[str, tuple[float, float]]) -> float:
    rows: dict[float, list[float]] = {}
    for x, y in pos.values():
        rows.setdefault(y, []).append(x)
    gaps = [b - a for xs in rows.values() for a, b in zip(sorted(xs), sorted(xs)[1:]) if b > a]
    return min(gaps) if gaps else 1.0
