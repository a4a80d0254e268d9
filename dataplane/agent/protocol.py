"""The agent's protocol: what a client may ask and what the counters reply holds.

On the wire (the lab's Unix socket, dataplane.runtime.state.agent_socket): one JSON object
per line, {"op": NAME, FIELD: value, ...}, answered by one line {"ok": true, "result": ...}
or {"ok": false, "error": "Type: message"}. Every op is a dataclass below (its fields are
the request's fields, None = not given); `decode` turns a wire object into one and refuses
an unknown op or field before anything runs. The counters reply is read through
`CounterSnapshot`, the one place that knows its field names.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar


# ------------------------------------------------------------------ requests
@dataclass
class Request:
    op: ClassVar[str] = ""

    def to_wire(self) -> dict:
        """{"op": ..., fields that were given}."""
        fields = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return {"op": self.op, **fields}

    def fields(self) -> dict:
        """The given fields as keyword arguments of the programmer's or monitor's method."""
        return {k: v for k, v in self.to_wire().items() if k != "op"}


@dataclass
class Counters(Request):
    op: ClassVar[str] = "counters"
    switch: str | None = None


@dataclass
class Trace(Request):
    op: ClassVar[str] = "trace"
    flows: list = field(default_factory=list)      # dataplane.agent.pathtrace.FlowKey fields


@dataclass
class LbSet(Request):
    op: ClassVar[str] = "lb_set"
    switch: str | None = None
    role: str | None = None
    mode: str | None = None
    seed: int | str | None = None
    hash_fields: list | None = None
    flowlet_timeout_us: float | None = None
    busy_util: float | None = None
    busy_timeout_us: float | None = None
    weights: Any = None
    bandwidth: bool | None = None
    lbn: Any = None


@dataclass
class LbShow(Request):
    op: ClassVar[str] = "lb_show"


@dataclass
class LbRestore(Request):
    op: ClassVar[str] = "lb_restore"
    snapshot: dict = field(default_factory=dict)   # an lb_show reply


@dataclass
class PortModel(Request):
    op: ClassVar[str] = "port_model"
    scale: float | None = None
    buffer_bytes: int | None = None
    ecn_bytes: int | None = None
    window_us: float | None = None
    queue: str | None = None
    ecn_max_bytes: int | None = None
    ecn_pmax: float | None = None
    pfc: str | None = None              # "on" / "off"
    xoff_bytes: int | None = None
    xon_bytes: int | None = None
    headroom_bytes: int | None = None
    pfc_dscp: int | None = None
    pfc_priority: int | None = None
    pfc_quanta: int | None = None
    pfc_watchdog_us: float | None = None
    pfc_restore_us: float | None = None


@dataclass
class TmDel(Request):
    """A traffic-matrix entry of a switch: its 5-tuple."""
    op: ClassVar[str] = "tm_del"
    switch: str = ""
    src: str = ""
    dst: str = ""
    sport: int = 0
    dport: int = 0
    proto: str | int = "udp"


@dataclass
class TmAdd(TmDel):
    """The 5-tuple leaves the switch by interface `egress`, whatever the mode."""
    op: ClassVar[str] = "tm_add"
    egress: str = ""


@dataclass
class TmList(Request):
    op: ClassVar[str] = "tm_list"
    switch: str | None = None


@dataclass
class PortSpeed(Request):
    op: ClassVar[str] = "port_speed"
    switch: str = ""
    port: str = ""
    speed_bps: int | None = None       # None: back to the topology's speed


@dataclass
class SwitchReset(Request):
    op: ClassVar[str] = "switch_reset"
    switch: str = ""


@dataclass
class PortStates(Request):
    op: ClassVar[str] = "port_states"
    switch: str | None = None


@dataclass
class PortLoad(Request):
    """What a live view draws, per switch port: the few totals and states of LOAD_FIELDS
    and each switch's group modes: a small part of the counters reply, cheap to build and read."""
    op: ClassVar[str] = "port_load"
    switch: str | None = None


@dataclass
class ArnConfig(Request):
    op: ClassVar[str] = "arn_config"
    notify: bool | None = None
    arn: bool | None = None
    arn_util: float | None = None
    arn_queue_bytes: int | None = None
    hold_ms: float | None = None
    interval_ms: float | None = None
    poll_ms: float | None = None
    learn: bool | None = None
    granularity: str | None = None
    arn_path: str | None = None
    arn_capture: bool | None = None


@dataclass
class ArnStatus(Request):
    op: ClassVar[str] = "arn_status"


@dataclass
class Events(Request):
    op: ClassVar[str] = "events"
    since_ns: int = 0


@dataclass
class ReactionStamps(Request):
    """Each switch's reaction stamps (dataplane.xdp.tables.notices.reaction_stamps); clear:
    start them over after reading."""
    op: ClassVar[str] = "reaction_stamps"
    clear: bool | None = None


