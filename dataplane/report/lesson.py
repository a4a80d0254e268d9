"""The lesson of a comparison, worded from the run's own numbers.

One or two lines under the comparison table: how evenly each mode loaded the uplinks
(busiest over mean; 1.00 = even) and what that cost in reordering, in the order a
teacher would say it: hashing, flowlets, spraying, navigation. Nothing is fixed text but
what each mechanism is; every figure comes from the run, so a run that turns out
differently says so. Pure code."""
from __future__ import annotations

from dataplane.report import metrics as m
from dataplane.report import rundata

EVEN = 1.10        # max/mean at or under this reads as "even"
UNEVEN = 1.25      # ... over this as "uneven"
CLEARLY = 0.10     # a smaller max/mean difference than this is a tie


def _kind(label: str) -> str:
    for kind in ("ecmp", "flowlet", "spray", "nav"):
        if label.startswith(kind):
            return kind
    return "other"


def _figures(results) -> list[tuple[str, str, float, int, float]]:
    """(label, kind, uplink max/mean, idle uplinks, reorder %) of each mode with a
    balance figure, averaged over its runs."""
    out = []
    for label, runs in rundata.group_runs(results).items():
        per = [m.run_metrics(r) for r in runs]
        ratios = [p["uplink_max_mean"] for p in per if p["uplink_max_mean"] is not None]
        if not ratios:
            continue
        idle = [p["idle_uplinks"] or 0 for p in per]
        reorder = [p["reorder_pct"] or 0.0 for p in per]
        out.append((label, _kind(label), sum(ratios) / len(ratios), round(sum(idle) / len(idle)),
                    sum(reorder) / len(reorder)))
    return out


def lesson_lines(results) -> list[str]:
    """At most two lines; none when fewer than two modes have a balance figure."""
    figs = _figures(results)
    if len(figs) < 2:
        return []
    first = "busiest uplink / mean (1.00 = even): " + ", ".join(
        f"{label} {ratio:.2f}" + (f" ({idle} idle)" if idle else "") for label, _, ratio, idle, _ in figs)
    said = []
    hashing = next((f for f in figs if f[1] == "ecmp"), None)
    if hashing and hashing[2] > UNEVEN:
        said.append(f"{hashing[0]}'s hash put flows together on some uplinks"
                    + (f" and left {hashing[3]} idle" if hashing[3] else ""))
    for label, kind, ratio, _, reorder in figs:
        if kind == "flowlet" and hashing:
            if ratio <= hashing[2] - CLEARLY:
                said.append(f"{label} put each new flowlet on the least-loaded uplink ({ratio:.2f})"
                            + (", but a flow moves only when it pauses" if ratio > UNEVEN else ""))
            else:
                said.append(f"{label} did no better than hashing ({ratio:.2f}): a flow moves only "
                            "when it pauses")
        elif kind == "spray":
            how = "evened the load" if ratio <= EVEN else "spread every packet"
            said.append(f"{label} {how} ({ratio:.2f})"
                        + (f" at the price of {reorder:.2f} % of packets out of order" if reorder > 0
                           else " with no reordering"))
        elif kind == "nav":
            how = "placed whole flows apart" if ratio <= EVEN else "placed whole flows"
            said.append(f"{label} {how} ({ratio:.2f})"
                        + (" with no reordering" if reorder == 0 else f", {reorder:.2f} % out of order"))
    return [first, "; ".join(said) + "."] if said else [first]
