"""Port rates of a running lab's switches from two counter polls (pure but for `poll`), as
`railab top` and `railab ui` show them.

Rates come from counter deltas between two polls divided by the time between them:
  tx/rx rate  = delta tx_bytes/rx_bytes x 8 / dt (b/s)
  util        = tx rate / emulated port speed (None when the port has no port model)
  model util  = the port model's own `utilization` (EWMA over its window), when present
  queue       = bytes waiting at the port now: in a real queue, its shaper's backlog;
                otherwise the port model's virtual backlog `queue_bytes`
  drops/s     = delta of the sum of all drop reasons / dt; ECN/s likewise for ecn_marked
A counter smaller than at the previous poll (agent restarted) counts from zero (`grown`).
Rows are sorted busiest first: by max(util, model util), then tx rate, then drops.

`port_directory` and `compute_rows` take the agent's typed CounterSnapshot, so they are
tested with synthetic snapshots in the agent's own field names; `poll` asks the agent.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from dataplane.agent import client
from dataplane.agent.protocol import CounterSnapshot
from dataplane.topology.model import TIER


@dataclass
class PortRow:
    switch: str
    port: str
    peer: str = ""
    direction: str = ""          # "up" (towards a higher tier), "down", "" unknown
    tx_bps: float = 0.0
    rx_bps: float = 0.0
    util: float | None = None    # tx rate / emulated speed
    model_util: float | None = None
    queue_bytes: int | None = None
    drops_per_s: float = 0.0
    drops_total: int = 0
    drops_delta: dict = field(default_factory=dict)   # reason -> drops since last poll
    ecn_per_s: float = 0.0
    speed_bps: float | None = None    # emulated
    nominal_bps: float | None = None
    paused: float | None = None       # PFC: share of the interval this port kept its neighbour
                                      # paused (None: PFC off)
    pauses_received: int = 0          # PFC frames its neighbour sent it, since the last poll

    @property
    def busy(self) -> float:
        return max(self.util or 0.0, self.model_util or 0.0)


def port_directory(spec) -> dict[tuple[str, str], dict]:
    """(switch, port) -> {peer, direction, nominal_bps} from the lab's LabSpec."""
    if spec is None:
        return {}
    roles = {n.name: n.role for n in spec.nodes}
    out = {}
    for node in spec.nodes:
        if node.role == "host":
            continue
        for iface in node.interfaces:
            mine, theirs = TIER.get(node.role), TIER.get(roles.get(iface.peer_node, ""))
            direction = "" if mine is None or theirs is None else ("up" if theirs > mine else "down")
            out[(node.name, iface.name)] = {"peer": iface.peer, "direction": direction,
                                            "nominal_bps": iface.speed_bps}
    return out


def grown(now: int, before: int) -> int:
    """What a counter grew by; a counter that went back (agent restarted) counts from 0."""
    return now - before if now >= before else now


def compute_rows(prev: CounterSnapshot | None, cur: CounterSnapshot, dt: float,
                 spec=None) -> list[PortRow]:
    """Rows for every switch port of `cur`, rates against `prev` (an earlier snapshot, None
    for none: rates 0), busiest first."""
    directory = port_directory(spec)
    dt = dt if dt > 0 else 1e-9
    rows = []
    for switch, port, c in cur.ports():
        p = prev.port(switch, port) if prev is not None else None
        info = directory.get((switch, port), {})
        modelled = bool(c.speed_bps)        # 0: the port model is off for this port
        if p is None:
            tx = rx = 0.0
            drops_delta: dict = {}
            ecn = 0
        else:
            tx = grown(c.tx_bytes, p.tx_bytes) * 8 / dt
            rx = grown(c.rx_bytes, p.rx_bytes) * 8 / dt
            if c.drops == p.drops:          # the common case, compared in C: no drop since
                drops_delta = {}
            else:
                drops_delta = {r: grown(n, p.drops.get(r, 0)) for r, n in c.drops.items()}
                drops_delta = {r: n for r, n in drops_delta.items() if n}
            ecn = grown(c.ecn_marked, p.ecn_marked)
        paused = None
        if c.pfc:
            before = p.pfc.get("paused_ns", 0) if p is not None else c.pfc.get("paused_ns", 0)
            paused = min(1.0, grown(c.pfc.get("paused_ns", 0), before) / 1e9 / dt)
        rows.append(PortRow(
            switch=switch, port=port, peer=info.get("peer", ""),
            direction=info.get("direction", ""), tx_bps=tx, rx_bps=rx,
            util=tx / c.speed_bps if modelled else None,
            model_util=float(c.utilization) if modelled else None,
            queue_bytes=(int(c.shaper.get("backlog_bytes", 0)) if c.shaper is not None
                         else c.queue_bytes if modelled else None),
            drops_per_s=sum(drops_delta.values()) / dt,
            drops_total=sum(c.drops.values()),
            drops_delta=drops_delta, ecn_per_s=ecn / dt,
            speed_bps=c.speed_bps or None,
            nominal_bps=c.nominal_speed_bps or info.get("nominal_bps"),
            paused=paused,
            pauses_received=grown(c.pfc.get("pause_frames_received", 0),
                                   p.pfc.get("pause_frames_received", 0)) if c.pfc and p is not None else 0,
        ))
    rows.sort(key=lambda r: (-r.busy, -r.tx_bps, -r.drops_per_s, r.switch, r.port))
    return rows


def poll(lab: str, switch: str | None = None) -> tuple[CounterSnapshot, float]:
    before = time.monotonic()
    counters = client.counters(lab, switch)
    return counters, (before + time.monotonic()) / 2
