"""What the page shows each tick, from two port_load replies of the agent (pure).

The agent's port_load reply (dataplane.agent.protocol.LOAD_FIELDS) holds per switch port
only what the page draws; rates are computed as `railab top` does (dataplane.lab.ports):
counter deltas / time between the two reads, utilisation = tx rate / emulated port speed
(the topology's where the port has no model), a counter that went back counts from zero.
A link has two directions: down (its upper end `a` to `b`) and up. A direction's load is
read at the switch port that sends it (its tx), or, for a host's sending direction, at
the switch port that receives it (its rx): hosts have no counters of their own.

Which ports each link reads is worked out once per lab (`plan`), not every tick.
"""
from __future__ import annotations

from dataplane.agent.protocol import LOAD_FIELDS
from dataplane.lab.ports import PortRow, grown
from dataplane.topology.model import Endpoint

UP, DOWN, PAUSED = 0, 1, 2          # link states on the wire
(TX, RX, ECN, DROPS, SPEED, QUEUE, PAUSED_NS, PAUSING, PORT_UP) = (LOAD_FIELDS.index(f) for f in (
    "tx_bytes", "rx_bytes", "ecn_marked", "drops", "speed_bps", "queue_bytes", "paused_ns", "pausing", "up"))


def plan(links: list[dict]) -> list[tuple[str, str, str, str]]:
    """Per link (layout order) its ends as (a node, a port, b node, b port)."""
    ends = [(Endpoint.parse(link["a"]), Endpoint.parse(link["b"])) for link in links]
    return [(a.node, a.interface, b.node, b.interface) for a, b in ends]


def _ports(prev: dict, cur: dict, dt: float) -> tuple[dict, dict]:
    """One pass over every switch port of two replies: per switch {port: (tx b/s, rx b/s,
    speed, state)}, and per switch its queue, drop and ECN rates and totals and modes.
    A port the earlier reply lacked has no rate yet; PAUSED: the port keeps its
    neighbour paused (PFC) now, or did during the interval."""
    views: dict[str, dict] = {}
    switches: dict[str, dict] = {}
    none: dict = {}
    for name, sw in cur["switches"].items():
        before = prev["switches"].get(name, none).get("ports", none)
        view = views[name] = {}
        queue = drops = ecn = drops_grown = ecn_grown = 0
        for port, c in sw["ports"].items():
            queue += c[QUEUE]
            drops += c[DROPS]
            ecn += c[ECN]
            p = before.get(port)
            if p is None:
                tx = rx = 0.0
                paused = c[PAUSING]
            else:
                tx = grown(c[TX], p[TX]) * 8 / dt
                rx = grown(c[RX], p[RX]) * 8 / dt
                drops_grown += grown(c[DROPS], p[DROPS])
                ecn_grown += grown(c[ECN], p[ECN])
                paused = c[PAUSING] or grown(c[PAUSED_NS], p[PAUSED_NS]) > 0
            view[port] = (tx, rx, c[SPEED], DOWN if not c[PORT_UP] else PAUSED if paused else UP)
        switches[name] = {"queue_bytes": queue, "drops_per_s": round(drops_grown / dt, 1),
                          "ecn_per_s": round(ecn_grown / dt, 1), "drops": drops, "ecn": ecn,
                          "modes": list(sw.get("modes", []))}
    return views, switches


def _direction(sender, receiver) -> tuple[float, float]:
    """(b/s, port speed) of one link direction: at the sender's tx if it is a switch
    port, else at the receiver's rx (a host end has no view)."""
    if sender is not None:
        return sender[0], sender[2]
    if receiver is not None:
        return receiver[1], receiver[2]
    return 0, 0


def frame(ends: list[tuple[str, str, str, str]], prev: dict, cur: dict, *, stamp: float, dt: float,
          faults: dict | None = None) -> dict:
    """One update: per link (plan order) [down util, up util, down b/s, up b/s, state];
    per switch the queue, drop and ECN rates and totals and its groups' modes.

    prev, cur: two port_load replies (cur the later). A direction is read at its sender's
    tx if the sender is a switch port, else at its receiver's rx; a link is down when
    either switch end is down, else paused when either is."""
    dt = dt if dt > 0 else 1e-9
    views, switches = _ports(prev, cur, dt)
    none: dict = {}
    out_links = []
    for a_node, a_port, b_node, b_port in ends:
        va, vb = views.get(a_node, none).get(a_port), views.get(b_node, none).get(b_port)
        down_bps, down_speed = _direction(va, vb)
        up_bps, up_speed = _direction(vb, va)
        states = (va[3] if va is not None else UP, vb[3] if vb is not None else UP)
        state = DOWN if DOWN in states else PAUSED if PAUSED in states else UP
        out_links.append([round(down_bps / down_speed, 4) if down_speed else 0.0,
                          round(up_bps / up_speed, 4) if up_speed else 0.0,
                          round(down_bps), round(up_bps), state])
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
