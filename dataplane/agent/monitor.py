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

The parts: failover.Failover (netlink, reachability notices), notices.Notices (the wire
format, sending, exclusions and flow moves on receipt), congestion.Congestion (ARN
polling) and learning.Learning (ARP -> host routes), each over this monitor's shared
state and lock.
"""
from __future__ import annotations

import collections
import logging
import math
import os
import selectors
import socket
import threading
import time

from dataplane.agent import arnpath
from dataplane.agent.congestion import Congestion
from dataplane.agent.failover import RTMGRP_LINK, Failover
from dataplane.agent.flows import EXACT_SAMPLE_SHIFT, FLOW_SAMPLE_SHIFT
from dataplane.agent.learning import Learning, announce_hosts
from dataplane.agent.notices import ARN_PORT, GRANULARITIES, Notices
from dataplane.kernel.netns import in_netns
from dataplane.settings import merged

log = logging.getLogger("railab.arn")

SO_NO_CHECK = 11                     # UDP without checksum: XDP-passed frames lose offload marks

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
        # sender state: (switch, prefix) withdrawn for link down (ARN state: Congestion)
        self.withdrawn: set[tuple[str, str]] = set()
        self.held: set[int] = set()
        # ifindex -> monotonic ns when release() applied its live state: netlink messages
        # about it for a while after that may describe the repair half-way (up, carrier
        # not yet back) and are checked against the kernel before they count
        self.released_ns: dict[int, int] = {}
        # receiver state at --granularity flow: (switch, 5-tuple) -> the TM entry moving it
        self.flow_moves: dict[tuple[str, tuple], dict] = {}
        self.notices = Notices(self)
        self.failover = Failover(self)
        self.congestion = Congestion(self)
        self.learning = Learning(self)
        # the server's and the tests' entry points, served by their parts
        self.hold, self.release, self.port_event = self.failover.hold, self.failover.release, self.failover.port_event
        self._notify_reachability = self.failover.notify_reachability
        self.handle_notice, self.upstream, self._expire = (self.notices.handle_notice, self.notices.upstream,
                                                           self.notices.expire)
        self._arn_ports = self.congestion.arn_ports
        self.expected_hosts, self.wait_learned = self.learning.expected_hosts, self.learning.wait_learned
        self.thread = threading.Thread(target=self._loop, name="fabric-monitor", daemon=True)

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
            self.learning.enable()
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
            self.notices.drop_flow_moves()
        if not self.cfg["arn"]:
            self._drop_congestion_state()
        return dict(self.cfg)

    def _loop(self) -> None:
        while True:
            timeout = self.cfg["poll_ms"] / 1000 if self.cfg["arn"] else 0.02
            for key, _ in self.sel.select(timeout):
                kind, node = key.data
                if kind == "stop":
                    return
                try:
                    if kind == "nl":
                        self.failover.on_netlink(node, key.fileobj)
                    else:
                        self.notices.on_udp(node, key.fileobj)
                except Exception:   # never let one bad message kill the monitor
                    log.exception("fabric monitor: %s on %s", kind, node.name)
            try:
                now = time.monotonic_ns()
                self.notices.expire(now)
                if self.cfg["arn"]:
                    self.congestion.poll(now)
                if self.cfg["learn"] and now >= self.learning.next_learn:
                    self.learning.next_learn = now + 50_000_000
                    self.learning.poll()
            except Exception:
                log.exception("fabric monitor: periodic work")

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
                self.notices.apply_excl(self.spec.node(key[0]), key[1])
            self.withdrawn = {k for k in self.withdrawn if k[0] != name}
            for key in [k for k, m in self.flow_moves.items() if name in (k[0], m["reporter"])]:
                self.notices.unmove_flow(key)
            self.congestion.forget(name)

    def _drop_congestion_state(self) -> None:
        with self.lock:
            for key, table in list(self.excl.items()):
                for r, exp in list(table.items()):
                    if exp:
                        del table[r]
                self.notices.apply_excl(self.spec.node(key[0]), key[1])
            self.congestion.forget()

    def status(self) -> dict:
        with self.lock:
            return self._status()

    def _status(self) -> dict:
        return {"config": dict(self.cfg),
                "counters": {k: dict(v) for k, v in self.counters.items() if v},
                "dataplane_notices": self.dp.notice_counters(),
                "exclusions": [{"switch": sw, "prefix": p, "reporters": [self.spec.switch_by_id(r).name for r in t],
                                "expires_ns": list(t.values())} for (sw, p), t in self.excl.items() if t],
                "withdrawn": sorted(f"{sw} {p}" for sw, p in self.withdrawn),
                "flow_moves": [{"switch": sw, "flow": list(five), "egress": m["egress"],
                                "avoid": m["reporter"], "expires_ns": m["expires_ns"]}
                               for (sw, five), m in self.flow_moves.items()],
                "learned": [{"switch": sw, "ip": ip, "port": self.spec.port(h["ifindex"])[1].name,
                             "mac": h["mac"]} for (sw, ip), h in sorted(self.learning.learned.items())]}

    def recent_events(self, since_ns: int = 0) -> list[dict]:
        return [e for e in list(self.events)
                if max(e.get("t_ns", 0), e.get("t_map_ns", 0), e.get("t_rx_ns", 0)) >= since_ns]
