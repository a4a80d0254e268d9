"""Fault runs: each flow's outage and recovery from send times, the hosts' delivery gaps,
and the data plane's reaction (fault -> mask write, notice -> upstream map write) from
the agent's event log (definitions in dataplane.report.metrics and fault_metrics)."""
from __future__ import annotations

from dataplane.report.rundata import duration, sum_of



def fault_starts(run: dict) -> list[int]:
    """CLOCK_MONOTONIC ns at which the run's faults began: events scheduled for the same
    time (several links cut at once) are one fault, starting with the first of them."""
    first: dict = {}
    for e in run.get("events") or []:
        if e.get("t_ns"):
            key = e.get("at", e["t_ns"])
            first[key] = min(first.get(key, e["t_ns"]), int(e["t_ns"]))
    return sorted(first.values())


def flow_outage(flow: dict, starts: list[int] | None = None) -> dict:
    """A flow's network-side figures (ms; None = unknown) and its host-side gap:
    {outage_ms, recovery_ms, host_gap_ms, note}. With fault event times (`starts`) its
    loss windows are split into episodes, one per fault (a window belongs to the last
    fault that began before it ended; fault_starts), and outage / recovery are the largest episode's
    (a link-down and its repair a second later are two outages, not one of a second).
    0 for a flow that lost nothing; None when lost packets have no usable timing."""
    gap = flow.get("max_gap_us")
    out = {"outage_ms": None, "recovery_ms": None,
           "host_gap_ms": float(gap) / 1000 if gap is not None else None, "note": flow.get("timing_note")}
    lost = int(flow.get("lost") or 0)
    if out["note"] is None and flow.get("outage_us") is None:
        if lost == 0 and int(flow.get("packets") or 0) > 0:
            out.update(outage_ms=0.0, recovery_ms=0.0)
        else:
            out["note"] = "no packet received" if not flow.get("packets") else "no send-time record"
        return out
    if out["note"] is not None:
        return out
    windows = flow.get("loss_windows_ns") or []
    if not starts or not windows or flow.get("loss_windows_truncated"):
        out.update(outage_ms=float(flow["outage_us"]) / 1000, recovery_ms=float(flow["recovery_us"]) / 1000)
        return out
    episodes: dict[int, list] = {}
    for start, end, _n in windows:
        k = sum(1 for t in starts if t <= end)      # 0: before the first event
        episodes.setdefault(k, []).append((start, end))
    out["outage_ms"] = max(ws[-1][1] - ws[0][0] for ws in episodes.values()) / 1e6
    out["recovery_ms"] = max(ws[0][1] - ws[0][0] for ws in episodes.values()) / 1e6
    return out


def _max_known(values: list) -> float | None:
    """The largest value; None (unknown) when any is unknown or there are none."""
    if not values or any(v is None for v in values):
        return None
    return max(values)


