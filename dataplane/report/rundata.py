"""Accessors of the runner's RUN dicts: what a run carried and where, read once for every
area's metrics (dataplane.report.metrics and the modules it gathers) and for the table and
plots. A RUN is the JSON-serialisable dict the experiment runner writes per mode and run
(``mode``, ``seed``, ``duration_s``, ``nodes``, ``links``, ``flows``, ``switches`` and the
optional ``timeline`` and ``events``; see dataplane.report.metrics)."""
from __future__ import annotations

import re
from collections import defaultdict

from dataplane.topology.model import Endpoint

# (lower role, upper role) of a link going one tier up -> its tier's name
UP_PAIRS = {("leaf", "spine"): "leaf-spine", ("spine", "core"): "spine-core"}
# a sending leaf sent at least this share of what the busiest leaf sent upwards (the
# receivers' ACKs alone do not make one)
SENDING_LEAF_SHARE = 0.1


def natural_key(text: str) -> list:
    """Sort key that puts leaf2 before leaf10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]


def run_label(run: dict) -> str:
    """The name a run is shown under: its label if the runner gave one, else its mode."""
    return str(run.get("label") or run.get("mode") or "?")


def duration(run: dict) -> float:
    d = float(run.get("duration_s") or 0.0)
    return d if d > 0 else 1.0


def uplinks(run: dict) -> list[dict]:
    """Uplinks of a run, in natural order: {name, lower, upper, node, tier, bytes, packets,
    load_bps, speed_bps, scaled_bps, util}. util = load / scaled_bps (None if unknown)."""
    d = duration(run)
    out = []
    for link in run.get("links", []):
        roles = (link.get("a_role"), link.get("b_role"))
        if roles in UP_PAIRS:
            lower, upper, direction, tier = link["a"], link["b"], "ab", UP_PAIRS[roles]
        elif roles[::-1] in UP_PAIRS:
            lower, upper, direction, tier = link["b"], link["a"], "ba", UP_PAIRS[roles[::-1]]
        else:
            continue
        nbytes = int(link.get(f"bytes_{direction}") or 0)
        load = nbytes * 8 / d
        scaled = link.get("scaled_bps")
        out.append({
            "name": lower, "lower": lower, "upper": upper, "node": Endpoint.parse(lower).node, "tier": tier,
            "bytes": nbytes, "packets": int(link.get(f"packets_{direction}") or 0), "load_bps": load,
            "speed_bps": link.get("speed_bps"), "scaled_bps": scaled,
            "util": load / scaled if scaled else None,
        })
    out.sort(key=lambda u: natural_key(u["lower"]))
    return out


def completions(run: dict, cls: str | None = None) -> list[float]:
    """All message completion times (µs) of a run, optionally of one flow class."""
    out: list[float] = []
    for flow in run.get("flows", []):
        if cls is None or flow.get("cls") == cls:
            out.extend(float(x) for x in flow.get("completions_us") or [])
    return out


def reorder_histogram(run: dict) -> dict[int, int]:
    """Reorder distance -> packets, summed over flows (keys may be str in JSON)."""
    hist: dict[int, int] = defaultdict(int)
    for flow in run.get("flows", []):
        for k, v in (flow.get("reorder_hist") or {}).items():
            hist[int(k)] += int(v)
    return dict(sorted(hist.items()))


def host_port_links(run: dict) -> dict[str, tuple[str, dict]]:
    """host port "srv1:nic0" -> (the leaf node it is cabled to, the link's record)."""
    out = {}
    for link in run.get("links", []):
        if link.get("a_role") == "host" and link.get("b_role") == "leaf":
            out[link["a"]] = (Endpoint.parse(link["b"]).node, link)
        elif link.get("b_role") == "host" and link.get("a_role") == "leaf":
            out[link["b"]] = (Endpoint.parse(link["a"]).node, link)
    return out


def host_port_leaf(run: dict) -> dict[str, str]:
    """host port "srv1:nic0" -> the leaf node it is cabled to."""
    return {port: leaf for port, (leaf, _) in host_port_links(run).items()}


def leaf_of(endpoint: str, port_leaf: dict[str, str]) -> str | None:
    if endpoint in port_leaf:
        return port_leaf[endpoint]
    # "srv1:nic0" for a dual-plane NIC with ports nic0a/nic0b: only if they share a leaf
    leaves = {leaf for port, leaf in port_leaf.items() if port.startswith(endpoint)}
    return leaves.pop() if len(leaves) == 1 else None


def sum_of(flows, key) -> int:
    """The flows' values of `key` summed (a missing or None value counts 0)."""
    return sum(int(f.get(key) or 0) for f in flows)


def group_runs(results) -> dict[str, list[dict]]:
    """Runs grouped by label (the run's label, else mode), in first-seen order.

    Accepts a list of RUN dicts, a dict label -> RUN or list of RUNs, or an experiment
    dict with "runs" (list) and optionally "sweep" (list, grouped as "<label> sweep")."""
    groups: dict[str, list[dict]] = {}

    def add(label: str, run: dict) -> None:
        groups.setdefault(label, []).append(run)

    if isinstance(results, dict) and ("runs" in results or "sweep" in results):
        for run in results.get("runs") or []:
            add(run_label(run), run)
        for run in results.get("sweep") or []:
            add(f"{run_label(run)} sweep", run)
    elif isinstance(results, dict) and "links" in results and "flows" in results:
        add(run_label(results), results)
    elif isinstance(results, dict):
        for label, value in results.items():
            for run in value if isinstance(value, list) else [value]:
                add(str(label), run)
    else:
        for run in results:
            add(run_label(run), run)
    return groups


def results_title(results, default: str = "railab experiment") -> str:
    if isinstance(results, dict):
        for key in ("title", "name", "experiment"):
            if isinstance(results.get(key), str):
                return results[key]
    return default
