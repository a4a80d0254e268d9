"""The fabric monitor's notices (dataplane.agent.monitor's docstring: why and when): the
40-byte UDP format, sending a notice to the switches that route through the sender, and
on receipt the exclusions (route avoid masks), their expiry, and the flows a
flow-granular notice moves (traffic-matrix entries).

Packet format (UDP payload, network byte order, 40 bytes), destination port 4792:

    0  magic     4s   b"RARN"
    4  version   u8   1
    5  type      u8   1 = WITHDRAW (avoid me for prefix), 2 = RESTORE (use me again)
    6  reason    u8   1 = LINK_DOWN, 2 = UTILISATION, 3 = QUEUE_DEPTH, 4 = LINK_UP/CLEARED
    7  flags     u8   0
    8  seq       u32  per reporting switch, +1 per message
    12 reporter  u32  switch id of the reporting switch (S)
    16 nexthop   u32  switch id of the affected next hop (the leaf X behind the port), 0 = n/a
    20 prefix    4s   IPv4 destination prefix affected (network address)
    24 plen      u8   its length
    25 pad       3x
    28 hold_ms   u32  how long the receiver keeps the exclusion without a refresh (0 = until
                      RESTORE)
    32 metric    u32  utilisation x 1024 (UTILISATION) or queue bytes (QUEUE_DEPTH), else 0
    36 port      u32  ifindex of S's affected egress port, 0 = n/a

With flags & F_FLOWS (congestion notices at --granularity flow) the header is followed by
the flows S caught on that port, 16 bytes each: src 4s, dst 4s, sport u16, dport u16,
proto u8, 3 pad. The heaviest flows of the port over the flow window (dataplane/agent/
flows.py), heaviest first, until what is left is below the limit (at most FLOWS_PER_NOTICE).
A receiver that is the source leaf of a named flow moves only that flow: a dynamic
traffic-matrix entry (as nav installs them) sending it out of its least-loaded live uplink
not towards S; every other flow keeps its path. The entry expires after hold_ms without a
refresh, like a prefix exclusion.
"""
from __future__ import annotations

import collections
import dataclasses
import ipaddress
import logging
import socket
import struct
import time

from dataplane.agent import arnpath

log = logging.getLogger("railab.arn")

ARN_PORT = 4792
MAGIC = b"RARN"
VERSION = 1
FMT = "!4sBBBBIII4sB3xIII"
SIZE = struct.calcsize(FMT)          # 40
T_WITHDRAW, T_RESTORE = 1, 2
R_LINK_DOWN, R_UTIL, R_QUEUE, R_CLEARED = 1, 2, 3, 4
TYPES = {T_WITHDRAW: "withdraw", T_RESTORE: "restore"}
F_FLOWS = 0x1                        # flags: a flow list follows the header
FLOW_FMT = "!4s4sHHB3x"
FLOW_SIZE = struct.calcsize(FLOW_FMT)   # 16
FLOWS_PER_NOTICE = 8
GRANULARITIES = ("prefix", "flow")     # what a congestion notice names: the prefix or its flows
REASONS = {R_LINK_DOWN: "link_down", R_UTIL: "utilisation", R_QUEUE: "queue_depth", R_CLEARED: "cleared"}


