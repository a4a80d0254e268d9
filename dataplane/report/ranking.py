"""Modes ranked by average FCT slowdown, with the ties the data cannot break.

A run's average slowdown is a mean over a thousand messages whose slowdowns spread over
two orders of magnitude (the short ones' are mostly queueing behind others), so two modes
a few percent apart are often within what another draw of the same workload gives: a
ranking that orders them anyway changes between seeds. Here two modes are ordered only
when a bootstrap over their messages (BOOTSTRAP resamples, fixed generator seed, so the
same results always rank the same) puts the difference of their averages away from 0
with CONFIDENCE; otherwise they tie. The bootstrap resamples blocks of messages that
arrived one after another (a moving-block bootstrap, blocks of sqrt(n)), not single
messages: neighbours in time share a host's stall, a go-back-N storm, a queue, so single
messages are not independent draws, and resampling them one by one made intervals too
narrow -- seed 1 put ECMP ahead of SprayLink nearly at 95 % where seed 2 put it behind. A bootstrap of a handful of messages says nothing
(one message resamples to itself, any difference looks certain), so modes with fewer
than MIN_MESSAGES messages in the comparison always tie. Groups: modes sorted by
average, a mode joins the group before it unless it is significantly worse than that
group's best.

Two rankings agree when no pair of modes is ordered one way in one and the other way in
the other (a tie in one and an order in the other is no contradiction).
"""
from __future__ import annotations

import numpy as np

from dataplane.report import closedloop, rundata

BOOTSTRAP = 2000
CONFIDENCE = 0.95
MIN_MESSAGES = 30       # the usual floor for a percentile bootstrap of a mean
_RNG_SEED = 20151117    # fixed: the ranking of given results never changes from one report to the next


def _block_means(x: np.ndarray, rng) -> np.ndarray:
    """BOOTSTRAP means of x resampled in moving blocks of about sqrt(len(x)) neighbours."""
    n = len(x)
    block = max(1, round(n ** 0.5))
    blocks = -(-n // block)
    starts = rng.integers(0, n - block + 1, (BOOTSTRAP, blocks))
    picks = (starts[:, :, None] + np.arange(block)).reshape(BOOTSTRAP, -1)[:, :n]
    return x[picks].mean(axis=1)


def _mean_diff_interval(a: np.ndarray, b: np.ndarray, rng) -> tuple[float, float]:
    """CONFIDENCE interval of mean(b) - mean(a), resampling each independently."""
    tail = (1 - CONFIDENCE) / 2 * 100
    lo, hi = np.percentile(_block_means(b, rng) - _block_means(a, rng), [tail, 100 - tail])
    return float(lo), float(hi)


def rank(slowdowns: dict[str, list[float]]) -> list[list[str]]:
    """Groups of mode labels, best (lowest average slowdown) first, from each mode's
    slowdowns in the order the messages ran; modes without messages are left out."""
    values = {label: np.asarray(v, float) for label, v in slowdowns.items() if len(v)}
    order = sorted(values, key=lambda label: (values[label].mean(), label))
    rng = np.random.default_rng(_RNG_SEED)
    groups: list[list[str]] = []
    for label in order:
        if groups:
            best = values[groups[-1][0]]
            few = min(len(best), len(values[label])) < MIN_MESSAGES
            if few or _mean_diff_interval(best, values[label], rng)[0] <= 0:
                groups[-1].append(label)
                continue
        groups.append([label])
    return groups


def text(groups: list[list[str]]) -> str:
    """'flowlet = spraylink < ecmp < spray-rr'."""
    return " < ".join(" = ".join(group) for group in groups)


def ordered_pairs(groups: list[list[str]]) -> set[tuple[str, str]]:
    """(better, worse) for every pair the ranking orders."""
    return {(a, b) for i, group in enumerate(groups) for a in group
            for later in groups[i + 1:] for b in later}


def agree(first: list[list[str]], second: list[list[str]]) -> bool:
    return not {(b, a) for a, b in ordered_pairs(first)} & ordered_pairs(second)


def _in_time_order(run: dict) -> dict:
    """The run with its flows (QPs) in the order their first packets arrived, so that a
    block of consecutive messages is a stretch of time (flows without a time keep their
    place at the start)."""
    return {**run, "flows": sorted(run.get("flows", []), key=lambda f: f.get("first_rx_ns") or 0)}


def of_results(view, lo: int = 0, hi: int | None = None) -> list[list[str]] | None:
    """The ranking of the modes of a report view (label -> runs; every run of a mode
    pooled) over the messages of lo <= size < hi bytes, or None when fewer than two modes
    completed such messages."""
    slowdowns = {label: [v for run in runs for size, v in closedloop.slowdowns(_in_time_order(run))
                         if size >= lo and (hi is None or size < hi)]
                 for label, runs in rundata.group_runs(view).items()}
    slowdowns = {label: v for label, v in slowdowns.items() if v}
    return rank(slowdowns) if len(slowdowns) >= 2 else None


def by_bucket(view, edges=closedloop.SLOWDOWN_EDGES) -> list[dict]:
    """The ranking over all messages, then per size bucket: [{lo, hi, ranking}] (lo 0 and
    hi None for all messages first); None where a bucket has fewer than two modes."""
    bounds = [0, *edges, None]
    return [{"lo": 0, "hi": None, "ranking": of_results(view)}] + \
           [{"lo": lo, "hi": hi, "ranking": of_results(view, lo, hi)} for lo, hi in zip(bounds, bounds[1:])]