def dataplane_reaction(fired: list[dict], log: list[dict], until_ns: int | None = None) -> list[dict]:
    """Each fired fault event with the data plane's reaction, from the agent's event log
    (faults.events). An entry belongs to the last event fired before it that names its
    port ("switch:port" in the event's text: link faults name both ends), else to the
    last event fired before it (switch and plane faults; notices); entries after
    until_ns are left out.
      local:  per port_down/port_up: fault_to_mask_us = mask written (t_map_ns) - fault
              issued (t_ns, just before the carrier change); netlink_to_mask_us = mask
              written - netlink told the agent (None for a repair's port_up: the agent
              applies it at the repair's release, not on netlink).
      remote: per notice received (withdraw/restore): send_to_map_us = the upstream
              switch's map write - the reporter's send (matched on reporter and seq;
              t_tx_ns if the agent logged it, else t_ns).
    failover_us / notice_us = the largest of each (None when there was none)."""
    def when(e: dict) -> int:
        return max(int(e.get(k) or 0) for k in ("t_ns", "t_map_ns", "t_rx_ns"))

    def owner(e: dict) -> int | None:
        before = [i for i, ev in enumerate(fired) if ev.get("t_ns") and int(ev["t_ns"]) <= when(e)]
        port = f"{e.get('switch')}:{e.get('port')}"
        named = [i for i in before if port in str(fired[i].get("what", "")).split()]
        return (named or before or [None])[-1]

    sent = {(e.get("switch"), e.get("seq")): e for e in log if str(e.get("event", "")).endswith("_sent")}
    local: dict[int, list] = {}
    remote: dict[int, list] = {}
    for e in log:
        kind, i = e.get("event"), owner(e)
        if i is None or (until_ns is not None and when(e) >= until_ns):
            continue
        if kind in ("port_down", "port_up"):
            t_map, t_rx = int(e["t_map_ns"]), int(e.get("t_rx_ns") or 0)
            local.setdefault(i, []).append({
                "event": kind, "switch": e.get("switch"), "port": e.get("port"), "t_map_ns": t_map,
                "fault_to_mask_us": (t_map - int(fired[i]["t_ns"])) / 1000,
                "netlink_to_mask_us": (t_map - t_rx) / 1000 if 0 < t_rx < t_map else None})
        elif kind in ("withdraw_received", "restore_received"):
            tx = sent.get((e.get("from"), e.get("seq")))
            t_tx = int(tx.get("t_tx_ns") or tx.get("t_ns") or 0) if tx else 0
            remote.setdefault(i, []).append({
                "event": kind, "switch": e.get("switch"), "from": e.get("from"), "prefix": e.get("prefix"),
                "t_map_ns": int(e["t_map_ns"]),
                "send_to_map_us": (int(e["t_map_ns"]) - t_tx) / 1000 if t_tx else None,
                "rx_to_map_us": (int(e["t_map_ns"]) - int(e["t_rx_ns"])) / 1000})
    out = []
    for i, ev in enumerate(fired):
        if not ev.get("t_ns"):
            out.append(dict(ev))
            continue
        mine, notes = local.get(i, []), remote.get(i, [])
        fail = [x["fault_to_mask_us"] for x in mine if x["event"] == "port_down"] or \
            [x["fault_to_mask_us"] for x in mine]
        notice = [x["send_to_map_us"] for x in notes if x["send_to_map_us"] is not None]
        out.append({**ev, "local": mine, "remote": notes,
                    "failover_us": max(fail) if fail else None, "notice_us": max(notice) if notice else None})
    return out


def reaction_from_stamps(stamps: dict | None) -> dict | None:
    """One failure's reaction from the data plane's stamps ({switch: {dead_ns, notice_ns,
    excl_ns, avoid_ns}}, CLOCK_MONOTONIC ns, 0 = none; cleared just before the failure was
    made: bpf/railab_structs.h struct arn_stamps), measured the same way for both notice
    paths. The reporter is the switch whose packet first met a group with no live member;
    the upstreams are the other switches whose first packet steered by an avoid mask came
    at or after that (an earlier one was steered by something else). reaction_us = the
    first upstream's first avoiding packet - the reporter's first dead packet (the packet
    that met the dead group came from an upstream, whose next packet there avoids it; an
    upstream that sends there only later shows its own traffic's timing, not the reaction:
    slowest_us, per_upstream_us); notice_us = the reporter's first data-plane
    notice - its first dead packet (None on the agent path, whose notices the agent sends).
    None when no packet met a dead group or no upstream avoided it."""
    dead = {sw: s["dead_ns"] for sw, s in (stamps or {}).items() if s.get("dead_ns")}
    if not dead:
        return None
    reporter = min(dead, key=dead.get)
    t0 = dead[reporter]
    upstream = {sw: (s["avoid_ns"] - t0) / 1000 for sw, s in stamps.items()
                if sw != reporter and s.get("avoid_ns", 0) >= t0}
    if not upstream:
        return None
    notice = stamps[reporter].get("notice_ns") or 0
    return {"reporter": reporter, "reaction_us": min(upstream.values()), "slowest_us": max(upstream.values()),
            "per_upstream_us": upstream,
            "notice_us": (notice - t0) / 1000 if notice >= t0 else None}


def avoided_after_us(event: dict) -> float | None:
    """A failure event's time from its making (t_ns) to the first packet any switch steered
    by an avoid mask after it (its stamps' avoid_ns), us: measurable on both notice paths
    whether or not a packet met the dead group first (on the agent path none usually
    does: its WITHDRAW leaves on netlink before one comes). None when nothing avoided."""
    made = int(event.get("t_ns") or 0)
    avoided = [s["avoid_ns"] for s in (event.get("stamps") or {}).values() if made and s.get("avoid_ns", 0) >= made]
    return (min(avoided) - made) / 1000 if avoided else None


