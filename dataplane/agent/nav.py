"""Path navigation: the lab's global controller for the big flows (one per lab, a thread
of the agent, so it ends with the agent when the lab is destroyed).

Every interval it reads what the data plane saw (link loads from the port counters, the
heaviest flows per port from flow_seen, link state), plans where the heavy flows go for
the whole fabric at once, and installs the plan as dynamic traffic-matrix entries: on the
source leaf (which uplink) and on the spine (which of its links to the destination leaf).
Flows it does not place keep their group's mode.

The plan (greedy, largest first): a flow's candidate paths are every live (leaf uplink,
spine downlink) pair from its source leaf to its destination leaf. Each link starts at
its background load (measured load minus the heavy flows measured on it) plus the heavy
flows on their current paths; flows are taken heaviest first, each is lifted off its path
and goes to the path whose most loaded link, with the flow added, is least loaded
(relative to the link's speed); a tie, or a gain below HYSTERESIS, keeps the path the flow
already has (a move can reorder the flow's packets still queued on the old path). Starting
from where the flows are, not from empty links, keeps two flows that must share a link
where they are: with empty links a later flow in the order would leave for a link that is
only empty because its own flow had not been placed yet. Announced flows (end-network cooperation, `announce`) are planned the same way
before they send, with their announced rate.

Entries expire when their flow ends: no new bytes for EXPIRE_INTERVALS intervals (an
announced flow that has not sent yet is kept until its start plus ANNOUNCED_WAIT_S: hosts
announce before they have built their frames). A measured flow's entries over a link that
died go at the next round: a heavy flow is moved off it, one that no longer reads as heavy
(its frames die there) is unplaced.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from ipaddress import IPv4Address

from dataplane import timescale
from dataplane.agent.flows import EXACT_SAMPLE_SHIFT, FLOW_SAMPLE_SHIFT, FlowTable
from dataplane.agent.navpaths import Link, NavFabric, Path

DEFAULT_INTERVAL_US = 2.0       # real-fabric time (0.4 s of wall time at scale 5e-6)
MIN_WALL_INTERVAL_S = 0.05      # the agent's Python loop reads every port; not faster
MIN_SHARE = 0.05                # a flow is heavy from 5 % of its egress port's speed
MIN_FRAMES = 4                  # ... and once it has sent a few frames (one says nothing)
HYSTERESIS = 0.2                # move a flow only for a 20 % lower bottleneck: rates read from
                                # counters of a shared machine wobble by ~10 % per round
EXPIRE_INTERVALS = 2
ANNOUNCED_WAIT_S = 120.0        # wall time an announced flow may take to start after its start
ANNOUNCED_IDLE_S = 5.0          # ... and may pause that long once it has started
ROUNDS_KEPT = 200
EVENTS_KEPT = 200               # per round: bytes each busy leaf uplink sent (status "rounds")

Five = tuple[str, str, int, int, int]   # src, dst, sport, dport, proto


@dataclass
class Placed:
    five: Five
    src_leaf: str
    dst_leaf: str
    path: Path
    rate_bps: float
    announced: bool = False
    last_bytes: int = -1
    last_growth: float = field(default_factory=time.monotonic)
    moves: int = 0


class NavError(ValueError):
    pass


class Navigator:
    def __init__(self, programmer, lock):
        self.p = programmer
        self.lock = lock
        spec = programmer.spec
        self.fabric = NavFabric(programmer)
        self.roles, self.paths = self.fabric.roles, self.fabric.paths
        self.placed: dict[Five, Placed] = {}
        self.thread: threading.Thread | None = None
        self.stop_event = threading.Event()
        self.interval_us = DEFAULT_INTERVAL_US
        self.plans = 0
        self.moves = 0
        self.last_plan: dict = {}
        self.events: list[dict] = []
        self.error: str | None = None
        self._last_loads: dict[Link, float] = {}
        self.rounds: deque[dict] = deque(maxlen=ROUNDS_KEPT)
        slots = {}
        for node in spec.switches:
            for iface in node.interfaces:
                slots[programmer.dp.port_info(iface.ifindex).slot] = (node.name, iface.name)
        self.flows = FlowTable(programmer.dp, slots, self._speed)

    def _speed(self, switch: str, port: str) -> int:
        return self.fabric.speed(switch, port)

    def _link_alive(self, link: Link) -> bool:
        return self.fabric.link_alive(link)

    def wall_interval_s(self) -> float:
        return max(timescale.wall_seconds(self.interval_us * 1e-6, self.p.port_model["scale"]),
                   MIN_WALL_INTERVAL_S)

    def start(self, interval_us: float | None = None) -> dict:
        if interval_us is not None and not interval_us > 0:
            raise NavError(f"interval must be more than 0 us (real-fabric time), not {interval_us:g}")
        if not self.fabric.has_multipath():
            raise NavError(f"lab {self.p.spec.name} has no leaf pair joined by more than one "
                           "leaf-spine-leaf path: nothing to navigate")
        if interval_us is not None:
            self.interval_us = float(interval_us)
        if self.thread is None or not self.thread.is_alive():
            self.stop_event.clear()
            self.rounds.clear()
            self.fabric.tx_seen.clear()
            with self.lock:
                self.p.dp.set_flow_visibility(True, EXACT_SAMPLE_SHIFT)
            self.thread = threading.Thread(target=self._loop, name="nav", daemon=True)
            self.thread.start()
        return self.status()

    def stop(self) -> dict:
        if self.thread is not None:
            self.stop_event.set()
            self.thread.join(timeout=30)
            self.thread = None
        with self.lock:
            for placed in list(self.placed.values()):
                self._uninstall(placed)
            self.placed.clear()
            self.p.dp.set_flow_visibility(True, FLOW_SAMPLE_SHIFT)
        return self.status()

    def _loop(self) -> None:
        while not self.stop_event.is_set():
            started = time.monotonic()
            try:
                self.plan_once()
                self.error = None
            except Exception as err:  # reported by status; the next interval tries again
                self.error = f"{type(err).__name__}: {err}"
            self.stop_event.wait(max(self.wall_interval_s() - (time.monotonic() - started), 0.0))

    def announce(self, flows: list[dict]) -> dict:
        """End-network cooperation: flows hosts are about to send (src, dst, sport, dport,
        proto, bytes, start, rate_bps), planned together at once, before they start."""
        parsed = parse_announcements(flows, self.fabric.host_leaves, self.p.spec.name)
        if self.thread is None or not self.thread.is_alive():
            raise NavError("navigation is not running: `railab nav LAB start` first")
        with self.lock:
            loads = self._background({})
            demands = []
            for five, rate, start in parsed:
                pair = self.fabric.leaf_pair(five[0], five[1])
                if pair is None:
                    continue
                grace = timescale.wall_seconds(start, self.p.port_model["scale"])
                demands.append((five, rate, pair, None, grace))
            placed = self._assign(demands, loads, announced=True)
        return {"announced": len(parsed), "placed": placed}

    def _background(self, heavy_on: dict[Link, float]) -> dict[Link, float]:
        """Per link: measured load minus the heavy flows measured on it (never below 0)."""
        out = {}
        for link, load in self._last_loads.items():
            rest = load - heavy_on.get(link, 0.0)
            # below a heavy flow's threshold it is measurement noise, not load
            out[link] = rest if rest >= MIN_SHARE * self._speed(*link) else 0.0
        return out

    def plan_once(self) -> dict:
        window_ns = int(self.wall_interval_s() * 1e9 * 1.5)
        flows = self.flows.read(window_ns)
        with self.lock:
            self._last_loads = self.fabric.link_loads(self.rounds)
            now = time.monotonic()
            # every heavy flow, where it was seen: source leaf uplink (and spine downlink)
            seen: dict[Five, dict] = {}
            heavy_on: dict[Link, float] = {}
            for f in flows:
                if self.roles.get(f.switch) not in ("leaf", "spine") or (f.switch, f.port) not in self._last_loads:
                    continue
                entry = seen.setdefault(f.five, {"rate": 0.0, "links": {}, "last": {}, "bytes": 0,
                                                 "frames": 0})
                role = self.roles[f.switch]
                if role == "leaf":   # its rate: what it sent on all uplinks (old and new port)
                    entry["rate"] += f.rate_bps
                    entry["frames"] += f.packets
                # a flow that moved is still in the table on its old port for a while:
                # its current link per tier is the one it was seen on last
                if f.last_ns >= entry["last"].get(role, 0):
                    entry["last"][role] = f.last_ns
                    entry["links"][role] = (f.switch, f.port)
                    if role == "leaf":
                        entry["src_leaf"], entry["bytes"] = f.switch, f.bytes
            # expire what ended
            for five, placed in list(self.placed.items()):
                entry = seen.get(five)
                # a few frames (a path trace runs the program on one) do not start a flow
                if entry and entry["frames"] >= MIN_FRAMES and entry["bytes"] != placed.last_bytes:
                    placed.last_bytes = entry["bytes"]
                    placed.last_growth = max(placed.last_growth, now)
                # an announced flow that has not sent yet waits for its senders to start; one
                # that has pauses longer than a measured flow may (its host said it goes on)
                wait = (ANNOUNCED_WAIT_S if placed.last_bytes < 0 else ANNOUNCED_IDLE_S) \
                    if placed.announced else 0.0
                if now - placed.last_growth > EXPIRE_INTERVALS * self.wall_interval_s() + wait:
                    self._uninstall(placed)
                    del self.placed[five]
                    self._event("expired", five, placed.path, None)
            heavy = {five for five, entry in seen.items() if "src_leaf" in entry and
                     entry["frames"] >= MIN_FRAMES and entry["rate"] >= MIN_SHARE * min(self._speed(*l) for l in entry["links"].values())}
            # a placement over a dead link whose flow no longer reads as heavy (its frames
            # die there) would wait out its expiry pointing at the dead link; it goes now
            # (a heavy one is moved by the plan below)
            for five, placed in list(self.placed.items()):
                if five not in heavy and not placed.announced and \
                        not all(self._link_alive(link) for link in placed.path):
                    self._uninstall(placed)
                    del self.placed[five]
                    self._event("unplaced", five, placed.path, None)
            # what the heavy flows sent on each link this round -- also on links they have
            # just left -- is theirs, not background (else a moved flow's old link looks
            # busy for a round and the next plan moves others away from it)
            for f in flows:
                if f.five in heavy and (f.switch, f.port) in self._last_loads:
                    heavy_on[(f.switch, f.port)] = heavy_on.get((f.switch, f.port), 0.0) + f.rate_bps
            loads = self._background(heavy_on)
            demands = []
            for five, entry in seen.items():
                if five not in heavy:
                    continue
                pair = self.fabric.leaf_pair(five[0], five[1], entry["src_leaf"])
                if pair is None:
                    continue
                current = tuple(entry["links"][r] for r in ("leaf", "spine") if r in entry["links"])
                demands.append((five, entry["rate"], pair, current, 0.0))
            # announced flows not seen yet keep their reservation in the plan
            for five, placed in self.placed.items():
                if five not in seen and placed.announced:
                    demands.append((five, placed.rate_bps, (placed.src_leaf, placed.dst_leaf), placed.path, 0.0))
            placed_now = self._assign(demands, loads, announced=False)
            self.plans += 1
            dead = self.fabric.dead_links()
            self.last_plan = {"t_ns": time.monotonic_ns(), "heavy_flows": len(demands),
                              "placed": placed_now, "dead_links": dead,
                              "entries_on_dead_links": self._entries_on(dead)}
            if self.rounds:
                self.rounds[-1].update(dead_links=dead, plan_t_ns=self.last_plan["t_ns"],
                                       entries_on_dead_links=self.last_plan["entries_on_dead_links"])
        return self.last_plan

    def _entries_on(self, links: list[str]) -> int:
        """Installed entries whose egress is one of these links ("switch:port")."""
        dead = set(links)
        return sum(1 for p in self.placed.values() for s, i in p.path if f"{s}:{i}" in dead)

    def _assign(self, demands, loads: dict[Link, float], announced: bool) -> int:
        """Greedy, heaviest first (module doc). Installs what changed; returns how many
        flows have a placement."""
        alive = {}

        def live(path) -> bool:
            ok = alive.get(path)
            if ok is None:
                ok = alive[path] = all(self._link_alive(l) for l in path)
            return ok

        # Every flow starts on the path it has: a flow weighs its path against the others'
        # current ones, not against links that look empty only because their own flows come
        # later in the order (else, of two flows that must share a link, whichever comes
        # later leaves for such a link, and the pair is shuffled round after round).
        held: dict[Five, Path] = {}
        for five, rate, pair, current, _ in demands:
            old = self.placed.get(five)
            keep = old.path if old is not None else current
            if keep in self.paths.get(pair, []) and live(keep):
                held[five] = keep
                for link in keep:
                    loads[link] = loads.get(link, 0.0) + rate
        count = 0
        for five, rate, pair, current, grace in sorted(demands, key=lambda d: -d[1]):
            for link in held.get(five, ()):
                loads[link] -= rate
            candidates = [path for path in self.paths.get(pair, []) if live(path)]
            if not candidates:
                continue
            old = self.placed.get(five)
            keep = old.path if old is not None else current
            if old is not None and old.announced and keep in candidates:
                # the hosts said what this flow is: its placement stands while its path
                # lives (measured rates of paced senders on a busy machine only add noise)
                for link in keep:
                    loads[link] = loads.get(link, 0.0) + old.rate_bps
                count += 1
                continue

            def cost(path):
                return max((loads.get(l, 0.0) + rate) / self._speed(*l) for l in path)

            best = min(candidates, key=cost)
            if keep in candidates and cost(keep) <= cost(best) * (1 + HYSTERESIS) + 1e-12:
                best = keep
            for link in best:
                loads[link] = loads.get(link, 0.0) + rate
            count += 1
            if old is not None and old.path == best:
                old.rate_bps = rate
                if announced and not old.announced:
                    # a flow the controller had measured (e.g. the same five-tuple in the run
                    # before) and that the hosts now announce is an announced flow: without
                    # this it expired before it started and was re-placed from measured rates
                    old.announced, old.last_bytes = True, -1
                    old.last_growth = time.monotonic() + grace
                continue
            placed = Placed(five, pair[0], pair[1], best, rate, announced=announced or bool(old and old.announced))
            if announced:
                placed.last_growth = time.monotonic() + grace
            if old is not None:
                # entries of the old path on switches the new one does not cross go
                stale = [sw for sw, _ in old.path if sw not in {sw2 for sw2, _ in best}]
                self._uninstall(old, only=stale)
                placed.moves = old.moves
                placed.last_bytes, placed.last_growth = old.last_bytes, max(old.last_growth, placed.last_growth)
            if old is not None or (current is not None and best != current):
                placed.moves += 1
                self.moves += 1
                self._event("moved", five, old.path if old else current, best)
            self._install(placed)
            self.placed[five] = placed
        return count

    def _event(self, what: str, five: Five, before, after) -> None:
        self.events.append({"t_ns": time.monotonic_ns(), "event": what, "flow": list(five),
                            "from": [f"{s}:{i}" for s, i in before or ()],
                            "to": [f"{s}:{i}" for s, i in after or ()]})
        del self.events[:-EVENTS_KEPT]

    def _install(self, placed: Placed) -> None:
        src, dst, sport, dport, proto = placed.five
        for switch, port in placed.path:
            self.p.tm_add(switch, egress=port, src=src, dst=dst, sport=sport, dport=dport, proto=proto)

    def _uninstall(self, placed: Placed, only: list[str] | None = None) -> None:
        src, dst, sport, dport, proto = placed.five
        for switch, _ in placed.path:
            if only is not None and switch not in only:
                continue
            self.p.tm_del(switch, src=src, dst=dst, sport=sport, dport=dport, proto=proto)

    def status(self) -> dict:
        with self.lock:
            entries: dict[str, int] = {}
            for placed in self.placed.values():
                for switch, _ in placed.path:
                    entries[switch] = entries.get(switch, 0) + 1
            return {
                "running": self.thread is not None and self.thread.is_alive(),
                "interval_us": self.interval_us, "interval_wall_s": self.wall_interval_s(),
                "scale": self.p.port_model["scale"], "plans": self.plans, "moves": self.moves,
                "entries_per_switch": entries,
                "flows": [{"src": p.five[0], "dst": p.five[1], "sport": p.five[2], "dport": p.five[3],
                           "proto": p.five[4], "rate_bps": p.rate_bps, "announced": p.announced,
                           "path": [f"{s}:{i}" for s, i in p.path], "moves": p.moves}
                          for p in self.placed.values()],
                "last_plan": self.last_plan, "error": self.error, "rounds": list(self.rounds),
                "events": list(self.events),
            }


def parse_announcements(flows: list[dict], host_leaves: dict, lab: str) -> list[tuple[Five, float, float]]:
    """(five-tuple, rate b/s, start s) of each announced flow (Navigator.announce), or
    NavError naming the first that is not one of the lab's host pairs."""
    parsed = []
    for i, f in enumerate(flows):
        where = f"announcement {i}"
        for key in ("src", "dst"):
            ip = f.get(key)
            try:
                IPv4Address(str(ip))
            except ValueError:
                raise NavError(f"{where}: {key} {ip!r} is not an IPv4 address") from None
            if str(ip) not in host_leaves:
                raise NavError(f"{where}: {key} {ip} is not a host NIC of lab {lab}")
        if float(f.get("bytes", 0)) < 0 or float(f.get("rate_bps", 0)) < 0:
            raise NavError(f"{where}: bytes and rate_bps must be 0 or more")
        five = (str(f["src"]), str(f["dst"]), int(f.get("sport", 0)), int(f.get("dport", 0)),
                int(f.get("proto", 17)))
        rate = float(f.get("rate_bps") or 0) or float(f.get("bytes", 0)) * 8
        parsed.append((five, rate, float(f.get("start", 0))))
    return parsed
