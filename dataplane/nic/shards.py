"""A run's send side split over several engine processes, one per CPU.

A frame an engine sends is forwarded by the switches' XDP programs inside that engine's
own sendmmsg call (veth hands it on in the sending CPU's softirq), so one engine keeps
one CPU busy while the others idle: on 2 CPUs the demo's lab delivered 150 k frames per
wall second with one engine, and the second core sat idle (perf: 49 % swapper). Each
shard sends for its own host ports; the kernel's real-time scheduler puts the FIFO
engines on different CPUs. The shards share nothing but the start time, so the split is
by port: every flow stays whole in one engine.

`partition` assigns ports to shards; `merge_reports` makes one engine report of theirs.
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

# RAILAB_ENGINES=N sets the shard count (1: one engine, as before), for comparisons.
SHARDS_ENV = "RAILAB_ENGINES"


def shard_count(n_ports: int, *, closed_loop: bool = False) -> int:
    """How many engines: one per CPU this process may run on, no more than ports. A
    closed-loop engine looks at the NIC's feedback every few microseconds even when it has
    nothing to send, so closed-loop runs leave one CPU to everything else: with a
    closed-loop engine on each of 2 CPUs the agent's PFC poll ran late (headroom drops,
    DCQCN's test failed) and a link cut's failover with it."""
    wanted = os.environ.get(SHARDS_ENV)
    if wanted:
        try:
            n = int(wanted)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"{SHARDS_ENV}={wanted!r}: a whole number >= 1")
    else:
        n = len(os.sched_getaffinity(0)) - (1 if closed_loop else 0)
    return max(1, min(n, n_ports))


def partition(load: Mapping[str, int], shards: int) -> list[list[str]]:
    """Ports (key -> packets to send) into `shards` groups of near-equal load: the
    heaviest port first to the lightest group. Empty groups are left out; each group keeps
    the ports' given order."""
    groups: list[list[str]] = [[] for _ in range(max(1, shards))]
    totals = [0] * len(groups)
    for key in sorted(load, key=lambda k: -load[k]):
        g = totals.index(min(totals))
        groups[g].append(key)
        totals[g] += load[key]
    order = {k: i for i, k in enumerate(load)}
    return [sorted(g, key=order.__getitem__) for g in groups if g]


def _add_counts(into: dict, more: Mapping) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def merge_reports(reports: Sequence[dict]) -> dict:
    """One report from the shards' (SendEngine.result): counts add up; elapsed is the
    longest; lateness percentiles are the largest shard's, an upper bound on the pooled
    percentile (which lies between the shards' least and greatest); per-flow and
    transport entries are each flow's own shard's."""
    if len(reports) == 1:
        return {**reports[0], "engine": {**reports[0]["engine"], "shards": 1}}
    per_flow: dict = {}
    transport: dict = {}
    for rep in reports:
        _add_counts(per_flow, rep["per_flow_packets"])
        transport.update(rep.get("transport") or {})
    late = [rep["lateness_ns"] for rep in reports]
    lateness = {"count": sum(x["count"] for x in late),
                **{q: max(x[q] for x in late) for q in ("p50", "p90", "p99", "max")}}
    engines = [rep["engine"] for rep in reports]
    engine = dict(engines[0])
    for k in ("ports", "sockets", "flows", "batches", "syscalls", "retries", "sleeps", "breathers", "unsent_flows"):
        engine[k] = sum(e[k] for e in engines)
    for k in ("stopped", "cut_by_duration", "fifo"):
        engine[k] = any(e[k] for e in engines) if k != "fifo" else all(e[k] for e in engines)
    engine["last_errno"] = next((e["last_errno"] for e in engines if e["last_errno"]), 0)
    engine["start_ns"] = min(e["start_ns"] for e in engines)
    engine["shards"] = len(reports)
    merged = {**reports[0], "packets": sum(r["packets"] for r in reports),
              "bytes": sum(r["bytes"] for r in reports), "errors": sum(r["errors"] for r in reports),
              "elapsed_s": max(r["elapsed_s"] for r in reports), "per_flow_packets": per_flow,
              "lateness_ns": lateness, "engine": engine}
    if any("transport" in r for r in reports):
        merged["transport"] = transport
    merged.pop("pfc", None)    # port indexes are per shard: KernelSenders maps each to its keys
    return merged
