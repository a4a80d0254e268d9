"""The kernel NIC's receive books as the Python receivers report them.

dataplane.traffic.hostrun's `recv` answers with FlowStats.to_dict() per flow plus the
delivered-bytes bins; these functions make the same answer from the responder's per-QP
maps (NicResponder.qps()), its message-completion events and its bins, so every report,
table and plot reads a kernel-NIC run as it reads a Python one. Pure: no I/O.

What differs, and why:
  * latency p50/p99 come from a log-linear histogram (4 slots per power of two, so within
    12 % of the exact value); count, min, max and mean are exact. Message completion
    times are exact: each completion is an event.
  * a flow's loss timing (outage, recovery, loss windows: rxstats.loss_timing) is what
    loss_timing gives for the same packets, from the windows the responder closed when
    their lost positions left its 128-PSN window (bpf/nic/stats.h) and the positions
    still in it, finished here (loss_timing below). It keeps the first 62 windows of a
    QP and the latest one, so outage and recovery are exact and the list is marked
    truncated past 63 windows (the Python receivers keep 256). A packet arriving more
    than 128 PSNs late filled no window: its position stays lost, as in `lost`.
  * delivered bytes are binned when a frame arrived; a bin holding more than the
    receiving ports can carry in its time got its excess during the bins before it (a
    frame takes its length at line rate to arrive): the excess moves back, as Receiver
    spreads a frame over its arrival time.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from dataplane.nic import responder as nic
from dataplane.nic.responder import MsgEvent, log_slot_low
from dataplane.traffic.rxstats import MAX_WINDOWS, summary as exact_summary, timing_dict
from dataplane.wire.roce import PSN_MASK

# loss_timing's notes, in the order it finds them
NOTES = ((nic.LOSS_NO_STAMP, "a send timestamp is missing"),
         (nic.LOSS_BACKWARDS, "send clock went backwards"),
         (nic.LOSS_AT_START, "lost before the first packet received (start unknown)"),
         (nic.LOSS_FLAT, "send timestamps do not advance across a loss"))
END_NOTE = "lost until the end (no packet delivered after the loss)"


def _hist_quantile(hist: Mapping[int, int], q: float, lo: int, hi: int) -> float:
    """The q-quantile of a log-slot histogram: the middle of the slot it falls in,
    clamped to the exact [lo, hi]."""
    total = sum(hist.values())
    rank = min(total - 1, max(0, round(q * (total - 1))))
    seen = 0
    for slot in sorted(hist):
        seen += hist[slot]
        if seen > rank:
            mid = (log_slot_low(slot) + log_slot_low(slot + 1)) / 2 if slot >= 4 else slot
            return float(min(hi, max(lo, mid)))
    return float(hi)


def latency_summary(qp: Mapping) -> dict:
    """FlowStats.latency_summary's shape from a QP's latency histogram."""
    count = qp["packets"] - qp["lat_bad"]
    if count <= 0 or not qp["lat_hist"]:
        return {"count": 0}
    lo, hi = qp["lat_min"], qp["lat_max"]
    return {"count": count, "min": lo, "p50": _hist_quantile(qp["lat_hist"], 0.5, lo, hi),
            "p99": _hist_quantile(qp["lat_hist"], 0.99, lo, hi), "max": hi,
            "mean": qp["lat_sum"] / count}


def _window(t0: int, t1: int, lost: int) -> list[int]:
    """[start, end, lost] as loss_timing makes it (its very arithmetic)."""
    step = (t1 - t0) / (lost + 1)
    return [int(round(t0 + step)), t1, lost]


def loss_timing(loss: Mapping, tail: int) -> dict:
    """rxstats.loss_timing's answer for a QP from its loss state (responder.loss_dict):
    the positions still in the window go through the responder's own steps (stats.h
    nic_loss_slide), then `tail` positions lost after the highest one (the sender sent
    them, none arrived)."""
    flags, t0, run, closed = loss["flags"], loss["t0"], loss["run"], loss["windows"]
    first, latest = list(loss["first"]), loss["latest"]
    more: list[tuple[int, int, int]] = []         # closed here, after the responder's
    for ts in loss["window"]:
        if ts is None:
            run += 1
            continue
        if run:
            if not t0:
                flags |= nic.LOSS_AT_START
            else:
                flags |= nic.LOSS_FLAT if ts <= t0 else 0
                more.append((t0, ts, run))
            run = 0
        if ts:
            flags |= nic.LOSS_BACKWARDS if ts < t0 else 0
            t0 = ts
    if not closed and not more and not tail and not flags & nic.LOSS_AT_START:
        return {"outage_ns": 0, "recovery_ns": 0, "windows": [], "note": None}    # nothing lost
    note = next((n for bit, n in NOTES if flags & bit), END_NOTE if tail else None)
    if note is not None:
        return {"outage_ns": None, "recovery_ns": None, "windows": [], "note": note}
    # every window is known while the responder closed at most LOSS_LAST + 1 (the
    # latest one in its slot is then the last of them); past that, the first ones only
    complete = closed <= nic.LOSS_LAST + 1
    kept = first + ([latest] if latest is not None and complete else [])
    windows = [_window(*w) for w in (kept + more if complete else kept)]
    last = _window(*(more[-1] if more else latest)) if not complete else windows[-1]
    out = {"outage_ns": last[1] - windows[0][0], "recovery_ns": windows[0][1] - windows[0][0],
           "windows": windows[:MAX_WINDOWS], "note": None}
    if not complete or len(windows) > MAX_WINDOWS:
        out["truncated"] = True
    return out


def flow_record(qp: Mapping, completions_ns: list[int], sent: int | None) -> dict:
    """One flow's FlowStats.to_dict() (plus completions_us, as hostrun recv adds) from its
    QP and the completion times of its messages. `sent`: packets its sender sent (the
    missing tail counts as lost), None when unknown."""
    expected = ((qp["highest"] - qp["psn0"]) & PSN_MASK) + 1
    lost = max(0, qp["holes"] - qp["out_of_order"])
    tail = max(0, sent - expected) if sent is not None else 0
    lost += tail
    total = qp["packets"] + lost
    dur = (qp["last_ns"] - qp["first_ns"]) / 1e9
    return {
        "flow_id": qp["flow_id"], "src_ip": qp["saddr"], "dst_ip": qp["daddr"],
        "sport": qp["sport"], "dqpn": qp["dqpn"], "src_qp": qp["src_qp"],
        "packets": qp["packets"], "bytes": qp["bytes"], "payload_bytes": qp["payload_bytes"],
        "lost": lost, "loss_ratio": lost / total if total else 0.0,
        "duplicates": qp["duplicates"], "out_of_order": qp["out_of_order"],
        "reorder_hist": dict(sorted(qp["reorder_hist"].items())), "ce": qp["ce"],
        "rx_bps": qp["bytes"] * 8 / dur if dur > 0 else 0.0,
        "latency_ns": latency_summary(qp),
        "messages_completed": len(completions_ns), "messages_incomplete": qp["messages_open"],
        "completion_ns": exact_summary(completions_ns),
        "max_gap_us": qp["max_gap_ns"] / 1000,
        "first_rx_ns": qp["first_ns"], "last_rx_ns": qp["last_ns"],
        "last_send_ns": qp["last_send_ns"],
        **timing_dict(loss_timing(qp["loss"], tail)),
        "completions_us": [ns / 1000 for ns in completions_ns],
    }


def unseen_flow(flow_id: int, sent: int) -> dict:
    """A flow of which nothing arrived (Receiver.finish books it the same way)."""
    return {"flow_id": flow_id, "packets": 0, "bytes": 0, "payload_bytes": 0, "lost": sent,
            "loss_ratio": 1.0 if sent else 0.0, "duplicates": 0, "out_of_order": 0,
            "reorder_hist": {}, "ce": 0, "rx_bps": 0.0, "latency_ns": {"count": 0},
            "messages_completed": 0, "messages_incomplete": 0, "completion_ns": {"count": 0},
            "max_gap_us": 0.0, "first_rx_ns": 0, "last_rx_ns": 0, "last_send_ns": 0,
            "outage_us": None, "recovery_us": None, "loss_windows_ns": [],
            "timing_note": "no packet received" if sent else None, "completions_us": []}


def flow_records(qps: Iterable[Mapping], events: Iterable[MsgEvent],
                 sent: Mapping[int, int], *, closed_loop: bool = False) -> dict[str, dict]:
    """Every flow in `sent` (flow id -> packets sent) as hostrun recv's "flows"; in a
    closed-loop run with the responder's side as hostrun recv's transport_rx."""
    done: dict[int, list[MsgEvent]] = {}
    for e in events:
        done.setdefault(e.flow_id, []).append(e)
    by_flow = {q["flow_id"]: q for q in qps}
    out = {}
    for fid, n in sent.items():
        qp = by_flow.get(fid)
        mine = done.get(fid, [])
        out[str(fid)] = flow_record(qp, [e.msg_ns for e in mine], n) if qp else unseen_flow(fid, n)
        if closed_loop:
            out[str(fid)]["transport_rx"] = responder_side(qp, mine)
    return out


def responder_side(qp: Mapping | None, done: list[MsgEvent]) -> dict:
    """A QP's responder as transport.ResponderStats.to_dict() gives it: answers sent and
    [message bytes, completion ns] per message (the kernel keeps no reorder buffer: its
    kept packets are bits of the receive window, so buffered_max is not known)."""
    qp = qp or {}
    return {"acks": qp.get("acks", 0), "naks": qp.get("naks", 0), "cnps": qp.get("cnps", 0),
            "discarded": qp.get("discarded", 0), "buffered_max": None,
            "messages": [[e.msg_bytes, e.msg_ns] for e in done]}


def water_filled(bins: Mapping[int, int], capacity: float) -> dict[int, int]:
    """Bins (index -> bytes) where no bin holds more than `capacity` bytes: a bin's excess
    arrived during the bins before it, so it moves back (module doc). Capacity 0 or
    less: the bins as they are."""
    if capacity <= 0 or not bins:
        return dict(bins)
    out: dict[int, float] = {}
    carry = 0.0
    for b in range(max(bins), min(bins) - 1, -1):
        have = bins.get(b, 0) + carry
        out[b] = min(have, capacity)
        carry = have - out[b]
    b = min(bins) - 1
    while carry > 0:          # what arrived before the first bin: it still happened
        out[b] = min(carry, capacity)
        carry -= out[b]
        b -= 1
    return {b: round(n) for b, n in sorted(out.items()) if n}