@dataclasses.dataclass
class Notice:
    type: int
    reason: int
    seq: int
    reporter: int
    nexthop: int
    prefix: str                      # "a.b.c.d/len"
    hold_ms: int = 0
    metric: int = 0
    port: int = 0
    flows: list = dataclasses.field(default_factory=list)   # (src, dst, sport, dport, proto)

    def pack(self) -> bytes:
        net = ipaddress.IPv4Network(self.prefix, strict=False)
        head = struct.pack(FMT, MAGIC, VERSION, self.type, self.reason, F_FLOWS if self.flows else 0,
                           self.seq & 0xFFFFFFFF, self.reporter, self.nexthop, net.network_address.packed,
                           net.prefixlen, int(self.hold_ms), int(self.metric) & 0xFFFFFFFF, self.port)
        return head + b"".join(struct.pack(FLOW_FMT, socket.inet_aton(src), socket.inet_aton(dst),
                                           sport, dport, proto)
                               for src, dst, sport, dport, proto in self.flows)

    @classmethod
    def unpack(cls, data: bytes) -> "Notice":
        if len(data) < SIZE:
            raise ValueError(f"ARN message too short ({len(data)} < {SIZE})")
        (magic, version, typ, reason, flags, seq, reporter, nexthop, prefix, plen,
         hold, metric, port) = struct.unpack(FMT, data[:SIZE])
        if magic != MAGIC or version != VERSION:
            raise ValueError("not a railab ARN message")
        net = ipaddress.IPv4Network((socket.inet_ntoa(prefix), plen), strict=False)
        flows = []
        if flags & F_FLOWS:
            for off in range(SIZE, len(data) - FLOW_SIZE + 1, FLOW_SIZE):
                src, dst, sport, dport, proto = struct.unpack_from(FLOW_FMT, data, off)
                flows.append((socket.inet_ntoa(src), socket.inet_ntoa(dst), sport, dport, proto))
        return cls(typ, reason, seq, reporter, nexthop, str(net), hold, metric, port, flows)

    def describe(self) -> dict:
        return {"type": TYPES.get(self.type, self.type), "reason": REASONS.get(self.reason, self.reason),
                "seq": self.seq, "reporter": self.reporter, "nexthop": self.nexthop,
                "prefix": self.prefix, "hold_ms": self.hold_ms, "metric": self.metric, "port": self.port,
                "flows": [list(f) for f in self.flows]}