@dataclass
class HoldPorts(Request):
    op: ClassVar[str] = "hold_ports"
    ifindexes: list = field(default_factory=list)


@dataclass
class ReleasePorts(Request):
    op: ClassVar[str] = "release_ports"
    ifindexes: list = field(default_factory=list)


@dataclass
class Flows(Request):
    """The heaviest flows per egress port over a window (real-fabric microseconds)."""
    op: ClassVar[str] = "flows"
    switch: str | None = None
    window_us: float | None = None
    top: int | None = None


@dataclass
class NavStart(Request):
    op: ClassVar[str] = "nav_start"
    interval_us: float | None = None      # real-fabric time


@dataclass
class NavStop(Request):
    op: ClassVar[str] = "nav_stop"


@dataclass
class NavStatus(Request):
    op: ClassVar[str] = "nav_status"


@dataclass
class NavAnnounce(Request):
    """Flows hosts are about to send: [{src, dst, sport, dport, proto, bytes, start, rate_bps}]."""
    op: ClassVar[str] = "nav_announce"
    flows: list = field(default_factory=list)


REQUESTS: dict[str, type[Request]] = {cls.op: cls for cls in (
    Counters, Trace, LbSet, LbShow, LbRestore, PortModel, TmAdd, TmDel, TmList, PortSpeed,
    SwitchReset, PortStates, PortLoad, ArnConfig, ArnStatus, Events, ReactionStamps, HoldPorts, ReleasePorts,
    Flows, NavStart, NavStop, NavStatus, NavAnnounce)}


def decode(obj: dict) -> Request:
    """The request a wire object asks for; ValueError for an unknown op or field."""
    op = obj.get("op")
    cls = REQUESTS.get(op)
    if cls is None:
        raise ValueError(f"unknown op {op!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    fields = {k: v for k, v in obj.items() if k != "op"}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"{op}: unknown field {', '.join(unknown)}; known: {', '.join(sorted(known)) or 'none'}")
    return cls(**fields)


def request(op: str, **fields) -> Request:
    """The request for op with these fields (None = not given)."""
    return decode({"op": op, **{k: v for k, v in fields.items() if v is not None}})


# ------------------------------------------------------------------ the port_load reply
# One list per port, in this order (the reply names them in its "fields"):
#   tx_bytes, rx_bytes, ecn_marked: totals since deploy, as the counters reply's
#   drops:       every drop reason of the port summed (the counters reply's "drops" values)
#   speed_bps:   what utilisation is measured against: the emulated speed, or the
#                topology's where the port has no model
#   queue_bytes: bytes waiting now: a real queue's shaper backlog, a modelled port's
#                virtual backlog, 0 without a model (as `railab top` reads them)
#   paused_ns:   PFC: wall ns this port has kept its neighbour paused, in total (0: PFC off)
#   pausing:     1 while it keeps it paused now
#   up:          1 unless the port is down (a fault)
LOAD_FIELDS = ("tx_bytes", "rx_bytes", "ecn_marked", "drops", "speed_bps", "queue_bytes", "paused_ns",
               "pausing", "up")


def load_row(c: "PortCounters", up: bool) -> list:
    """A port's port_load list from its counters-reply entry (what the agent sends, in the
    reply's terms: a test holds the two replies to it)."""
    modelled = bool(c.speed_bps)
    queue = int(c.shaper.get("backlog_bytes", 0)) if c.shaper is not None else c.queue_bytes if modelled else 0
    return [c.tx_bytes, c.rx_bytes, c.ecn_marked, sum(c.drops.values()), c.speed_bps or c.nominal_speed_bps,
            queue, (c.pfc or {}).get("paused_ns", 0), int(bool((c.pfc or {}).get("pausing"))), int(bool(up))]


# ------------------------------------------------------------------ the counters reply
PORT_TOTALS = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "ecn_marked")
PFC_TOTALS = ("pause_frames_sent", "xon_sent", "paused_ns", "paused_real_ns", "pause_frames_received",
              "holds", "held_ns", "held_real_ns", "headroom_drops")


