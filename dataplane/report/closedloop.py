"""Closed-loop transport metrics of a run (dataplane.traffic.transport): retransmissions,
CNPs, FCT slowdown per message, QP rate fairness and the steady state's queues and pause
frames (definitions in dataplane.report.metrics). None for open-loop runs."""
from __future__ import annotations

from collections import Counter

import numpy as np

from dataplane.report.stats import percentile
from dataplane.wire import roce

TRANSPORT_KEYS = ("retx_packets", "retx_bytes", "naks", "timeouts", "cnps_sent", "cnps_received",
                  "messages_done_pct", "slowdown_avg", "slowdown_p99", "qp_rate_min_max",
                  "host_queue_max_bytes", "host_queue_mean_bytes", "steady_queue_max_bytes",
                  "steady_queue_mean_bytes", "steady_pause_frames")
SLOWDOWN_EDGES = (1024, 4096, 16384, 65536, 262144)   # message size bucket edges, bytes


def ideal_fct_ns(size: int, mtu: int, line_bps: float) -> float:
    """A message alone on an empty fabric: its frames' bits at the line rate (metrics' docstring)."""
    # a message's packets have at most three lengths (full, shortened, last): one
    # frame_len each, not one per packet (a run has a million packets)
    chunks = Counter(roce.segment_message(size, mtu))
    bits = sum(roce.frame_len(p) * n for p, n in chunks.items()) * 8
    return bits * 1e9 / line_bps


def slowdowns(run: dict) -> list[tuple[int, float]]:
    """(message bytes, FCT slowdown) of every completed message of a closed-loop run."""
    out = []
    for f in run.get("flows", []):
        line, mtu = f.get("line_bps"), f.get("mtu")
        if not line or not mtu:
            continue
        for size, fct_ns in (f.get("transport_rx") or {}).get("messages", []):
            out.append((size, fct_ns / ideal_fct_ns(size, mtu, line)))
    return out


def slowdown_buckets(run: dict, edges=SLOWDOWN_EDGES) -> list[dict]:
    """Per size bucket [lo, hi): count, average and p99 slowdown (None when empty)."""
    bounds = [0, *edges, None]
    values = slowdowns(run)
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        vs = [v for size, v in values if size >= lo and (hi is None or size < hi)]
        out.append({"lo": lo, "hi": hi, "count": len(vs),
                    "avg": float(np.mean(vs)) if vs else None, "p99": percentile(vs, 99)})
    return out


def transport_metrics(run: dict) -> dict:
    flows = [f for f in run.get("flows", []) if "transport" in f]
    if not flows:
        return {k: None for k in TRANSPORT_KEYS}
    tx = [f.get("transport") or {} for f in flows]
    rx = [f.get("transport_rx") or {} for f in flows]
    posted = sum(int(f.get("messages_sent") or 0) for f in flows)
    done = sum(len(r.get("messages", [])) for r in rx)
    values = [v for _, v in slowdowns(run)]
    return {
        "retx_packets": sum(int(t.get("retx_packets", 0)) for t in tx),
        "retx_bytes": sum(int(t.get("retx_bytes", 0)) for t in tx),
        "naks": sum(int(t.get("naks", 0)) for t in tx),
        "timeouts": sum(int(t.get("timeouts", 0)) for t in tx),
        "cnps_sent": sum(int(r.get("cnps", 0)) for r in rx),
        "cnps_received": sum(int(t.get("cnps", 0)) for t in tx),
        "messages_done_pct": done / posted * 100 if posted else None,
        "slowdown_avg": float(np.mean(values)) if values else None,
        "slowdown_p99": percentile(values, 99),
        "qp_rate_min_max": qp_rate_min_max(tx),
        "host_queue_max_bytes": max((q["max"] for q in (run.get("host_port_queues") or {}).values()),
                                    default=0),
        "host_queue_mean_bytes": max((q["mean"] for q in (run.get("host_port_queues") or {}).values()),
                                     default=0),
        **steady_state(run, steady_window(tx)),
    }


def steady_window(transports: list[dict], settle_s: float = 1.0) -> tuple[float, float] | None:
    """(from, to) in seconds of the run while every QP was sending, from `settle_s` after
    the last one started; None when there is no such window or fewer than 2 QPs."""
    lines = [t.get("rate_timeline") or [] for t in transports]
    if len(lines) < 2 or not all(lines):
        return None
    starts = [next((p[0] for p in line if p[2] > 0), None) for line in lines]
    if None in starts:
        return None
    lo, hi = max(starts) + settle_s, min(line[-1][0] for line in lines)
    return (lo, hi) if lo <= hi else None


def steady_state(run: dict, window: tuple[float, float] | None) -> dict:
    """The host-facing queues and the switches' pause frames inside `window` (metrics' docstring)."""
    times = run.get("sample_t") or []
    inside = [i for i, t in enumerate(times) if window and window[0] <= t <= window[1]]
    if not inside:
        return {"steady_queue_max_bytes": None, "steady_queue_mean_bytes": None, "steady_pause_frames": None}
    ports = [*(run.get("host_port_queues") or {}).values(), *(run.get("uplink_queues") or {}).values()]
    series = [q["bytes"] for q in ports if len(q.get("bytes", [])) == len(times)]
    pauses = run.get("pause_frames_at") or []
    return {
        "steady_queue_max_bytes": max((q[i] for q in series for i in inside), default=0),
        "steady_queue_mean_bytes": max((sum(q[i] for i in inside) / len(inside) for q in series), default=0),
        "steady_pause_frames": pauses[inside[-1]] - pauses[max(inside[0] - 1, 0)] if pauses else None,
    }


def qp_steady_rates(transports: list[dict], settle_s: float = 1.0) -> list[float] | None:
    """Each QP's mean rate of new data (rate_timeline) over the samples while all of them
    were sending, from `settle_s` after the last one started; None when there is no such
    window or fewer than 2 QPs."""
    window = steady_window(transports, settle_s)
    if window is None:
        return None
    lo, hi = window
    means = []
    for t in transports:
        rates = [p[2] for p in t.get("rate_timeline") or [] if lo <= p[0] <= hi]
        if not rates:
            return None
        means.append(sum(rates) / len(rates))
    return means


def qp_rate_min_max(transports: list[dict], settle_s: float = 1.0) -> float | None:
    """Fairness of the QPs' sending rates: min / max of qp_steady_rates (1 = equal shares)."""
    means = qp_steady_rates(transports, settle_s)
    return min(means) / max(means) if means and max(means) > 0 else None
