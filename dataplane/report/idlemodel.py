"""The idle-uplink model: how many leaf uplinks a run left idle, against how many uniform
random hashing of its elephants would leave idle (definitions: ``idle_uplinks``,
``expected_idle_uplinks`` in dataplane.report.metrics)."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from dataplane.report.rundata import host_port_leaf, leaf_of, uplinks

IDLE_FRACTION = 0.01
PROTOCOL_FRAME_BYTES = 80      # an ACK (62 B) or a CNP (74 B) is no bigger


def data_bytes(up: dict) -> int:
    """What an uplink carried beyond protocol-sized frames (metrics' docstring, idle_uplinks)."""
    return max(int(up["bytes"]) - PROTOCOL_FRAME_BYTES * int(up["packets"]), 0)


def idle_count(values, fraction: float = IDLE_FRACTION) -> int:
    """How many values are below `fraction` of the largest (all of them if the largest is 0)."""
    xs = [float(v) for v in values]
    if not xs:
        return 0
    top = max(xs)
    if top <= 0:
        return len(xs)
    return sum(1 for x in xs if x < fraction * top)


def expected_idle(n: int, m: int) -> float:
    """Expected number of empty uplinks when n equal elephants are hashed uniformly and
    independently onto m uplinks: m (1 - 1/m)^n (each uplink is missed by all n)."""
    if m <= 0:
        return 0.0
    return m * (1 - 1 / m) ** n


def leaf_elephants(run: dict) -> dict[str, tuple[int, int]] | None:
    """leaf -> (n, m): n = elephant flows that must leave the leaf upwards (source NIC on it,
    destination NIC on another leaf), m = its leaf->spine uplinks. None when the fabric has
    no leaf uplinks or an elephant's endpoint cannot be placed on exactly one leaf."""
    per_leaf: dict[str, int] = defaultdict(int)
    for up in uplinks(run):
        if up["tier"] == "leaf-spine":
            per_leaf[up["node"]] += 1
    if not per_leaf:
        return None
    port_leaf = host_port_leaf(run)
    crossing: dict[str, int] = defaultdict(int)
    for flow in run.get("flows", []):
        if flow.get("cls") != "elephant":
            continue
        src, dst = leaf_of(str(flow.get("src")), port_leaf), leaf_of(str(flow.get("dst")), port_leaf)
        if src is None or dst is None:
            return None
        if src != dst:
            crossing[src] += 1
    return {leaf: (crossing.get(leaf, 0), m) for leaf, m in sorted(per_leaf.items())}


def expected_idle_for_run(run: dict) -> float | None:
    """Expected idle uplinks of the leaves that send elephants upwards, if each hashed its
    crossing elephants uniformly at random: sum over those leaves of
    expected_idle(n_leaf, m_leaf); None when leaf_elephants cannot tell."""
    per_leaf = leaf_elephants(run)
    if per_leaf is None or not any(n for n, _m in per_leaf.values()):
        return None
    return sum(expected_idle(n, m) for n, m in per_leaf.values() if n > 0)


def idle_elephant_uplinks(run: dict) -> int | None:
    """Measured counterpart of expected_idle_for_run: idle uplinks (IDLE_FRACTION of the
    leaf's own busiest uplink) of the leaves that send elephants upwards. Leaves without
    elephants are left out: acknowledgements make their uplinks look busy."""
    per_leaf = leaf_elephants(run)
    if per_leaf is None or not any(n for n, _m in per_leaf.values()):
        return None
    by_leaf: dict[str, list[float]] = defaultdict(list)
    for up in uplinks(run):
        if up["tier"] == "leaf-spine":
            by_leaf[up["node"]].append(data_bytes(up))
    return sum(idle_count(by_leaf[leaf]) for leaf, (n, _m) in per_leaf.items() if n > 0)


def idle_pmf(n: int, m: int) -> list[float]:
    """P(exactly k of m uplinks get none of n uniformly hashed elephants), k = 0..m
    (occupancy distribution, by dynamic programming over the elephants)."""
    if m <= 0:
        return [1.0]
    occupied = [0.0] * (m + 1)
    occupied[0] = 1.0
    for _ in range(n):
        nxt = [0.0] * (m + 1)
        for k, p in enumerate(occupied):
            if p:
                nxt[k] += p * k / m
                if k < m:
                    nxt[k + 1] += p * (m - k) / m
        occupied = nxt
    return [occupied[m - k] for k in range(m + 1)]


def expected_idle_pmf_for_run(run: dict) -> list[float] | None:
    """Distribution of the number of idle leaf uplinks of the whole fabric under uniform
    random hashing (per-leaf occupancy distributions convolved); None when unknown."""
    per_leaf = leaf_elephants(run)
    if per_leaf is None:
        return None
    total = [1.0]
    for n, m in per_leaf.values():
        total = [float(x) for x in np.convolve(total, idle_pmf(n, m))]
    return total
