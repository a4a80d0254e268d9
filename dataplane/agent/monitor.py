"""Fault reaction in the lab agent: local fast failover, FGLB remote-failure notices,
adaptive routing notifications (ARN) and ARP-to-host-route learning.

Local fast failover
    One raw NETLINK_ROUTE socket per switch namespace, bound to RTMGRP_LINK, all in one
    selector loop (thread). A port is usable while IFF_UP and IFF_LOWER_UP (carrier) are
    both set; a change calls SwitchDataplane.set_port_state(), which rewrites the
    down_mask of every group using the port (no controller, no route recomputation).

Notifications (FGLB link down, ARN congestion): real UDP packets on the fabric
    When switch S has no live member left for a prefix P (all its links towards the
    leaf owning P are down), or when S's egress port towards P is congested (port model:
    utilisation >= arn_util or queue >= arn_queue_bytes; off by default), S tells every
    neighbour N whose route for P has S as a next hop. The message is a UDP datagram sent
    by S's own kernel stack (a socket opened in S's namespace) from S's port address to
    N's address on a live link between them, port ARN_PORT, so it is on the wire and a
    capture on that link shows it. N's XDP program passes it up (destination is N's own
    address: local_addrs -> XDP_PASS) to N's kernel, where the agent's socket in N's
    namespace reads it.

    Why agent parsing, not XDP: the reaction is a handful of map writes (route avoid
    masks) plus a hold timer and a restore; XDP has no timers in bcc 0.26 and cannot
    write an LPM value it has not looked up, while the agent is already the control
    plane of every switch, reacts in well under a millisecond, and keeps the logic in
    one place for both notices.

    N then avoids the members of its route P whose far end is S (route_val.avoid_mask;
    advisory: if every member would be avoided the data plane uses them anyway) until a
    RESTORE arrives (link back) or, for congestion, until the hold time ends without a
    refresh. S refreshes a congestion notice at most every arn_interval_ms while the
    congestion lasts (rate limit per port).

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
import math
import os
import selectors
import socket
import struct
import threading
import time

from dataplane.agent import arnpath
from dataplane.agent.flows import EXACT_SAMPLE_SHIFT, FLOW_SAMPLE_SHIFT, FlowTable
from dataplane.kernel.netns import in_netns
from dataplane.settings import merged

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
GRANULARITIES = ("prefix", "flow")
FLOW_WINDOW_MIN_NS = 200_000_000     # flow rates over at least this much wall time
REASONS = {R_LINK_DOWN: "link_down", R_UTIL: "utilisation", R_QUEUE: "queue_depth", R_CLEARED: "cleared"}

SO_NO_CHECK = 11                     # UDP without checksum: XDP-passed frames lose offload marks
RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK = 16, 17
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000

DEFAULTS = {"notify": True,          # FGLB: tell neighbours about lost paths (link down)
            "arn": False,            # ARN on congestion (needs the port model)
            "arn_util": 0.9,         # utilisation limit (0..1)
            "arn_queue_bytes": 16384,  # queue depth limit (bytes at the scaled speed)
            # real-fabric times at the nominal speed (wall = real / scale, dataplane.timescale);
            # at scale 1/40 these two are 200 ms and 20 ms of wall-clock time
            "hold_ms": 5.0,          # receiver keeps a congestion exclusion this long
            "interval_ms": 0.5,      # at most one congestion notice per port per interval
            "poll_ms": 2.0,          # congestion poll period
            "granularity": "prefix",  # congestion notice: avoid me for the prefix, or move these flows
            "learn": True,           # ARP-to-host-route on host-facing leaf ports
            "arn_path": "agent",     # link-down notices made/consumed by: agent | dataplane (arnpath)
            "arn_capture": False}    # dataplane: consumed notices also go up the stack (tcpdump)
SETTING_RANGES = {"arn_util": (0.0, 1.0), "arn_queue_bytes": (0, 1 << 30), "hold_ms": (0.0, 3.6e6),
                  "interval_ms": (0.0, 3.6e6), "poll_ms": (0.1, 10_000.0)}


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


def _parse_links(data: bytes):
    """(ifindex, flags) of every RTM_NEWLINK / RTM_DELLINK in a netlink datagram."""
    off = 0
    while off + 16 <= len(data):
        length, mtype = struct.unpack_from("=IH", data, off)
        if length < 16:
            break
        if mtype in (RTM_NEWLINK, RTM_DELLINK) and off + 32 <= len(data):
            _fam, _pad, _type, index, flags, _change = struct.unpack_from("=BBHiII", data, off + 16)
            yield index, (0 if mtype == RTM_DELLINK else flags)
        off += (length + 3) & ~3


def _link_states(netns: str, ifindexes: list[int]) -> dict[int, bool]:
    """{ifindex: IFF_UP and IFF_LOWER_UP} read over netlink in netns."""
    # deferred on purpose: pyroute2 takes 0.5 s to import (several on a busy machine),
    # time the agent's start would otherwise add to every deploy
    from pyroute2 import IPRoute

    with in_netns(netns):
        ipr = IPRoute()
    try:
        out = {}
        for ifx in ifindexes:
            flags = ipr.link("get", index=ifx)[0]["flags"]
            out[ifx] = bool(flags & IFF_UP) and bool(flags & IFF_LOWER_UP)
        return out
    finally:
        ipr.close()


# How long after a repair netlink messages about its ports are checked against the kernel.
RELEASE_SETTLE_NS = 1_000_000_000

class FabricMonitor:
    """The agent's reaction thread (see module doc). All map writes under `lock`."""

    def __init__(self, programmer, lock: threading.Lock):
        self.p = programmer
        self.spec = programmer.spec
        self.dp = programmer.dp
        self.lock = lock
        self.cfg = dict(DEFAULTS)
        self.sel = selectors.DefaultSelector()
        self.stop_r, self.stop_w = os.pipe()
        self.sel.register(self.stop_r, selectors.EVENT_READ, ("stop", None))
        self.udp: dict[str, socket.socket] = {}
        self.nl: dict[str, socket.socket] = {}
        self.seq = collections.Counter()
        self.counters = {n.name: collections.Counter() for n in self.spec.switches}
        self.events: collections.deque = collections.deque(maxlen=4096)
        # receiver state: (switch, prefix) -> {reporter id: expiry monotonic ns or 0}
        self.excl: dict[tuple[str, str], dict[int, int]] = {}
        self.dyn_routes: set[tuple[str, str]] = set()
        # sender state: (switch, prefix) withdrawn for link down; (switch, port) -> last ARN ns
        self.withdrawn: set[tuple[str, str]] = set()
        self.arn_last: dict[tuple[str, int], int] = {}
        self.arn_active: dict[tuple[str, int], int] = {}
        self.arn_named: dict[tuple[str, int], dict[tuple, int]] = {}   # flows a port named, until
        self.held: set[int] = set()
        # ifindex -> monotonic ns when release() applied its live state: netlink messages
        # about it for a while after that may describe the repair half-way (up, carrier
        # not yet back) and are checked against the kernel before they count
        self.released_ns: dict[int, int] = {}
        self.learn_gen = 0
        self.learned: dict[tuple[str, str], dict] = {}
        self.next_learn = 0
        # receiver state at --granularity flow: (switch, 5-tuple) -> the TM entry moving it
        self.flow_moves: dict[tuple[str, tuple], dict] = {}
        self._flow_table: FlowTable | None = None    # made on first flow-granular poll
        self._arn_port_list: list | None = None     # see _arn_ports
        self._arn_port_gen = -1
        self.thread = threading.Thread(target=self._loop, name="fabric-monitor", daemon=True)

    # ------------------------------------------------------------ setup
    def start(self) -> None:
        for node in self.spec.switches:
            with in_netns(node.netns):
                nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
                nl.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
                nl.bind((0, RTMGRP_LINK))
                udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                udp.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
                udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                udp.bind(("0.0.0.0", ARN_PORT))
            nl.setblocking(False)
            udp.setblocking(False)
            self.nl[node.name] = nl
            self.udp[node.name] = udp
            self.sel.register(nl, selectors.EVENT_READ, ("nl", node))
            self.sel.register(udp, selectors.EVENT_READ, ("udp", node))
        if self.cfg["learn"]:
            self._enable_learning()
        self.thread.start()
        if self.cfg["learn"]:
            announce_hosts(self.spec)

    def close(self) -> None:
        os.write(self.stop_w, b"x")
        self.thread.join(timeout=2)
        for s in [*self.nl.values(), *self.udp.values()]:
            s.close()

    def configure(self, **changes) -> dict:
        new = merged(self.cfg, changes, DEFAULTS, "ARN")
        if new["granularity"] not in GRANULARITIES:
            raise ValueError(f"ARN granularity {new['granularity']!r}: must be one of "
                             f"{', '.join(GRANULARITIES)}")
        for k, (low, high) in SETTING_RANGES.items():
            if not (math.isfinite(new[k]) and low <= new[k] <= high):
                raise ValueError(f"ARN setting {k} = {new[k]!r}: must be between {low:g} and {high:g}")
        arnpath.configure(self, new)
        flow_mode = new["arn"] and new["granularity"] == "flow"
        if flow_mode != (self.cfg["arn"] and self.cfg["granularity"] == "flow"):
            # exact counting while flow-granular ARN runs: the caught flows are the real heaviest
            with self.lock:
                self.dp.set_flow_visibility(True, EXACT_SAMPLE_SHIFT if flow_mode else FLOW_SAMPLE_SHIFT)
        self.cfg = new
        if not self.cfg["arn"] or self.cfg["granularity"] != "flow":
            self._drop_flow_moves()
        if not self.cfg["arn"]:
            self._drop_congestion_state()
        return dict(self.cfg)

    # ------------------------------------------------------------ main loop
    def _loop(self) -> None:
        while True:
            timeout = self.cfg["poll_ms"] / 1000 if self.cfg["arn"] else 0.02
            for key, _ in self.sel.select(timeout):
                kind, node = key.data
                if kind == "stop":
                    return
                try:
                    if kind == "nl":
                        self._on_netlink(node, key.fileobj)
                    else:
                        self._on_udp(node, key.fileobj)
                except Exception:   # never let one bad message kill the monitor
                    log.exception("fabric monitor: %s on %s", kind, node.name)
            try:
                now = time.monotonic_ns()
                self._expire(now)
                if self.cfg["arn"]:
                    self._poll_congestion(now)
                if self.cfg["learn"] and now >= self.next_learn:
                    self.next_learn = now + 50_000_000
                    self._poll_learned()
            except Exception:
                log.exception("fabric monitor: periodic work")

    # ------------------------------------------------------------ local failover
    def _on_netlink(self, node, sock) -> None:
        while True:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                return
            t_rx = time.monotonic_ns()
            for ifindex, flags in _parse_links(data):
                owner = self.spec.find_port(ifindex)
                if owner is None or owner[0].name != node.name:
                    continue
                up = bool(flags & IFF_UP) and bool(flags & IFF_LOWER_UP)
                if t_rx - self.released_ns.get(ifindex, -RELEASE_SETTLE_NS) < RELEASE_SETTLE_NS:
                    up = _link_states(node.netns, [ifindex]).get(ifindex, up)
                self.port_event(node, owner[1], up, t_rx)

    def hold(self, ifindexes: list[int]) -> None:
        """Repair in progress: ignore these ports' netlink events until release()."""
        with self.lock:
            self.held.update(ifindexes)

    def release(self, ifindexes: list[int]) -> dict:
        """Apply the kernel's current state of these ports, in the order given (a switch
        coming back: its own ports first, then its neighbours' ends), under one lock: the
        neighbours start sending to it only once it can forward everything."""
        states = {}
        with self.lock:
            for ifx in ifindexes:
                self.held.discard(ifx)
            by_ns: dict[str, list[int]] = {}
            for ifx in ifindexes:
                by_ns.setdefault(self.spec.port(ifx)[0].netns, []).append(ifx)
            read_ns = time.monotonic_ns()
            for netns, idx in by_ns.items():
                states.update(_link_states(netns, idx))
            for ifx in ifindexes:
                self.released_ns[ifx] = read_ns
            for ifx in ifindexes:
                node, iface = self.spec.port(ifx)
                self.port_event(node, iface, states.get(ifx, False))
        return {"up": sum(states.values()), "ports": len(ifindexes), "t_ns": time.monotonic_ns()}

    def port_event(self, node, iface, up: bool, t_rx: int | None = None) -> None:
        with self.lock:
            if iface.ifindex in self.held:
                return
            if self.dp.port_is_up(iface.ifindex) == up:
                return
            groups = self.dp.set_port_state(iface.ifindex, up)
            t_map = time.monotonic_ns()
            self.events.append({"event": "port_up" if up else "port_down", "switch": node.name,
                                "port": iface.name, "ifindex": iface.ifindex, "t_rx_ns": t_rx or t_map,
                                "t_map_ns": t_map, "groups": groups})
            if self.cfg["notify"] and self.cfg["arn_path"] == "agent":   # else the data plane's
                # every group of the switch, not only the port's: after a reset the
                # switch re-announces prefixes it still cannot reach
                self._notify_reachability(node, None, t_map)

    def _notify_reachability(self, node, gids, now) -> None:
        """S lost (or regained) every member for a prefix: withdraw (restore) it upstream."""
        for gid, prefix in self.p.routing.group_prefixes(node.name, gids):
            dead = self.dp.group_down_mask(gid)
            n = len(self.p.routing.members_of(gid))
            all_dead = dead == (1 << min(n, 64)) - 1
            key = (node.name, prefix)
            if all_dead and key not in self.withdrawn:
                self.withdrawn.add(key)
                self._send_upstream(node, prefix, T_WITHDRAW, R_LINK_DOWN, gid)
            elif not all_dead and key in self.withdrawn:
                self.withdrawn.discard(key)
                self._send_upstream(node, prefix, T_RESTORE, R_CLEARED, gid)

    # ------------------------------------------------------------ sending
    def _nexthop_id(self, node, gid) -> int:
        members = self.p.routing.members_of(gid)
        if not members:
            return 0
        far = self.spec.find_node(node.interface(members[0]).peer_node)
        return far.switch_id if far is not None and far.switch_id else 0

    def upstream(self, node, prefix: str, live_only: bool = True) -> list[tuple[object, object]]:
        """(neighbour switch, local interface of S towards it) for every neighbour whose
        route for prefix uses S as a next hop -- the one answer to "who routes through
        me"; with live_only, the interface is a live link to it."""
        out = []
        seen = set()
        for iface in node.interfaces:
            nbr = self.spec.find_node(iface.peer_node)
            if nbr is None or nbr.role == "host" or nbr.name in seen:
                continue
            if live_only and not self.dp.port_is_up(iface.ifindex):
                continue
            for route in self.spec.routes.get(nbr.name, []):
                if route.prefix == prefix and any(
                        nbr.interface(h).peer_node == node.name for h in route.nexthops):
                    seen.add(nbr.name)
                    out.append((nbr, iface))
                    break
        return out

    def _send_upstream(self, node, prefix, typ, reason, gid=None, *, hold_ms=0, metric=0, port=0,
                       flows=None) -> int:
        sent = 0
        sock = self.udp.get(node.name)
        for nbr, iface in self.upstream(node, prefix):
            peer = nbr.interface(iface.peer_if)
            if not peer.address:
                continue
            self.seq[node.name] += 1
            msg = Notice(typ, reason, self.seq[node.name], node.switch_id,
                         self._nexthop_id(node, gid) if gid else 0, prefix, hold_ms, metric, port,
                         flows or [])
            t_tx = time.monotonic_ns()       # the notice's send time (reaction timing)
            try:
                sock.sendto(msg.pack(), (peer.address.split("/")[0], ARN_PORT))
            except OSError as err:
                self.counters[node.name]["send_errors"] += 1
                log.warning("ARN from %s to %s: %s", node.name, nbr.name, err)
                continue
            sent += 1
            kind = "arn" if reason in (R_UTIL, R_QUEUE) else "notify"
            self.counters[node.name][f"{kind}_sent"] += 1
            self.events.append({"event": f"{TYPES[typ]}_sent", "switch": node.name, "to": nbr.name,
                                "t_tx_ns": t_tx, "t_ns": time.monotonic_ns(), **msg.describe()})
        return sent

    # ------------------------------------------------------------ receiving
    def _on_udp(self, node, sock) -> None:
        while True:
            try:
                data, addr = sock.recvfrom(2048)
            except BlockingIOError:
                return
            t_rx = time.monotonic_ns()
            if arnpath.consumed_below(self.cfg, data):   # the data plane acted on it already
                self.counters[node.name]["dataplane_seen"] += 1
                continue
            try:
                msg = Notice.unpack(data)
            except ValueError:
                self.counters[node.name]["bad_received"] += 1
                continue
            self.handle_notice(node, msg, t_rx, addr[0])

    def handle_notice(self, node, msg: Notice, t_rx: int, src: str = "") -> None:
        kind = "arn" if msg.reason in (R_UTIL, R_QUEUE) else "notify"
        if msg.type == T_RESTORE:
            kind = "restore"
        self.counters[node.name][f"{kind}_received"] += 1
        reporter = self.spec.find_switch(msg.reporter)
        with self.lock:
            key = (node.name, msg.prefix)
            if reporter is not None and msg.flows and msg.type == T_WITHDRAW:
                # flow granularity: TM entries only, the prefix's route stays as it is
                self._move_flows(node, reporter, msg, t_rx)
                self.events.append({"event": "flows_received", "switch": node.name,
                                    "from": reporter.name, "src": src, "t_rx_ns": t_rx,
                                    "t_map_ns": time.monotonic_ns(), **msg.describe()})
                return
            if reporter is None or not self._ensure_route(node, msg.prefix):
                self.counters[node.name]["ignored"] += 1
                return
            table = self.excl.setdefault(key, {})
            if msg.type == T_WITHDRAW:
                table[msg.reporter] = t_rx + msg.hold_ms * 1_000_000 if msg.hold_ms else 0
            else:
                table.pop(msg.reporter, None)
            self._apply_excl(node, msg.prefix)
            self.events.append({"event": f"{TYPES.get(msg.type)}_received", "switch": node.name,
                                "from": reporter.name, "src": src, "t_rx_ns": t_rx,
                                "t_map_ns": time.monotonic_ns(), **msg.describe()})

    def _move_flows(self, node, reporter, msg: Notice, t_rx: int) -> None:
        """Flow-granular ARN at a receiving leaf: each named flow this leaf's hosts send
        leaves by the least-loaded live uplink of its route not towards the reporter."""
        expires = t_rx + msg.hold_ms * 1_000_000 if msg.hold_ms else 0
        for five in msg.flows:
            src, dst = five[0], five[1]
            src_gid = self.dp.lookup_route(node.switch_id, src)
            if src_gid is None or not all(
                    self.spec.find_node(self.spec.port(ifx)[1].peer_node).role == "host"
                    for ifx in self.dp.group_info(src_gid)["members"]):
                continue                     # not a flow of this leaf's hosts
            key = (node.name, tuple(five))
            held = self.flow_moves.get(key)
            if held is not None:             # already moved: refresh the hold only
                held["expires_ns"] = expires
                continue
            gid = self.dp.lookup_route(node.switch_id, dst)
            if gid is None:
                continue
            choices = [ifx for ifx in self.dp.group_info(gid)["members"]
                       if self.dp.port_is_up(ifx) and self.spec.port(ifx)[1].peer_node != reporter.name]
            if not choices:
                continue                     # nowhere else to go: the flow stays
            moved_on = collections.Counter(m["ifindex"] for (sw, _), m in self.flow_moves.items()
                                           if sw == node.name)
            best = min(choices, key=lambda ifx: (self.dp.port_queue_state(ifx)["utilization"],
                                                 moved_on[ifx], ifx))
            iface = self.spec.port(best)[1]
            self.p.tm_add(node.name, egress=iface.name, src=src, dst=dst, sport=five[2],
                          dport=five[3], proto=five[4])
            self.flow_moves[key] = {"ifindex": best, "egress": iface.name, "reporter": reporter.name,
                                    "expires_ns": expires}
            self.counters[node.name]["flows_moved"] += 1

    def _unmove_flow(self, key: tuple[str, tuple]) -> None:
        src, dst, sport, dport, proto = key[1]
        self.flow_moves.pop(key, None)
        self.p.tm_del(key[0], src=src, dst=dst, sport=sport, dport=dport, proto=proto)

    def _drop_flow_moves(self) -> None:
        with self.lock:
            for key in list(self.flow_moves):
                self._unmove_flow(key)

    def _ensure_route(self, node, prefix: str) -> bool:
        if prefix in self.dp.routes(node.switch_id):
            return True
        gid = self.dp.lookup_route(node.switch_id, prefix.split("/")[0])
        if gid is None:
            return False
        self.dp.add_route(node.switch_id, prefix, gid)   # more specific copy, just for the mask
        self.dyn_routes.add((node.name, prefix))
        return True

    def _apply_excl(self, node, prefix) -> None:
        key = (node.name, prefix)
        reporters = {self.spec.switch_by_id(r).name for r in self.excl.get(key, {}) if self.spec.find_switch(r)}
        net = ipaddress.IPv4Network(prefix)
        # the prefix's route and every more specific one (learned /32 host routes)
        for rprefix, gid in self.dp.routes(node.switch_id).items():
            rnet = ipaddress.IPv4Network(rprefix)
            if not rnet.subnet_of(net):
                continue
            covering = {r for (sw, p), t in self.excl.items() if sw == node.name and t
                        and rnet.subnet_of(ipaddress.IPv4Network(p))
                        for r in t if self.spec.find_switch(r)}
            names = {self.spec.switch_by_id(r).name for r in covering}
            mask = 0
            for i, ifx in enumerate(self.dp.group_info(gid)["members"][:64]):
                if self.spec.port(ifx)[1].peer_node in names:
                    mask |= 1 << i
            self.dp.set_route_avoid(node.switch_id, rprefix, mask)
        if not reporters:
            self.excl.pop(key, None)
            if key in self.dyn_routes:
                self.dyn_routes.discard(key)
                self.dp.del_route(node.switch_id, prefix)

    def _expire(self, now: int) -> None:
        with self.lock:     # the server's threads change the table (clear_switch, notices)
            due = [(k, r) for k, t in self.excl.items() for r, exp in t.items() if exp and exp <= now]
            for (sw, prefix), reporter in due:
                table = self.excl.get((sw, prefix))
                if table is None or table.get(reporter, 0) == 0 or table[reporter] > now:
                    continue
                del table[reporter]
                self.counters[sw]["expired"] += 1
                self.events.append({"event": "exclusion_expired", "switch": sw, "prefix": prefix,
                                    "reporter": reporter, "t_ns": now})
                self._apply_excl(self.spec.node(sw), prefix)
            for key, move in list(self.flow_moves.items()):
                if move["expires_ns"] and move["expires_ns"] <= now:
                    self._unmove_flow(key)
                    self.counters[key[0]]["flows_expired"] += 1
                    self.events.append({"event": "flow_move_expired", "switch": key[0],
                                        "flow": list(key[1]), "t_ns": now})

    def clear_switch(self, name: str) -> None:
        """Forget what switch `name` holds or has sent (its state was reset, as by a
        reboot): its own exclusions, and every exclusion its notices caused elsewhere --
        once its ports are back, it re-announces whatever it still cannot reach."""
        sid = self.spec.node(name).switch_id
        with self.lock:
            for key in list(self.excl):
                if key[0] == name:
                    self.excl[key] = {}
                elif sid in self.excl[key]:
                    del self.excl[key][sid]
                else:
                    continue
                self._apply_excl(self.spec.node(key[0]), key[1])
            self.withdrawn = {k for k in self.withdrawn if k[0] != name}
            for key in [k for k, m in self.flow_moves.items() if name in (k[0], m["reporter"])]:
                self._unmove_flow(key)
            for key in [k for k in self.arn_active if k[0] == name]:
                self.arn_active.pop(key, None)
                self.arn_named.pop(key, None)

    def _drop_congestion_state(self) -> None:
        with self.lock:
            for key, table in list(self.excl.items()):
                for r, exp in list(table.items()):
                    if exp:
                        del table[r]
                self._apply_excl(self.spec.node(key[0]), key[1])
            self.arn_active.clear()
            self.arn_named.clear()

    # ------------------------------------------------------------ ARN on congestion
    def _arn_ports(self) -> list:
        """(switch, egress interface, [(gid, prefix)]) for every port that carries a prefix
        some neighbour routes through this switch: the ports whose congestion matters.
        Worked out again whenever the programmer's routing state changes."""
        routing = self.p.routing
        if self._arn_port_list is None or self._arn_port_gen != routing.generation:
            ports: dict[int, tuple] = {}
            with self.lock:
                gen = routing.generation
                for owner, gid, members in routing.every_group():
                    node = self.spec.node(owner)
                    for _, prefix in routing.group_prefixes(owner, [gid]):
                        if not self.upstream(node, prefix, live_only=False):
                            continue
                        for ifname in members:
                            iface = node.interface(ifname)
                            ports.setdefault(iface.ifindex, (node, iface, []))[2].append((gid, prefix))
            self._arn_port_list, self._arn_port_gen = list(ports.values()), gen
        return self._arn_port_list

    def _hold_wall_ms(self) -> int:
        """The hold time as notices carry it: wall-clock ms at the lab's scale (sender and
        receiver share the lab's clock), at least 1 (0 would mean "until restored")."""
        return max(1, round(self.p.wall_us(self.cfg["hold_ms"] * 1000) / 1000))

    def _poll_congestion(self, now: int) -> None:
        interval = int(self.p.wall_us(self.cfg["interval_ms"] * 1000) * 1000)
        for node, iface, targets in self._arn_ports():
            key = (node.name, iface.ifindex)
            if now - self.arn_last.get(key, 0) < interval:
                continue
            with self.lock:
                if not self.dp.port_is_up(iface.ifindex):
                    continue
                st = self.dp.port_queue_state(iface.ifindex)
            reason, metric = 0, 0
            if st["queue_bytes"] >= self.cfg["arn_queue_bytes"]:
                reason, metric = R_QUEUE, st["queue_bytes"]
            elif st["utilization"] >= self.cfg["arn_util"]:
                reason, metric = R_UTIL, int(st["utilization"] * 1024)
            if not reason:
                continue
            self.arn_last[key] = now
            self.arn_active[key] = now
            caught = self._caught_flows(node, iface, now, interval) if self.cfg["granularity"] == "flow" else None
            self.events.append({"event": "congestion", "switch": node.name, "port": iface.name,
                                "reason": REASONS[reason], "metric": metric, "t_ns": now,
                                **({"flows": [list(f) for f in caught]} if caught is not None else {})})
            for gid, prefix in targets:
                flows = None
                if caught is not None:
                    net = ipaddress.IPv4Network(prefix)
                    flows = [f for f in caught if ipaddress.IPv4Address(f[1]) in net]
                    if not flows:
                        continue             # flow granularity: no flow of this prefix to move
                self._send_upstream(node, prefix, T_WITHDRAW, reason, gid, hold_ms=self._hold_wall_ms(),
                                    metric=metric, port=iface.ifindex, flows=flows)

    def _caught_flows(self, node, iface, now: int, interval_ns: int) -> list[tuple]:
        """The flows this port named within the hold (refreshed: they have moved, their
        bytes still fill the window), then the heaviest others, heaviest first, until what
        the unnamed flows send is below the utilisation limit -- the port's own utilisation
        lags a move by its averaging window, so it cannot say when to stop."""
        if self._flow_table is None:
            slots = {self.dp.port_info(i.ifindex).slot: (n.name, i.name)
                     for n in self.spec.switches for i in n.interfaces}
            self._flow_table = FlowTable(self.dp, slots)
        window_ns = max(4 * interval_ns, FLOW_WINDOW_MIN_NS)
        with self.lock:
            flows = [f for f in self._flow_table.read(window_ns)
                     if f.switch == node.name and f.port == iface.name]
        key = (node.name, iface.ifindex)
        named = {five: t for five, t in self.arn_named.get(key, {}).items() if t > now}
        others = sorted((f for f in flows if f.five not in named), key=lambda f: -f.rate_bps)
        left = sum(f.rate_bps for f in others)
        speed = (self.dp.port_model(iface.ifindex) or {}).get("speed_bps") or iface.speed_bps
        caught = list(named)[:FLOWS_PER_NOTICE]
        for f in others[:FLOWS_PER_NOTICE - len(caught)]:
            if left < self.cfg["arn_util"] * speed and caught:
                break
            caught.append(f.five)
            left -= f.rate_bps
        until = now + self._hold_wall_ms() * 1_000_000
        self.arn_named[key] = {five: until for five in caught}
        return caught

    # ------------------------------------------------------------ ARP -> host routes
    def _enable_learning(self) -> None:
        with self.lock:
            for node in self.spec.switches:
                for iface in node.interfaces:
                    peer = self.spec.find_node(iface.peer_node)
                    if peer is not None and peer.role == "host":
                        self.dp.set_port_learn(iface.ifindex, True)

    def expected_hosts(self) -> set[tuple[str, str]]:
        """(leaf, host address) of every host port: what learning finds once all announced."""
        out = set()
        for host in self.spec.hosts:
            for nic in self.spec.host_nics.get(host.name, []):
                for port in nic.ports:
                    out.add((host.interface(port).peer_node, nic.address.split("/")[0]))
        return out

    def wait_learned(self, timeout_s: float, quiet_s: float = 1.0) -> int:
        """Wait until every host port is learned (its /32 routes installed), announcing
        again the hosts still missing whenever learning makes no progress for quiet_s.
        Returns how many are missing at the end (0: the fabric knows every host)."""
        if not self.cfg["learn"]:
            return 0
        expected = self.expected_hosts()
        deadline = time.monotonic() + timeout_s
        progress_at, seen = time.monotonic(), -1
        while True:
            with self.lock:
                missing = expected - set(self.learned)
            if not missing or time.monotonic() > deadline:
                return len(missing)
            if len(missing) != seen:
                progress_at, seen = time.monotonic(), len(missing)
            elif time.monotonic() - progress_at > quiet_s:
                hosts = {h.name for h in self.spec.hosts for nic in self.spec.host_nics.get(h.name, [])
                         for port in nic.ports
                         if (h.interface(port).peer_node, nic.address.split("/")[0]) in missing}
                announce_hosts(self.spec, sorted(hosts))
                progress_at = time.monotonic()
            time.sleep(0.02)

    def _poll_learned(self) -> None:
        gen = self.dp.learn_generation()
        if gen == self.learn_gen:
            return
        self.learn_gen = gen
        with self.lock:
            for h in self.dp.learned_hosts():
                node = self.spec.find_switch(h["switch_id"])
                owner = self.spec.find_port(h["ifindex"])
                if node is None or owner is None:
                    continue
                key = (node.name, h["ip"])
                if self.learned.get(key, {}).get("ifindex") == h["ifindex"]:
                    continue
                installed = self.p.install_host_route(node, owner[1], h["ip"])
                self.learned[key] = h     # only once its routes are in (wait_learned counts it)
                for sw in installed:
                    for (esw, p), t in list(self.excl.items()):   # keep exclusions in force
                        if esw == sw and t and ipaddress.IPv4Address(h["ip"]) in ipaddress.IPv4Network(p):
                            self._apply_excl(self.spec.node(sw), p)
                self.counters[node.name]["hosts_learned"] += 1
                self.events.append({"event": "host_learned", "switch": node.name, "ip": h["ip"],
                                    "port": owner[1].name, "mac": h["mac"], "t_ns": time.monotonic_ns()})

    # ------------------------------------------------------------ status
    def status(self) -> dict:
        with self.lock:
            return self._status()

    def _status(self) -> dict:
        return {"config": dict(self.cfg),
                "counters": {k: dict(v) for k, v in self.counters.items() if v},
                "exclusions": [{"switch": sw, "prefix": p, "reporters": [self.spec.switch_by_id(r).name for r in t],
                                "expires_ns": list(t.values())} for (sw, p), t in self.excl.items() if t],
                "withdrawn": sorted(f"{sw} {p}" for sw, p in self.withdrawn),
                "flow_moves": [{"switch": sw, "flow": list(five), "egress": m["egress"],
                                "avoid": m["reporter"], "expires_ns": m["expires_ns"]}
                               for (sw, five), m in self.flow_moves.items()],
                "learned": [{"switch": sw, "ip": ip, "port": self.spec.port(h["ifindex"])[1].name,
                             "mac": h["mac"]} for (sw, ip), h in sorted(self.learned.items())]}

    def recent_events(self, since_ns: int = 0) -> list[dict]:
        return [e for e in list(self.events)
                if max(e.get("t_ns", 0), e.get("t_map_ns", 0), e.get("t_rx_ns", 0)) >= since_ns]


def garp_frame(mac: str, ip: str) -> bytes:
    """Gratuitous ARP request (sender = target = ip), broadcast."""
    m = bytes.fromhex(mac.replace(":", ""))
    a = socket.inet_aton(ip)
    return (b"\xff" * 6 + m + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1)
            + m + a + b"\x00" * 6 + a)


def announce_hosts(spec, hosts: list[str] | None = None) -> int:
    """Every host announces each NIC address out of every port of it (both planes) with a
    gratuitous ARP, as a dual-plane host does at start; leaves learn it (PORT_F_LEARN)."""
    sent = 0
    for node in spec.hosts:
        if hosts is not None and node.name not in hosts:
            continue
        try:
            # one packet socket per host, sending out of each port by name
            with in_netns(node.netns):
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        except OSError as err:
            log.warning("GARP from %s: %s", node.name, err)
            continue
        with s:
            for nic in spec.host_nics.get(node.name, []):
                ip = nic.address.split("/")[0]
                for port in nic.ports:
                    try:
                        s.sendto(garp_frame(node.interface(port).mac, ip), (port, 0))
                        sent += 1
                    except OSError as err:
                        log.warning("GARP from %s:%s: %s", node.name, port, err)
    return sent
