"""A receiver's figures over plain numbers (dataplane.traffic.receiver's docstring has
the definitions): count, min, percentiles and max of a list, and a flow's loss timing
(outage, recovery and loss windows) from its packets' send times."""
from __future__ import annotations

import statistics


def _pct(sorted_vals: list[int], q: float) -> int:
    if not sorted_vals:
        return 0
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


def summary(values) -> dict[str, float]:
    """count, min, p50, p99, max and mean of some nanosecond values ({count: 0} if none)."""
    v = sorted(values)
    if not v:
        return {"count": 0}
    return {"count": len(v), "min": v[0], "p50": _pct(v, 0.5), "p99": _pct(v, 0.99),
            "max": v[-1], "mean": statistics.fmean(v)}


MAX_WINDOWS = 256       # loss windows kept per flow (the figures use all of them)


def _unknown(note: str) -> dict:
    return {"outage_ns": None, "recovery_ns": None, "windows": [], "note": note}


def loss_timing(send_ns: dict[int, int], lost) -> dict:
    """Outage and recovery of one flow from send times (module doc, "network-side").

    send_ns: position -> railab send timestamp of every position delivered; lost: the
    positions never delivered. Returns {outage_ns, recovery_ns, windows, note}: windows
    = [[start_ns, end_ns, lost packets], ...] (at most MAX_WINDOWS, the first ones;
    "truncated" is set when there were more); outage/recovery None with a note when
    they cannot be known."""
    lost = sorted(set(lost))
    if not send_ns:
        return _unknown("no packet received")
    if not lost:
        return {"outage_ns": 0, "recovery_ns": 0, "windows": [], "note": None}
    prev = None
    for pos in sorted(send_ns):
        ts = send_ns[pos]
        if ts <= 0:
            return _unknown("a send timestamp is missing")
        if prev is not None and ts < prev:
            return _unknown("send clock went backwards")
        prev = ts
    windows: list[list[int]] = []
    i = 0
    while i < len(lost):
        j = i
        while j + 1 < len(lost) and lost[j + 1] == lost[j] + 1:
            j += 1
        before, after = lost[i] - 1, lost[j] + 1
        if before not in send_ns:
            return _unknown("lost before the first packet received (start unknown)")
        if after not in send_ns:
            return _unknown("lost until the end (no packet delivered after the loss)")
        t0, t1 = send_ns[before], send_ns[after]
        if t1 <= t0:
            return _unknown("send timestamps do not advance across a loss")
        step = (t1 - t0) / (after - before)
        windows.append([int(round(t0 + step)), t1, after - before - 1])
        i = j + 1
    out = {"outage_ns": windows[-1][1] - windows[0][0], "recovery_ns": windows[0][1] - windows[0][0],
           "windows": windows[:MAX_WINDOWS], "note": None}
    if len(windows) > MAX_WINDOWS:
        out["truncated"] = True
    return out


def timing_dict(timing: dict) -> dict:
    """loss_timing() as a flow record carries it (µs; None = unknown)."""
    if not timing:
        return {}
    us = lambda ns: None if ns is None else ns / 1000   # noqa: E731
    return {"outage_us": us(timing["outage_ns"]), "recovery_us": us(timing["recovery_ns"]),
            "loss_windows_ns": timing["windows"], "timing_note": timing["note"],
            **({"loss_windows_truncated": True} if timing.get("truncated") else {})}