@dataclass
class PortCounters:
    """One switch port: totals since deploy, its emulated queue now, its speeds."""
    rx_packets: int = 0
    rx_bytes: int = 0
    tx_packets: int = 0
    tx_bytes: int = 0
    ecn_marked: int = 0
    drops: dict[str, int] = field(default_factory=dict)      # reason -> packets
    queue_bytes: int = 0            # virtual backlog now
    utilization: float = 0.0        # port model's moving average, 0..1
    speed_bps: int = 0              # emulated (nominal x the port model's scale); 0 = no model
    nominal_speed_bps: int = 0      # the topology's
    shaper: dict | None = None      # real queue: the port's qdisc now (backlog_bytes, drops, ...)
    pfc: dict = field(default_factory=dict)   # PFC on: the lossless priority's pauses (see
                                              # SwitchProgrammer.pfc_counters); {} while off

    @property
    def waiting_bytes(self) -> int:
        """Bytes waiting in the port now: the virtual backlog or, for a real queue, what
        sits in its shaper, whichever is more."""
        return max(int(self.queue_bytes or 0), int((self.shaper or {}).get("backlog_bytes", 0)))

    def minus(self, before: "PortCounters") -> "PortCounters":
        """Totals since `before`; the state now (queue, speeds) as it is."""
        reasons = set(self.drops) | set(before.drops)
        pfc = {k: (v - before.pfc.get(k, 0) if k in PFC_TOTALS else v) for k, v in self.pfc.items()}
        return dataclasses.replace(
            self, **{f: getattr(self, f) - getattr(before, f) for f in PORT_TOTALS},
            drops={r: self.drops.get(r, 0) - before.drops.get(r, 0) for r in reasons}, pfc=pfc)

    def to_wire(self) -> dict:
        out = dataclasses.asdict(self)
        if self.shaper is None:
            out.pop("shaper")
        return out


@dataclass
class MemberCounters:
    interface: str
    ifindex: int
    packets: int
    bytes: int


@dataclass
class GroupCounters:
    mode: str
    prefixes: list[str]
    members: list[MemberCounters]


@dataclass
class SwitchCounters:
    ports: dict[str, PortCounters]
    groups: dict[str, GroupCounters]

    def member_packets(self) -> int:
        """Packets the switch's next-hop groups sent, over all members: what it forwarded
        by route (the data plane's own count, whatever the kernel's link counters say)."""
        return sum(m.packets for g in self.groups.values() for m in g.members)


@dataclass
class CounterSnapshot:
    """The counters reply: per switch its ports and groups; lab-wide, every XDP verdict
    and the drops by reason (which include frames no port owns: unknown_port)."""
    switches: dict[str, SwitchCounters]
    verdicts: dict[str, dict] = field(default_factory=dict)   # verdict -> {packets, bytes}
    drops: dict[str, int] = field(default_factory=dict)       # reason -> packets
    t_ns: int | None = None         # when the agent read them (monotonic ns), if it said
    clock: dict | None = None       # the lab's clock: scale, stretch (wall s per real s)

    @classmethod
    def from_wire(cls, data: dict) -> "CounterSnapshot":
        switches = {}
        for name, sw in data["switches"].items():
            ports = {p: PortCounters(**c) for p, c in sw["ports"].items()}
            groups = {gid: GroupCounters(g["mode"], list(g["prefixes"]),
                                         [MemberCounters(**m) for m in g["members"]])
                      for gid, g in sw["groups"].items()}
            switches[name] = SwitchCounters(ports, groups)
        return cls(switches, dict(data.get("verdicts", {})), dict(data.get("drops", {})), data.get("t_ns"),
                   data.get("clock"))

    def to_wire(self) -> dict:
        out = {"switches": {name: {"ports": {p: c.to_wire() for p, c in sw.ports.items()},
                                   "groups": {gid: dataclasses.asdict(g) for gid, g in sw.groups.items()}}
                            for name, sw in self.switches.items()},
               "verdicts": self.verdicts, "drops": self.drops}
        if self.t_ns is not None:
            out["t_ns"] = self.t_ns
        if self.clock is not None:
            out["clock"] = self.clock
        return out

    def port(self, switch: str, port: str) -> PortCounters | None:
        sw = self.switches.get(switch)
        return sw.ports.get(port) if sw else None

    def ports(self):
        """(switch, port, counters) of every port."""
        for name, sw in self.switches.items():
            for port, c in sw.ports.items():
                yield name, port, c

    def minus(self, before: "CounterSnapshot") -> "CounterSnapshot":
        """Port totals and lab-wide drops since `before` (ports `before` lacks count from 0)."""
        switches = {}
        for name, sw in self.switches.items():
            old = before.switches.get(name)
            ports = {p: c.minus(old.ports[p] if old and p in old.ports else PortCounters())
                     for p, c in sw.ports.items()}
            switches[name] = SwitchCounters(ports, sw.groups)
        drops = {r: n - before.drops.get(r, 0) for r, n in self.drops.items()}
        verdicts = {v: {k: n - before.verdicts.get(v, {}).get(k, 0) for k, n in c.items()}
                    for v, c in self.verdicts.items()}
        return CounterSnapshot(switches, verdicts, drops, self.t_ns, self.clock)

    def waiting_bytes(self) -> int:
        """Bytes waiting in the fabric's emulated ports now."""
        return sum(c.waiting_bytes for _, _, c in self.ports())