class Notices:
    """Sends and receives the notices of every switch, over the monitor's shared state
    (its exclusion table, flow moves, counters, events and lock)."""

    def __init__(self, monitor):
        self.m = monitor

    def _nexthop_id(self, node, gid) -> int:
        members = self.m.p.routing.members_of(gid)
        if not members:
            return 0
        far = self.m.spec.find_node(node.interface(members[0]).peer_node)
        return far.switch_id if far is not None and far.switch_id else 0

    def upstream(self, node, prefix: str, live_only: bool = True,
                 every_link: bool = False) -> list[tuple[object, object]]:
        """(neighbour switch, local interface of S towards it) for every neighbour whose
        route for prefix uses S as a next hop -- the one answer to "who routes through
        me"; with live_only, the interface is a live link to it; with every_link, each of
        the parallel links to such a neighbour, not only the first."""
        out = []
        seen = set()
        for iface in node.interfaces:
            nbr = self.m.spec.find_node(iface.peer_node)
            if nbr is None or nbr.role == "host" or (nbr.name in seen and not every_link):
                continue
            if live_only and not self.m.dp.port_is_up(iface.ifindex):
                continue
            for route in self.m.spec.routes.get(nbr.name, []):
                if route.prefix == prefix and any(
                        nbr.interface(h).peer_node == node.name for h in route.nexthops):
                    seen.add(nbr.name)
                    out.append((nbr, iface))
                    break
        return out

    def send_upstream(self, node, prefix, typ, reason, gid=None, *, hold_ms=0, metric=0, port=0,
                       flows=None, every_link: bool = False, upstream_of: str | None = None) -> int:
        """The notice to every switch routing prefix through node (upstream_of: the
        switches routing that prefix instead, for a more specific prefix no configured
        route names)."""
        sent = 0
        sock = self.m.udp.get(node.name)
        for nbr, iface in self.upstream(node, upstream_of or prefix, every_link=every_link):
            peer = nbr.interface(iface.peer_if)
            if not peer.address:
                continue
            self.m.seq[node.name] += 1
            msg = Notice(typ, reason, self.m.seq[node.name], node.switch_id,
                         self._nexthop_id(node, gid) if gid else 0, prefix, hold_ms, metric, port,
                         flows or [])
            t_tx = time.monotonic_ns()       # the notice's send time (reaction timing)
            try:
                sock.sendto(msg.pack(), (peer.address.split("/")[0], ARN_PORT))
            except OSError as err:
                self.m.counters[node.name]["send_errors"] += 1
                log.warning("ARN from %s to %s: %s", node.name, nbr.name, err)
                continue
            sent += 1
            kind = "arn" if reason in (R_UTIL, R_QUEUE) else "notify"
            self.m.counters[node.name][f"{kind}_sent"] += 1
            self.m.events.append({"event": f"{TYPES[typ]}_sent", "switch": node.name, "to": nbr.name,
                                "t_tx_ns": t_tx, "t_ns": time.monotonic_ns(), **msg.describe()})
        return sent

    def on_udp(self, node, sock) -> None:
        while True:
            try:
                data, addr = sock.recvfrom(2048)
            except BlockingIOError:
                return
            t_rx = time.monotonic_ns()
            if arnpath.consumed_below(self.m.cfg, data):   # the data plane acted on it already
                self.m.counters[node.name]["dataplane_seen"] += 1
                continue
            try:
                msg = Notice.unpack(data)
            except ValueError:
                self.m.counters[node.name]["bad_received"] += 1
                continue
            self.handle_notice(node, msg, t_rx, addr[0])

    def handle_notice(self, node, msg: Notice, t_rx: int, src: str = "") -> None:
        kind = "arn" if msg.reason in (R_UTIL, R_QUEUE) else "notify"
        if msg.type == T_RESTORE:
            kind = "restore"
        self.m.counters[node.name][f"{kind}_received"] += 1
        reporter = self.m.spec.find_switch(msg.reporter)
        with self.m.lock:
            key = (node.name, msg.prefix)
            if reporter is not None and msg.flows and msg.type == T_WITHDRAW:
                # flow granularity: TM entries only, the prefix's route stays as it is
                self._move_flows(node, reporter, msg, t_rx)
                self.m.events.append({"event": "flows_received", "switch": node.name,
                                    "from": reporter.name, "src": src, "t_rx_ns": t_rx,
                                    "t_map_ns": time.monotonic_ns(), **msg.describe()})
                return
            if reporter is None or not self._ensure_route(node, msg.prefix):
                self.m.counters[node.name]["ignored"] += 1
                return
            table = self.m.excl.setdefault(key, {})
            if msg.type == T_WITHDRAW:
                table[msg.reporter] = t_rx + msg.hold_ms * 1_000_000 if msg.hold_ms else 0
            else:
                table.pop(msg.reporter, None)
            self.apply_excl(node, msg.prefix)
            self.m.events.append({"event": f"{TYPES.get(msg.type)}_received", "switch": node.name,
                                "from": reporter.name, "src": src, "t_rx_ns": t_rx,
                                "t_map_ns": time.monotonic_ns(), **msg.describe()})

    def _move_flows(self, node, reporter, msg: Notice, t_rx: int) -> None:
        """Flow-granular ARN at a receiving leaf: each named flow this leaf's hosts send
        leaves by the least-loaded live uplink of its route not towards the reporter."""
        expires = t_rx + msg.hold_ms * 1_000_000 if msg.hold_ms else 0
        for five in msg.flows:
            src, dst = five[0], five[1]
            src_gid = self.m.dp.lookup_route(node.switch_id, src)
            if src_gid is None or not all(
                    self.m.spec.find_node(self.m.spec.port(ifx)[1].peer_node).role == "host"
                    for ifx in self.m.dp.group_info(src_gid)["members"]):
                continue                     # not a flow of this leaf's hosts
            key = (node.name, tuple(five))
            held = self.m.flow_moves.get(key)
            if held is not None:             # already moved: refresh the hold only
                held["expires_ns"] = expires
                continue
            gid = self.m.dp.lookup_route(node.switch_id, dst)
            if gid is None:
                continue
            choices = [ifx for ifx in self.m.dp.group_info(gid)["members"]
                       if self.m.dp.port_is_up(ifx) and self.m.spec.port(ifx)[1].peer_node != reporter.name]
            if not choices:
                continue                     # nowhere else to go: the flow stays
            moved_on = collections.Counter(m["ifindex"] for (sw, _), m in self.m.flow_moves.items()
                                           if sw == node.name)
            best = min(choices, key=lambda ifx: (self.m.dp.port_queue_state(ifx)["utilization"],
                                                 moved_on[ifx], ifx))
            iface = self.m.spec.port(best)[1]
            self.m.p.tm_add(node.name, egress=iface.name, src=src, dst=dst, sport=five[2],
                          dport=five[3], proto=five[4])
            self.m.flow_moves[key] = {"ifindex": best, "egress": iface.name, "reporter": reporter.name,
                                    "expires_ns": expires}
            self.m.counters[node.name]["flows_moved"] += 1

    def unmove_flow(self, key: tuple[str, tuple]) -> None:
        src, dst, sport, dport, proto = key[1]
        self.m.flow_moves.pop(key, None)
        self.m.p.tm_del(key[0], src=src, dst=dst, sport=sport, dport=dport, proto=proto)

    def drop_flow_moves(self) -> None:
        with self.m.lock:
            for key in list(self.m.flow_moves):
                self.unmove_flow(key)

    def _ensure_route(self, node, prefix: str) -> bool:
        if prefix in self.m.dp.routes(node.switch_id):
            return True
        gid = self.m.dp.lookup_route(node.switch_id, prefix.split("/")[0])
        if gid is None:
            return False
        self.m.dp.add_route(node.switch_id, prefix, gid)   # more specific copy, just for the mask
        self.m.dyn_routes.add((node.name, prefix))
        return True

    def apply_excl(self, node, prefix) -> None:
        key = (node.name, prefix)
        reporters = {self.m.spec.switch_by_id(r).name for r in self.m.excl.get(key, {}) if self.m.spec.find_switch(r)}
        net = ipaddress.IPv4Network(prefix)
        # the prefix's route and every more specific one (learned /32 host routes)
        for rprefix, gid in self.m.dp.routes(node.switch_id).items():
            rnet = ipaddress.IPv4Network(rprefix)
            if not rnet.subnet_of(net):
                continue
            covering = {r for (sw, p), t in self.m.excl.items() if sw == node.name and t
                        and rnet.subnet_of(ipaddress.IPv4Network(p))
                        for r in t if self.m.spec.find_switch(r)}
            names = {self.m.spec.switch_by_id(r).name for r in covering}
            mask = 0
            for i, ifx in enumerate(self.m.dp.group_info(gid)["members"][:64]):
                if self.m.spec.port(ifx)[1].peer_node in names:
                    mask |= 1 << i
            self.m.dp.set_route_avoid(node.switch_id, rprefix, mask)
        if not reporters:
            self.m.excl.pop(key, None)
            if key in self.m.dyn_routes:
                self.m.dyn_routes.discard(key)
                self.m.dp.del_route(node.switch_id, prefix)

    def expire(self, now: int) -> None:
        with self.m.lock:     # the server's threads change the table (clear_switch, notices)
            due = [(k, r) for k, t in self.m.excl.items() for r, exp in t.items() if exp and exp <= now]
            for (sw, prefix), reporter in due:
                table = self.m.excl.get((sw, prefix))
                if table is None or table.get(reporter, 0) == 0 or table[reporter] > now:
                    continue
                del table[reporter]
                self.m.counters[sw]["expired"] += 1
                self.m.events.append({"event": "exclusion_expired", "switch": sw, "prefix": prefix,
                                    "reporter": reporter, "t_ns": now})
                self.apply_excl(self.m.spec.node(sw), prefix)
            for key, move in list(self.m.flow_moves.items()):
                if move["expires_ns"] and move["expires_ns"] <= now:
                    self.unmove_flow(key)
                    self.m.counters[key[0]]["flows_expired"] += 1
                    self.m.events.append({"event": "flow_move_expired", "switch": key[0],
                                        "flow": list(key[1]), "t_ns": now})
