"""What the page shows each tick, from two counter snapshots (pure).

Per-port rates come from `railab top`'s own computation (dataplane.cli.top.compute_rows:
counter deltas / time between polls, utilisation = tx rate / emulated port speed). A link
has two directions: down (its upper end `a` to `b`) and up. A direction's load is read at
the switch port that sends it (its tx), or, for a host's sending direction, at the switch
port that receives it (its rx): hosts have no counters of their own.
"""
from __future__ import annotations

from dataplane.cli.top import PortRow

UP, DOWN, PAUSED = 0, 1, 2          # link states on the wire


def _split(ref: str) -> tuple[str, str]:
    node, port = ref.split(":", 1)
    return node, port


def _direction(rows: dict, sender: str, receiver: str) -> tuple[float, float]:
    """(utilisation 0.., b/s) of the direction sender -> receiver."""
    row = rows.get(_split(sender))
    if row is not None:
        bps, speed = row.tx_bps, row.speed_bps or row.nominal_bps
    else:
        row = rows.get(_split(receiver))
        if row is None:
            return 0.0, 0.0
        bps, speed = row.rx_bps, row.speed_bps or row.nominal_bps
    return (bps / speed if speed else 0.0), bps


def _pausing(row, counters) -> bool:
    """PFC: the switch port keeps its neighbour paused now, or did during the interval."""
    if counters is not None and (counters.pfc or {}).get("pausing"):
        return True
    return bool(row is not None and row.paused)


def frame(links: list[dict], rows: list[PortRow], port_up: dict, snapshot, *, stamp: float,
          dt: float, faults: dict | None = None) -> dict:
    """One update: per link (layout order) [down util, up util, down b/s, up b/s, state];
    per switch the queue, drop and ECN rates and totals and its groups' modes.

    port_up: {switch: {port: bool}} as the agent's port_states reply; a link is down when
    either switch end is down. snapshot: the CounterSnapshot the rows were computed from."""
    by_port = {(r.switch, r.port): r for r in rows}
    counters = {(sw, p): c for sw, p, c in snapshot.ports()}
    out_links = []
    for link in links:
        down_u, down_bps = _direction(by_port, link["a"], link["b"])
        up_u, up_bps = _direction(by_port, link["b"], link["a"])
        state = UP
        for ref in (link["a"], link["b"]):
            node, port = _split(ref)
            if port_up.get(node, {}).get(port) is False:
                state = DOWN
            elif state == UP and _pausing(by_port.get((node, port)), counters.get((node, port))):
                state = PAUSED
        out_links.append([round(down_u, 4), round(up_u, 4), round(down_bps), round(up_bps), state])
    switches: dict[str, dict] = {}
    for r in rows:
        s = switches.setdefault(r.switch, {"queue_bytes": 0, "drops_per_s": 0.0, "ecn_per_s": 0.0,
                                           "drops": 0, "ecn": 0})
        s["queue_bytes"] += r.queue_bytes or 0
        s["drops_per_s"] += r.drops_per_s
        s["ecn_per_s"] += r.ecn_per_s
        s["drops"] += r.drops_total
        s["ecn"] += counters[(r.switch, r.port)].ecn_marked
    for name, sw in snapshot.switches.items():
        s = switches.setdefault(name, {"queue_bytes": 0, "drops_per_s": 0.0, "ecn_per_s": 0.0,
                                       "drops": 0, "ecn": 0})
        s["modes"] = sorted({g.mode for g in sw.groups.values()})
        s["drops_per_s"] = round(s["drops_per_s"], 1)
        s["ecn_per_s"] = round(s["ecn_per_s"], 1)
    return {"t": stamp, "dt": round(dt, 4), "links": out_links, "switches": switches,
            "faults": faults or {}}


def named(links: list[dict], update: dict) -> dict:
    """An update with its links by id, each direction's numbers named (the JSON endpoint's
    form; the WebSocket sends the compact lists in layout order)."""
    if "links" not in update:
        return update
    states = {UP: "up", DOWN: "down", PAUSED: "paused"}
    return {**update, "links": {
        link["id"]: {"down_util": v[0], "up_util": v[1], "down_bps": v[2], "up_bps": v[3], "state": states[v[4]]}
        for link, v in zip(links, update["links"])}}


def switch_detail(name: str, rows: list[PortRow], snapshot, lb_switch: dict | None = None) -> dict:
    """One switch for its panel: per port the rates, queue, drops and ECN; per group its
    mode, prefixes and members (and parameters, when `lb show`'s entry is given)."""
    sw = snapshot.switches[name]
    ports = {}
    for r in sorted((r for r in rows if r.switch == name), key=lambda r: r.port):
        c = sw.ports[r.port]
        ports[r.port] = {"peer": r.peer, "tx_bps": round(r.tx_bps), "rx_bps": round(r.rx_bps),
                         "util": None if r.util is None else round(r.util, 4),
                         "queue_bytes": r.queue_bytes, "drops": dict(c.drops),
                         "drops_per_s": round(r.drops_per_s, 1), "ecn_marked": c.ecn_marked,
                         "ecn_per_s": round(r.ecn_per_s, 1), "speed_bps": r.speed_bps,
                         "nominal_bps": r.nominal_bps,
                         **({"paused": c.paused} if hasattr(c, "paused") else {})}
    groups = {}
    for gid, g in sw.groups.items():
        shown = (lb_switch or {}).get("groups", {}).get(gid, {})
        groups[gid] = {"mode": g.mode, "prefixes": g.prefixes,
                       "members": [m.interface for m in g.members],
                       **{k: v for k, v in shown.items() if k not in ("mode", "prefixes", "members")}}
    return {"switch": name, "role": (lb_switch or {}).get("role"), "ports": ports, "groups": groups}
