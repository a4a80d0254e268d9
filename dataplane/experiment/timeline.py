"""Delivered throughput over time, from the traffic itself.

Each receiver books the bytes of the data frames it received per millisecond of their
kernel receive stamps (dataplane.traffic.receiver.Receiver.rx_bins). The timeline sums
them over every receiver into equal buckets from the run's common start (t = 0). A bucket
therefore holds what arrived at the hosts in that stretch of time -- never more than their
ports can carry -- whenever the counters or the receivers happened to be read: a reader that
stalls cannot bunch a second's frames into one bucket.

Pure code: no I/O."""
from __future__ import annotations

from typing import Iterable, Mapping


def merge_bins(answers: Iterable[Mapping]) -> tuple[dict[int, int], int]:
    """The receivers' rx_bins (as their JSON answers carry them: {"rx_bin_ns", "rx_bins"})
    added up: (bin -> bytes, bin width in ns). Answers without bins are skipped; all
    answers must use the same width."""
    total: dict[int, int] = {}
    width = 0
    for answer in answers:
        bins = answer.get("rx_bins")
        if not bins:
            continue
        w = int(answer["rx_bin_ns"])
        if width and w != width:
            raise ValueError(f"receivers binned by {width} and {w} ns")
        width = w
        for b, n in bins.items():
            total[int(b)] = total.get(int(b), 0) + int(n)
    return total, width


def delivered_timeline(bins: Mapping[int, int], bin_ns: int, t0_ns: int, width_s: float,
                       end_s: float | None = None) -> list[dict]:
    """Equal buckets [k w, (k+1) w) from t0_ns (CLOCK_MONOTONIC), each {t: its end in
    seconds from t0, bps: bits delivered in it / w}. A bin's bytes are spread evenly over
    its span, so one straddling a bucket edge is shared in proportion. Buckets run up to
    end_s (default: the last bin's end). Bytes received before t0 are left out."""
    if width_s <= 0 or bin_ns <= 0 or not bins:
        return []
    width_ns = width_s * 1e9
    last_ns = (max(bins) + 1) * bin_ns - t0_ns
    end_ns = end_s * 1e9 if end_s is not None else last_ns
    n = int(end_ns / width_ns + 1e-9)
    if n <= 0:
        return []
    acc = [0.0] * n
    for b, nbytes in bins.items():
        lo, hi = b * bin_ns - t0_ns, (b + 1) * bin_ns - t0_ns
        if hi <= 0 or lo >= n * width_ns:
            continue
        k = max(int(lo // width_ns), 0)
        while k < n and k * width_ns < hi:
            overlap = min(hi, (k + 1) * width_ns) - max(lo, k * width_ns)
            if overlap > 0:
                acc[k] += nbytes * overlap / bin_ns
            k += 1
    return [{"t": round((k + 1) * width_s, 4), "bps": acc[k] * 8 / width_s} for k in range(n)]


def host_capacity_bps(links: Iterable[Mapping]) -> float | None:
    """What the fabric can deliver to its hosts: the emulated speeds of the host links,
    added up (None without a port model)."""
    speeds = [l.get("scaled_bps") for l in links if "host" in (l.get("a_role"), l.get("b_role"))]
    if not speeds or any(not s for s in speeds):
        return None
    return float(sum(speeds))