def fault_lateness_s(run: dict) -> tuple[float | None, bool]:
    """How late the run's faults were made, at worst: issue time (t_ns - t0_ns) minus the
    scheduled `at`, in seconds (a starved runner fires late; None when not recorded),
    and whether any was made after the senders had stopped (duration_s)."""
    t0 = run.get("t0_ns")
    made = [((int(e["t_ns"]) - int(t0)) / 1e9, float(e["at"])) for e in run.get("events") or []
            if t0 and e.get("t_ns") and e.get("at") is not None]
    if not made:
        return None, False
    return max(t - at for t, at in made), any(t >= duration(run) for t, _ in made)


def fault_metrics(run: dict) -> dict:
    """For runs with fault events (empty otherwise). Affected flows = those whose path
    crossed a failed element (on_failed_element; every flow for per-packet modes).

    Network side, from send times (flow_outage; None = unknown for some flow):
      ``outage_ms`` / ``recovery_ms`` = the largest of the affected flows;
      ``outage_elsewhere_ms`` = the largest outage of the other flows (0 expected).
    Host side (receive times, includes the hosts' scheduling):
      ``host_gap_on_failed_ms`` / ``host_gap_elsewhere_ms`` = the longest delivery gap
      of affected / other flows (the second is the run's baseline jitter).
    Data plane (the agent's log, dataplane_reaction over run["events"]):
      ``failover_ms`` = the largest fault -> mask write; ``notice_ms`` = the largest
      notice send -> upstream map write (None: no notices).
    Data plane (its own stamps, reaction_from_stamps over the events' "stamps"):
      ``reaction_ms`` = the largest (over the failures) first packet meeting the dead group
      -> the first upstream's first packet avoiding it, wall time; ``reaction_fabric_ms`` the same in real-fabric
      time (/ the lab's stretch; None when the run was not scaled).
    Plus ``flows_on_failed``, ``loss_on_failed``, ``loss_elsewhere`` and
    ``timing_unknown`` (flows whose network-side figures are unknown)."""
    flows = run.get("flows", [])
    if not run.get("events") or not any("on_failed_element" in f for f in flows):
        return {}
    starts = fault_starts(run)
    hit = [f for f in flows if f.get("on_failed_element")]
    rest = [f for f in flows if not f.get("on_failed_element")]
    hit_t = [flow_outage(f, starts) for f in hit]
    rest_t = [flow_outage(f, starts) for f in rest]
    events = run.get("events") or []
    fail = [e["failover_us"] for e in events if e.get("failover_us") is not None]
    notice = [e["notice_us"] for e in events if e.get("notice_us") is not None]
    reactions = [r["reaction_us"] for e in events if (r := reaction_from_stamps(e.get("stamps")))]
    stretch = (run.get("clock") or {}).get("stretch")
    reaction_ms = max(reactions) / 1000 if reactions else None
    gaps = lambda ts: max((t["host_gap_ms"] for t in ts if t["host_gap_ms"] is not None), default=None)  # noqa: E731
    return {
        "flows_on_failed": len(hit),
        "loss_on_failed": sum_of(hit, "lost"),
        "loss_elsewhere": sum_of(rest, "lost"),
        "outage_ms": _max_known([t["outage_ms"] for t in hit_t]),
        "recovery_ms": _max_known([t["recovery_ms"] for t in hit_t]),
        "outage_elsewhere_ms": _max_known([t["outage_ms"] for t in rest_t]),
        "host_gap_on_failed_ms": gaps(hit_t),
        "host_gap_elsewhere_ms": gaps(rest_t),
        "failover_ms": max(fail) / 1000 if fail else None,
        "notice_ms": max(notice) / 1000 if notice else None,
        "reaction_ms": reaction_ms,
        "reaction_fabric_ms": reaction_ms / stretch if reaction_ms is not None and stretch else None,
        "timing_unknown": sum(1 for t in hit_t + rest_t if t["outage_ms"] is None),
    }
