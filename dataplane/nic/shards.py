"""A run's send side split over several engine processes, one per CPU.

A frame an engine sends is forwarded by the switches' XDP programs inside that engine's
own sendmmsg call (veth hands it on in the sending CPU's softirq), so one engine keeps
one CPU busy while the others idle: on 2 CPUs the demo's lab delivered 150 k frames per
wall second with one engine, and the second core sat idle (perf: 49 % swapper). Each
shard sends for its own host ports; the kernel's real-time scheduler puts the FIFO
engines on different CPUs. The shards share nothing but the start time, so the split is
by port: every flow stays whole in one engine.

A second engine only pays when one CPU cannot carry the run: it spins a CPU of its own,
and frames from two CPUs meet in the switches' queues in an order the wall clock's jitter
picks (a gapless sprayed run at 20 Mb/s reordered 1.08 % with two engines, over the 1 % its
test allows and no earlier run with one engine reached). So a run gets an engine for every
ENGINE_PPS frames a wall second it offers; the CPUs left without an engine take the
switches' forwarding after XDP (dataplane.nic.steering).

`partition` assigns ports to shards; `merge_reports` makes one engine report of theirs.
"""
from __future__ import annotations

import math
import os
from collections import Counter
from typing import Mapping, Sequence

# RAILAB_ENGINES=N sets the shard count (1: one engine, as before), for comparisons.
SHARDS_ENV = "RAILAB_ENGINES"
# What one engine's CPU forwards through a lab with room to spare: measured 86-160 k/s
# on 2-CPU VMs (bench lab, real and XDP-only queues).
ENGINE_PPS = 60_000


def offered_pps(flows: Sequence, duration_s: float | None) -> float:
    """Frames a wall second the flows (workload.Flow, rates already on the wall clock)
    offer: all their packets over their schedule's span, cut at the run's duration;
    infinite if some flow is unpaced."""
    packets = sum(f.total_packets for f in flows)
    if not packets:
        return 0.0
    if any(f.rate_bps <= 0 for f in flows):
        return math.inf
    # a flow takes at least its last message's start and at least its bytes at its rate
    span = max(max(f.schedule_end_s, f.wire_bytes * 8 / f.rate_bps) for f in flows)
    if duration_s:
        span = min(span, duration_s)
    return packets / span if span > 0 else math.inf


def shard_count(n_ports: int, *, closed_loop: bool = False, pps: float = math.inf) -> int:
    """How many engines: one per ENGINE_PPS of the offered `pps`, no more than the CPUs
    this process may run on or the ports. A closed-loop engine looks at the NIC's feedback
    every few microseconds even when it has nothing to send, so closed-loop runs leave one
    CPU to everything else: with a
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
        if pps != math.inf:
            n = min(n, math.ceil(pps / ENGINE_PPS))
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


def merge_reports(reports: Sequence[dict]) -> dict:
    """One report from the shards' (SendEngine.result): counts add up; elapsed is the
    longest; lateness percentiles are the largest shard's, an upper bound on the pooled
    percentile (which lies between the shards' least and greatest); per-flow and
    transport entries are each flow's own shard's."""
    if len(reports) == 1:
        return {**reports[0], "engine": {**reports[0]["engine"], "shards": 1}}
    per_flow: Counter = Counter()
    transport: dict = {}
    for rep in reports:
        per_flow.update(rep["per_flow_packets"])
        transport.update(rep.get("transport") or {})
    late = [rep["lateness_ns"] for rep in reports]
    lateness = {"count": sum(x["count"] for x in late),
                **{q: max(x[q] for x in late) for q in ("p50", "p90", "p99", "max")}}
    engines = [rep["engine"] for rep in reports]
    engine = dict(engines[0])
    for k in ("ports", "sockets", "flows", "batches", "syscalls", "retries", "sleeps", "breathers",
              "unsent_flows"):
        engine[k] = sum(e[k] for e in engines)
    for k in ("stopped", "cut_by_duration"):
        engine[k] = any(e[k] for e in engines)
    engine["fifo"] = all(e["fifo"] for e in engines)
    engine["last_errno"] = next((e["last_errno"] for e in engines if e["last_errno"]), 0)
    engine["start_ns"] = min(e["start_ns"] for e in engines)
    engine["shards"] = len(reports)
    merged = {**reports[0], "packets": sum(r["packets"] for r in reports),
              "bytes": sum(r["bytes"] for r in reports), "errors": sum(r["errors"] for r in reports),
              "elapsed_s": max(r["elapsed_s"] for r in reports), "per_flow_packets": dict(per_flow),
              "lateness_ns": lateness, "engine": engine}
    if any("transport" in r for r in reports):
        merged["transport"] = transport
    merged.pop("pfc", None)    # port indexes are per shard: KernelSenders maps each to its keys
    return merged
