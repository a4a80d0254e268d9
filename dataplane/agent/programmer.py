"""The agent's programmer: turns the lab spec into map entries of the data plane and owns
the lab's routing state (groups, their members and prefixes, learned host routes). The
server calls its public methods; the fabric monitor asks it through methods too, never
through its fields.
"""
from __future__ import annotations

import contextlib
import math
import time
import zlib
from dataclasses import dataclass, field

from dataplane import timescale
from dataplane.agent import protocol as proto
from dataplane.agent.flows import FLOW_SAMPLE_SHIFT
from dataplane.agent.pathtrace import FlowKey, trace
from dataplane.kernel.netns import in_netns
from dataplane.runtime.labspec import XDP_ATTACH_MODE, LabSpec
from dataplane.settings import merged
from dataplane.topology import routing
from dataplane.wire import pfc
from dataplane.xdp import abi
from dataplane.xdp.progtest import prog_test_run
from dataplane.xdp.switch import GroupState


# Emulated port model, lab-wide defaults: nominal (topology) speed x scale. Buffer and
# ECN thresholds are real bytes (a queue of N bytes drains in the same number of packet
# times at any scale); window_us is real-fabric time at the nominal speed, applied as
# window_us / scale of wall-clock time (dataplane.timescale), like every time below. queue "virtual" (default, the fast path):
# the model decides drops, ECN marks and load but does not delay frames -- so TCP, whose
# window cannot shrink below ~2 segments per (microsecond) RTT, cannot adapt to a port
# slower than what it offers, and paths differ in load but not in delay. The default
# scale (400G -> 10 Gb/s) is above what one machine's TCP reaches. queue "real": frames
# also wait in a shaper qdisc at the port's speed (dataplane.kernel.realqueue), so queueing
# delay, reordering across paths and TCP at slow ports are real (the skb path costs
# a few microseconds per hop, so it is for experiments, not for speed).
# ECN is RED-style (DCQCN's): ecn_bytes is Kmin, ecn_max_bytes Kmax (-1 or <= Kmin: one
# threshold, every ECT frame above Kmin marked), ecn_pmax the marking probability at Kmax.
# PFC (dataplane.wire.pfc, bpf/pfc.h): frames with pfc_dscp are the lossless priority
# pfc_priority; above xoff_bytes buffered from one ingress port the switch pauses that
# port's neighbour, at or below xon_bytes it resumes it; headroom_bytes above XOFF absorb
# what arrives before the pause takes effect. Pauses last pfc_quanta x 512 bit times at
# the nominal speed (real-fabric time). Needs the real queue: XDP cannot hold a frame.
# The PFC watchdog (hosts): a priority paused for pfc_watchdog_us without a break stops
# honouring pauses and is dropped for pfc_restore_us (real-fabric us, SONiC's 200 ms).
PORT_MODEL_DEFAULTS = {"scale": 1 / 40, "buffer_bytes": 32768, "ecn_bytes": 8192,
                       "window_us": 2.0, "queue": "virtual", "ecn_max_bytes": -1, "ecn_pmax": 1.0,
                       "pfc": "off", "xoff_bytes": 12288, "xon_bytes": 6144, "headroom_bytes": 8192,
                       "pfc_dscp": pfc.DEFAULT_LOSSLESS_DSCP, "pfc_priority": pfc.DEFAULT_LOSSLESS_PRIORITY,
                       "pfc_quanta": pfc.MAX_QUANTA, "pfc_watchdog_us": 200_000.0,
                       "pfc_restore_us": 200_000.0}
PFC_STATES = ("on", "off")
# Load-balancing times of a new group, real-fabric microseconds at the nominal speed: a
# flowlet ends after a 200 us gap (about 6,700 full frames at 400G), or 50 us while its
# member is busy. At scale 1/40 the lab waits 8 ms and 2 ms of wall-clock time for them.
LB_TIME_DEFAULTS = {"flowlet_timeout_us": 200.0, "busy_timeout_us": 50.0}
MAX_REAL_US = 1e6                 # a time constant longer than a real-fabric second is a typo
MAX_WALL_US = 4e6 - 1            # the data path keeps these times as u32 nanoseconds (< 4.29 s)
QUEUE_KINDS = ("virtual", "real")
MAX_BUFFER_BYTES = 256 << 20      # a real queue's tbf limit (2 x buffer) must fit 32 bits
MIN_PORT_BPS = 2000               # the data path keeps picoseconds per byte in 32 bits


@dataclass
class RoutingState:
    """The lab's routing state as programmed: one next-hop group per (switch, member
    interfaces), the prefixes routed over each group, and the learned /32 host routes.
    `generation` changes whenever groups or their prefixes do, so a reader can tell
    that what it derived from them is stale."""

    groups: dict[tuple[str, tuple[str, ...]], int] = field(default_factory=dict)
    members: dict[int, list[str]] = field(default_factory=dict)
    prefixes: dict[int, list[str]] = field(default_factory=dict)
    host_routes: dict[tuple[str, str], int] = field(default_factory=dict)
    generation: int = 0

    def members_of(self, gid: int) -> list[str]:
        """The member interfaces of group gid ([] for a group that does not exist)."""
        return self.members.get(gid, [])

    def every_group(self) -> list[tuple[str, int, tuple[str, ...]]]:
        """(switch, group id, member interfaces) of every group of the lab."""
        return [(owner, gid, members) for (owner, members), gid in self.groups.items()]

    def group_ids(self, switch: str) -> list[int]:
        return [gid for (owner, _), gid in self.groups.items() if owner == switch]

    def switch_groups(self, switch: str) -> list[tuple[int, tuple[str, ...]]]:
        """(group id, member interfaces) of every group of `switch`."""
        return [(gid, members) for (owner, members), gid in self.groups.items() if owner == switch]

    def group_prefixes(self, switch: str, gids=None) -> list[tuple[int, str]]:
        """(group id, prefix) for the given groups of `switch` (all of its groups when
        gids is None); a group of another switch is not `switch`'s and is left out."""
        own = self.group_ids(switch)
        wanted = own if gids is None else [g for g in gids if g in own]
        return [(gid, prefix) for gid in wanted for prefix in self.prefixes.get(gid, [])]

    def add_prefix(self, gid: int, prefix: str) -> None:
        self.prefixes[gid].append(prefix)
        self.generation += 1


class SwitchProgrammer:
    """Turns a LabSpec into map entries of a SwitchDataplane."""

    def __init__(self, spec: LabSpec, dataplane):
        self.spec = spec
        self.dp = dataplane
        self.routing = RoutingState()
        self.port_model = dict(PORT_MODEL_DEFAULTS)
        self.seeds: dict[str, int] = {}
        self.hash_fields: dict[str, list[str] | None] = {}
        self.lbn: dict[tuple[str, str], int] = {}
        self.speed_override: dict[int, int] = {}   # ifindex -> nominal b/s (fault "degrade")
        self._handoff_ports: set[int] = set()        # ifindexes with tc_handoff attached
        self.shapers: dict = {}                      # ifindex -> realqueue.ShaperParams set
        self.lb_times: dict[int, dict[str, float]] = {}   # gid -> LB_TIME_DEFAULTS' keys, real us
        self.pfc_sender = None                     # dataplane.agent.pfc.PfcSender while PFC is on
        self._towards: dict[str, tuple] = {}           # see _paths_towards

    # ------------------------------------------------------------ one clock
    def wall_us(self, real_us: float) -> float:
        """Real-fabric microseconds -> the wall-clock microseconds the lab applies at its
        scale, capped at what the data path's u32 nanoseconds hold (about 4.3 s)."""
        return min(timescale.wall_seconds(real_us * 1e-6, self.port_model["scale"]) * 1e6, MAX_WALL_US)

    def _write_lb_times(self, gid: int, **changes) -> None:
        """Record a group's real-fabric load-balancing times and write their wall values."""
        check_real_times(**changes)
        for key, value in changes.items():
            if value is not None:
                self.lb_times[gid][key] = float(value)
        times = self.lb_times[gid]
        self.dp.set_group_lb(gid, flowlet_timeout_us=self.wall_us(times["flowlet_timeout_us"]),
                             busy_timeout_us=self.wall_us(times["busy_timeout_us"]))

    def clock(self) -> dict:
        """The lab's clock: wall-clock seconds per real-fabric second, and the wall values
        of the port model's times (lb show, top and reports print both)."""
        return {"scale": self.port_model["scale"], "stretch": timescale.stretch(self.port_model["scale"]),
                "window_wall_us": self.wall_us(self.port_model["window_us"])}

    def seed_for(self, switch: str) -> int:
        return zlib.crc32(f"{self.spec.name}/{switch}".encode())

    def program(self) -> None:
        slot = 0  # counters live in arrays indexed by slot, shared by the whole lab
        for node in self.spec.switches:
            self.seeds[node.name] = self.seed_for(node.name)
            self.hash_fields[node.name] = None
            self.dp.set_switch(node.switch_id, hash_seed=self.seeds[node.name])
            for iface, lbn in zip(node.interfaces, self._auto_lbn(node)):
                slot += 1
                self.lbn[(node.name, iface.name)] = lbn
                self.dp.set_port(iface.ifindex, switch_id=node.switch_id, slot=slot,
                                 mac=iface.mac, lbn=lbn)
                if iface.address:
                    self.dp.add_address(node.switch_id, iface.ifindex, iface.address.split("/")[0])
        self.apply_port_model()
        self.dp.set_flow_visibility(True, FLOW_SAMPLE_SHIFT)
        for node in self.spec.switches:
            by_name = {i.name: i for i in node.interfaces}
            for route in self.spec.routes.get(node.name, []):
                gid = self._group(node.name, tuple(route.nexthops), by_name)
                self.routing.add_prefix(gid, route.prefix)
                self.dp.add_route(node.switch_id, route.prefix, gid)

    def _auto_lbn(self, node) -> list[int]:
        """LBN values in interface order: host-facing ports 0..k-1 first, then the others."""
        down = [i for i, peer in self.spec.neighbours(node) if peer.role == "host"]
        order = down + [i for i in node.interfaces if i not in down]
        value = {i.name: v for v, i in enumerate(order)}
        return [value[i.name] for i in node.interfaces]

    # ------------------------------------------------------------ port model
    def apply_port_model(self, **changes) -> dict:
        new = merged(self.port_model, changes, PORT_MODEL_DEFAULTS, "port-model")
        self._check_port_model(new)
        rescaled = new["scale"] != self.port_model["scale"]
        if self.pfc_sender is not None:     # it must not hold a qdisc being replaced
            self.pfc_sender.close()
            self.pfc_sender = None
        self.port_model = new
        for node in self.spec.switches:
            with self._queues(node) as queues:
                for iface in node.interfaces:
                    self._apply_port(iface, queues)
        if rescaled:       # the same real-fabric times are other wall-clock times now
            for gid in self.lb_times:
                self._write_lb_times(gid)
        self._apply_pfc()
        return dict(new)

    def _check_port_model(self, pm: dict) -> None:
        """Refuse settings some port could not take, before any port changes."""
        if pm["queue"] not in QUEUE_KINDS:
            raise ValueError(f"queue must be one of {', '.join(QUEUE_KINDS)}, not {pm['queue']!r}")
        if not (math.isfinite(pm["scale"]) and 0 <= pm["scale"] <= 1):
            raise ValueError("scale must be in [0, 1] (0 = no port model)")
        if not (math.isfinite(pm["window_us"]) and 0 < pm["window_us"] <= MAX_REAL_US):
            raise ValueError(f"window_us must be more than 0 and at most {MAX_REAL_US:,.0f} "
                             "(real-fabric microseconds)")
        if not 0 < pm["buffer_bytes"] <= MAX_BUFFER_BYTES:
            raise ValueError(f"buffer_bytes must be between 1 and {MAX_BUFFER_BYTES:,}")
        if not -1 <= pm["ecn_bytes"] <= MAX_BUFFER_BYTES:
            raise ValueError("ecn_bytes must be -1 (never mark) or between 0 and the buffer size")
        if pm["queue"] == "real" and self.spec.dataplane != "xdp":
            raise ValueError(f"a real queue needs native XDP (--dataplane xdp): this lab attaches "
                             f"in {self.spec.dataplane} mode, where frames handed up to a port's "
                             "shaper do not reach it")
        if pm["ecn_max_bytes"] > MAX_BUFFER_BYTES or (0 <= pm["ecn_max_bytes"] < pm["ecn_bytes"]):
            raise ValueError(f"ECN Kmax {pm['ecn_max_bytes']} B must not be below Kmin "
                             f"{pm['ecn_bytes']} B (-1 = one threshold at Kmin)")
        if not (math.isfinite(pm["ecn_pmax"]) and 0 < pm["ecn_pmax"] <= 1):
            raise ValueError(f"ECN Pmax {pm['ecn_pmax']} must be a probability above 0 and at most 1")
        self._check_pfc(pm)
        if pm["queue"] == "real" and pm["scale"] == 0:
            raise ValueError("a real queue needs the port model on (scale > 0)")
        if pm["scale"] > 0:
            slowest = min(self.speed_override.get(i.ifindex, i.speed_bps) * pm["scale"]
                          for n in self.spec.switches for i in n.interfaces)
            if slowest < MIN_PORT_BPS:
                raise ValueError(f"scale {pm['scale']:g} makes the slowest port {slowest:,.0f} b/s; "
                                 f"the port model emulates {MIN_PORT_BPS:,} b/s and up")

    def _check_pfc(self, pm: dict) -> None:
        if pm["pfc"] not in PFC_STATES:
            raise ValueError(f"pfc must be on or off, not {pm['pfc']!r}")
        if not 0 <= pm["pfc_priority"] <= 7 or pm["pfc_priority"] == pfc.DEFAULT_CNP_PRIORITY:
            raise ValueError(f"PFC priority {pm['pfc_priority']}: must be one of 0-7 other than "
                             f"{pfc.DEFAULT_CNP_PRIORITY} (CNPs)")
        if not 0 <= pm["pfc_dscp"] <= 63 or pm["pfc_dscp"] == pfc.DEFAULT_CNP_DSCP:
            raise ValueError(f"PFC DSCP {pm['pfc_dscp']}: must be 0-63 other than "
                             f"{pfc.DEFAULT_CNP_DSCP} (CNPs)")
        for key in ("pfc_watchdog_us", "pfc_restore_us"):
            if not (math.isfinite(pm[key]) and 0 <= pm[key] <= 10 * MAX_REAL_US):
                raise ValueError(f"{key} must be 0 (off) to {10 * MAX_REAL_US:,.0f} (real-fabric us)")
        if not 1 <= pm["pfc_quanta"] <= pfc.MAX_QUANTA:
            raise ValueError(f"PFC quanta {pm['pfc_quanta']}: must be 1-{pfc.MAX_QUANTA}")
        if pm["pfc"] == "off":
            return
        if pm["queue"] != "real":
            raise ValueError("PFC needs --queue real: a virtual queue cannot hold a paused "
                             "priority's frames (XDP forwards or drops at once)")
        if not 0 <= pm["xon_bytes"] <= pm["xoff_bytes"]:
            raise ValueError(f"XON {pm['xon_bytes']} B must be at most XOFF {pm['xoff_bytes']} B")
        frame = max((self._mtu(i) for n in self.spec.switches for i in n.interfaces), default=1500) + 18
        if pm["headroom_bytes"] < frame:
            raise ValueError(f"headroom {pm['headroom_bytes']} B is smaller than one frame ({frame} B)")
        if pm["xoff_bytes"] + pm["headroom_bytes"] > pm["buffer_bytes"] * 8:
            raise ValueError(f"XOFF + headroom ({pm['xoff_bytes'] + pm['headroom_bytes']} B) do not fit "
                             f"the port's share of the buffer (8 x {pm['buffer_bytes']} B)")

    @staticmethod
    def _mtu(iface) -> int:
        return int(getattr(iface, "mtu", 0) or 1500)

    def pause_wall_ns(self, iface, quanta: int) -> int:
        """Wall-clock ns that `quanta` pause quanta last on this port (nominal speed, scale)."""
        nominal = self.speed_override.get(iface.ifindex, iface.speed_bps)
        return int(pfc.quanta_wall_seconds(quanta, nominal, self.port_model["scale"]) * 1e9)

    def _apply_pfc(self) -> None:
        """PFC on or off in the data path, every port's account, and the sender thread."""
        pm = self.port_model
        on = pm["pfc"] == "on"
        self.dp.set_pfc(on=on, lossless_dscp=pm["pfc_dscp"], lossless_prio=pm["pfc_priority"])
        for node in self.spec.switches:
            for iface in node.interfaces:
                self.dp.set_pfc_port(iface.ifindex,
                                     limit_bytes=pm["xoff_bytes"] + pm["headroom_bytes"] if on else 0,
                                     ns_per_quantum=self.pause_wall_ns(iface, 1) or 1)
        if self.pfc_sender is not None:
            self.pfc_sender.close()
            self.pfc_sender = None
        if on:
            # deferred on purpose: agent.pfc imports realqueue (pyroute2, 0.5 s), only for PFC
            from dataplane.agent.pfc import PfcSender
            self.pfc_sender = PfcSender(self, {"xoff_bytes": pm["xoff_bytes"], "xon_bytes": pm["xon_bytes"],
                                               "quanta": pm["pfc_quanta"], "priority": pm["pfc_priority"]})
            self.pfc_sender.start()

    def _queues(self, node):
        """The real-queue (tc) side of node's ports, or a no-op context if neither the
        model nor any port of node needs it. A fresh netlink socket per use: pyroute2's
        IPRoute answers dumps only on the thread that opened it, and requests arrive on
        many threads."""
        if self.port_model["queue"] == "real" or any(i.ifindex in self._handoff_ports
                                                     for i in node.interfaces):
            # deferred on purpose: realqueue imports pyroute2 (0.5 s, several on a busy
            # machine), which the agent's start would otherwise wait for on every deploy
            from dataplane.kernel.realqueue import NamespaceQueues
            return NamespaceQueues(node.netns)
        return contextlib.nullcontext()

    def _apply_port(self, iface, queues) -> None:
        """One port's model. Turning a real queue on, the tc side comes first (a frame
        handed up before tc_handoff is there would reach the switch's IP stack and be
        lost); turning it off, the map first, then the tc side goes."""
        pm = self.port_model
        nominal = self.speed_override.get(iface.ifindex, iface.speed_bps)
        speed = int(nominal * pm["scale"])
        real = pm["queue"] == "real"
        if real:
            if iface.ifindex not in self._handoff_ports:
                queues.attach(iface.ifindex, self.dp.handoff_prog_fd)
                self._handoff_ports.add(iface.ifindex)
            self.shapers[iface.ifindex] = queues.shape(iface.ifindex, speed,
                                                       pm["buffer_bytes"] + self._pfc_room(pm),
                                                       classes=pm["pfc"] == "on")
        self.dp.set_port_model(iface.ifindex, speed_bps=speed, buffer_bytes=pm["buffer_bytes"],
                               ecn_bytes=pm["ecn_bytes"] if pm["ecn_bytes"] >= 0 else None,
                               window_us=self.wall_us(pm["window_us"]), real_queue=real,
                               ecn_max_bytes=pm["ecn_max_bytes"] if pm["ecn_max_bytes"] >= 0 else None,
                               ecn_pmax=pm["ecn_pmax"])
        if not real and iface.ifindex in self._handoff_ports:
            self.shapers.pop(iface.ifindex, None)
            queues.detach(iface.ifindex)
            self._handoff_ports.discard(iface.ifindex)

    def _pfc_room(self, pm: dict) -> int:
        """Bytes a real queue must hold beyond the buffer while PFC is on: lossless frames
        are never tail-dropped, each ingress port of a switch may park XOFF + headroom."""
        if pm["pfc"] != "on":
            return 0
        most_ports = max(len(n.interfaces) for n in self.spec.switches)
        return most_ports * (pm["xoff_bytes"] + pm["headroom_bytes"])

    def port_speed(self, switch: str, port: str, speed_bps: int | None = None) -> dict:
        """Fault 'degrade': give one port a lower nominal speed (scaled like every port by
        the lab's port-model scale); speed_bps None restores the topology's speed."""
        node = self.select(switch, None)[0]
        iface = node.interface(port)
        if speed_bps is None:
            self.speed_override.pop(iface.ifindex, None)
        else:
            speed_bps = int(speed_bps)
            if not 0 < speed_bps <= iface.speed_bps:
                raise ValueError(f"degrade {node.name}:{port}: speed must be more than 0 and at most "
                                 f"the port's {iface.speed_bps:,} b/s")
            scale = self.port_model["scale"]
            if scale and speed_bps * scale < MIN_PORT_BPS:
                raise ValueError(f"degrade {node.name}:{port}: {speed_bps:,} b/s x the port model's "
                                 f"scale {scale:g} is below the {MIN_PORT_BPS:,} b/s it emulates")
            self.speed_override[iface.ifindex] = speed_bps
        with self._queues(node) as queues:
            self._apply_port(iface, queues)
        model = self.dp.port_model(iface.ifindex) or {}
        return {"switch": node.name, "port": port, "nominal_speed_bps": iface.speed_bps,
                "degraded_to_bps": self.speed_override.get(iface.ifindex),
                "speed_bps": model.get("speed_bps", 0), "t_ns": time.monotonic_ns()}

    # ------------------------------------------------------------ learned hosts
    def _paths_towards(self, leaf: str):
        """(switch -> (node, its interfaces by name), next hops towards leaf), computed once
        per leaf: the switch graph is the spec's, and a large lab learns thousands of hosts
        per leaf at start."""
        cached = self._towards.get(leaf)
        if cached is None:
            nodes = {n.name: (n, {i.name: i for i in n.interfaces}) for n in self.spec.switches}
            graph = {n.name: [(i.peer_node, i.name) for i in n.interfaces if i.peer_node in nodes]
                     for n in self.spec.switches}
            cached = self._towards[leaf] = (nodes, routing.nexthops_towards(graph, [leaf]))
        return cached

    def install_host_route(self, leaf, iface, ip: str) -> list[str]:
        """ARP-to-host-route: a host learned on leaf:iface becomes a /32 on the leaf (out of
        that port) and on every switch of the leaf's plane (shortest paths towards the leaf,
        by the controller's next-hop rule), like a leaf advertising it across its plane.
        Returns the switches programmed."""
        prefix = f"{ip}/32"
        nodes, towards = self._paths_towards(leaf.name)
        done = []
        for name, edges in towards.items():
            node, by_name = nodes[name]
            hops = (iface.name,) if name == leaf.name else tuple(e[1] for e in edges)
            gid = self._group(name, hops, by_name)
            self.dp.add_route(node.switch_id, prefix, gid)
            self.routing.host_routes[(name, prefix)] = gid
            done.append(name)
        return done

    # ------------------------------------------------------------ load balancing
    def select(self, switch: str | None, role: str | None) -> list:
        return self.spec.select_switches(switch, role)

    def lb_set(self, switch: str | None = None, role: str | None = None, mode: str | None = None,
               seed=None, hash_fields=None, flowlet_timeout_us=None, busy_util=None,
               busy_timeout_us=None, weights=None, bandwidth: bool = False, lbn=None) -> dict:
        """Change load balancing of every group of the selected switches at run time.

        seed: int, or "auto" (the per-switch default). weights: list (member order) or
        {interface: weight}; bandwidth: weights = members' nominal link speeds (FGLB
        bandwidth mode; implies mode wcmp unless a mode is given). lbn: "auto" or
        {interface: value} for this switch's ingress ports."""
        nodes = self.select(switch, role)
        if bandwidth and weights is not None:
            raise ValueError("give weights or bandwidth, not both")
        if bandwidth and mode is None:
            mode = "wcmp"
        self._check_lb_request(nodes, switch, seed, weights, lbn)
        check_real_times(flowlet_timeout_us=flowlet_timeout_us, busy_timeout_us=busy_timeout_us)
        changed = []
        for node in nodes:
            by_name = {i.name: i for i in node.interfaces}
            if seed is not None or hash_fields is not None:
                if seed is not None:
                    self.seeds[node.name] = self.seed_for(node.name) if seed == "auto" else int(seed)
                if hash_fields is not None:
                    self.hash_fields[node.name] = list(hash_fields) or None
                self.dp.set_switch(node.switch_id, hash_seed=self.seeds[node.name],
                                   hash_fields=self.hash_fields[node.name])
            if lbn is not None:
                values = dict(zip([i.name for i in node.interfaces], self._auto_lbn(node))) \
                    if lbn == "auto" else {k: int(v) for k, v in lbn.items()}
                self._set_lbn(node, values, strict=switch is not None)
            for gid, members in self.routing.switch_groups(node.name):
                w = None
                if bandwidth:
                    w = [by_name[m].speed_bps for m in members]
                elif isinstance(weights, dict):
                    w = [float(weights.get(m, 1)) for m in members]
                elif weights is not None:
                    if len(weights) != len(members):
                        continue   # a weight list applies to groups of that many members
                    w = [float(x) for x in weights]
                self.dp.set_group_lb(gid, mode=mode, busy_util=busy_util, weights=w)
                self._write_lb_times(gid, flowlet_timeout_us=flowlet_timeout_us,
                                     busy_timeout_us=busy_timeout_us)
                changed.append(gid)
        if mode is not None:
            # a mode set starts balancing afresh: no flowlet (and its count, which seeds
            # the next flowlet's choice) carries over from the mode before, so a run
            # repeats the choices of the run before it with the same flows
            self.dp.forget_flowlets(changed)
        return {"switches": [n.name for n in nodes], "groups": changed}

    def _set_lbn(self, node, values: dict[str, int], strict: bool = True) -> None:
        by_name = {i.name: i for i in node.interfaces}
        for name, value in values.items():
            iface = by_name.get(name)
            if iface is None:
                if not strict:
                    continue
                raise ValueError(f"{node.name} has no interface {name!r}")
            port = self.dp.port_info(iface.ifindex)
            self.dp.set_port(iface.ifindex, switch_id=node.switch_id, slot=port.slot,
                             mac=iface.mac, lbn=value, speed_bps=port.speed_bps)
            self.lbn[(node.name, name)] = value

    def lb_restore(self, snapshot: dict) -> dict:
        """Give the switches back the load balancing an lb_show() reply recorded: per
        switch its hash seed, hash fields and ports' LBN values; per group its mode, hash
        fields, flowlet and busy parameters and weights. A group made since the snapshot
        (a learned host route) gets a new group's settings."""
        new = GroupState(members=[])
        fresh = {"mode": abi.LB_MODE_NAMES[new.mode], "hash_fields": new.hash_fields,
                 "busy_util": new.busy_util, "weights": new.weights, **LB_TIME_DEFAULTS}
        switches = snapshot["switches"]
        nodes = [self.select(name, None)[0] for name in switches]
        for node in nodes:
            saved = switches[node.name]
            self.seeds[node.name] = int(saved["hash_seed"])
            self.hash_fields[node.name] = list(saved["hash_fields"]) if saved["hash_fields"] else None
            self.dp.set_switch(node.switch_id, hash_seed=self.seeds[node.name],
                               hash_fields=self.hash_fields[node.name])
            self._set_lbn(node, {port: int(p["lbn"]) for port, p in saved["ports"].items()
                                 if int(p["lbn"]) != self.lbn.get((node.name, port))})
            for gid in self.routing.group_ids(node.name):
                g = saved["groups"].get(str(gid)) or fresh
                self.dp.set_group_lb(gid, mode=g["mode"], hash_fields=g["hash_fields"] or 0,
                                     busy_util=g["busy_util"], weights=g["weights"],
                                     clear_weights=g["weights"] is None)
                self._write_lb_times(gid, flowlet_timeout_us=g["flowlet_timeout_us"],
                                     busy_timeout_us=g["busy_timeout_us"])
        return {"switches": [n.name for n in nodes]}

    def _check_lb_request(self, nodes, switch, seed, weights, lbn) -> None:
        """Refuse a request that could only be applied in part, before changing anything."""
        if seed not in (None, "auto") and not 0 <= int(seed) < 2**32:
            raise ValueError(f"seed {seed} is not between 0 and 2^32-1")
        names = {i.name for n in nodes for i in n.interfaces}
        if isinstance(lbn, dict):
            unknown = sorted(set(lbn) - names)
            if unknown and switch is not None:
                raise ValueError(f"{switch} has no interface {', '.join(unknown)}")
            if any(int(v) < 0 for v in lbn.values()):
                raise ValueError("LBN values are 0 or more")
        if isinstance(weights, dict):
            unknown = sorted(set(weights) - names)
            if unknown:
                raise ValueError(f"weights name interfaces the switches do not have: {', '.join(unknown)}")
        elif weights is not None:
            sizes = {len(members) for (owner, members) in self.routing.groups
                     if owner in {n.name for n in nodes}}
            if len(weights) not in sizes:
                raise ValueError(f"{len(weights)} weights given; the groups of "
                                 f"{', '.join(n.name for n in nodes)} have "
                                 f"{' or '.join(map(str, sorted(sizes)))} members")

    def lb_show(self) -> dict:
        out = {"port_model": dict(self.port_model), "clock": self.clock(), "switches": {}}
        for node in self.spec.switches:
            groups = {}
            for gid, members in self.routing.switch_groups(node.name):
                info = self.dp.group_info(gid)
                for key, real in self.lb_times.get(gid, {}).items():   # real, and what the lab waits
                    info[key.replace("_us", "_wall_us")] = info[key]
                    info[key] = real
                info["members"] = list(members)
                info["prefixes"] = self.routing.prefixes.get(gid, [])
                groups[str(gid)] = info
            ports = {}
            for i in node.interfaces:
                model = self.dp.port_model(i.ifindex) or {}
                ports[i.name] = {"lbn": self.lbn.get((node.name, i.name), 0),
                                 "nominal_speed_bps": i.speed_bps,
                                 "speed_bps": model.get("speed_bps", 0), "peer": i.peer}
            out["switches"][node.name] = {
                "role": node.role, "switch_id": node.switch_id,
                "hash_seed": self.seeds.get(node.name), "hash_fields": self.hash_fields.get(node.name),
                "groups": groups, "ports": ports}
        return out

    # ------------------------------------------------------------ traffic matrix
    def _tm_args(self, switch: str, flow: dict) -> tuple:
        node = self.select(switch, None)[0]
        five = {k: flow[k] for k in ("src", "dst")}
        five.update(sport=int(flow.get("sport", 0)), dport=int(flow.get("dport", 0)),
                    proto=flow.get("proto", "udp"))
        for key in ("sport", "dport"):
            if not 0 <= five[key] <= 65535:
                raise ValueError(f"{key} {five[key]} is not a port number (0-65535)")
        if five["proto"] not in ("udp", "tcp", 6, 17) and (five["sport"] or five["dport"]):
            raise ValueError(f"protocol {five['proto']} has no ports: leave sport and dport at 0")
        return node, five

    def tm_add(self, switch: str, egress: str, **flow) -> dict:
        node, five = self._tm_args(switch, flow)
        if egress not in {i.name for i in node.interfaces}:
            raise ValueError(f"{node.name} has no interface {egress!r}; its interfaces: "
                             f"{', '.join(i.name for i in node.interfaces)}")
        iface = node.interface(egress)
        self.dp.tm_add(node.switch_id, **five, egress_ifindex=iface.ifindex, dmac=iface.peer_mac)
        return {"switch": node.name, **five, "egress": egress}

    def tm_del(self, switch: str, **flow) -> dict:
        node, five = self._tm_args(switch, flow)
        return {"deleted": self.dp.tm_del(node.switch_id, **five)}

    def tm_list(self, switch: str | None = None) -> list[dict]:
        out = []
        for node in self.select(switch, None):
            names = {i.ifindex: i.name for i in node.interfaces}
            for e in self.dp.tm_list(node.switch_id):
                e = dict(e)
                e.pop("switch_id")
                e["egress"] = names.get(e.pop("egress_ifindex"))
                out.append({"switch": node.name, **e})
        return out

    def _group(self, switch: str, nexthops: tuple[str, ...], by_name) -> int:
        key = (switch, nexthops)
        rs = self.routing
        gid = rs.groups.get(key)
        if gid is None:
            gid = len(rs.groups) + 1
            rs.groups[key] = gid
            rs.members[gid] = list(nexthops)
            rs.prefixes[gid] = []
            rs.generation += 1
            self.dp.set_group(gid, [(by_name[n].ifindex, by_name[n].peer_mac) for n in nexthops])
            self.lb_times[gid] = dict(LB_TIME_DEFAULTS)
            self._write_lb_times(gid)
        return gid

    def attach(self, attach_ports) -> None:
        """XDP on every switch port (in the lab's dataplane mode): attach_ports(netns,
        ifindexes, prog_fd, mode=...) once per switch."""
        mode = XDP_ATTACH_MODE[self.spec.dataplane]
        for node in self.spec.switches:
            attach_ports(node.netns, [i.ifindex for i in node.interfaces], self.dp.prog_fd, mode=mode)

    def trace(self, flow: dict) -> dict:
        """The path the data plane picks for one flow (see dataplane.agent.pathtrace)."""
        return trace(self.spec, FlowKey(**flow),
                     lambda netns, frame, ifindex: _run_frame(self.dp.prog_fd, netns, frame, ifindex))

    def counters(self, switch: str | None = None) -> dict:
        if switch is not None:
            self.select(switch, None)      # an unknown switch is an error, not an empty answer
        started = time.monotonic_ns()
        result: dict = {"switches": {}}
        nodes = [n for n in self.spec.switches if switch in (None, n.name)]
        ifindexes = [i.ifindex for n in nodes for i in n.interfaces]
        # every port's and group's counters in a few batch reads, not one read each
        counters = self.dp.ports_counters(ifindexes)
        pfc_states = self.dp.pfc_ports_state(ifindexes) if self.port_model["pfc"] == "on" else {}
        member_counts = self.dp.groups_member_counters(
            [gid for (owner, _), gid in self.routing.groups.items() if switch in (None, owner)])
        for node in nodes:
            ports = {}
            shapers = {}
            if any(i.ifindex in self._handoff_ports for i in node.interfaces):
                with self._queues(node) as queues:
                    shapers = queues.stats()
            for i in node.interfaces:
                c = counters[i.ifindex]
                if i.ifindex in shapers:   # real queue: what waits in the port's qdisc now
                    c["shaper"] = shapers[i.ifindex]
                model = self.dp.port_model(i.ifindex) or {}
                c["speed_bps"] = model.get("speed_bps", 0)       # emulated (scaled)
                c["nominal_speed_bps"] = i.speed_bps
                c["pfc"] = self.pfc_counters(i, pfc_states.get(i.ifindex))
                ports[i.name] = c
            groups = {}
            for gid, members in self.routing.switch_groups(node.name):
                per_member = member_counts[gid]
                groups[str(gid)] = {
                    "mode": self.dp.group_info(gid)["mode"],
                    "prefixes": self.routing.prefixes.get(gid, []),
                    "members": [dict(interface=m, **c) for m, c in zip(members, per_member)],
                }
            result["switches"][node.name] = {"ports": ports, "groups": groups}
        # lab-wide: every XDP verdict, and drops by reason over all ports -- including
        # frames dropped before any port is known (unknown_port), counted only here
        result["verdicts"] = self.dp.verdict_counters()
        result["drops"] = self.dp.drop_counters()
        # when the counters were read (CLOCK_MONOTONIC, as the caller's time.monotonic_ns):
        # the middle of the read, which can take long on a busy machine
        result["t_ns"] = (started + time.monotonic_ns()) // 2
        result["clock"] = self.clock()
        return result

    def port_load(self, switch: str | None = None) -> dict:
        """The port_load reply (protocol.LOAD_FIELDS): per switch port the totals and states
        a live view draws, and per switch its groups' modes. The same numbers as counters
        and port_states, without what a view does not draw (per-reason drops, group member
        counters, PFC details): it answers a 56-node lab's poll in a few ms."""
        if switch is not None:
            self.select(switch, None)
        started = time.monotonic_ns()
        pfc = self.pfc_sender if self.port_model["pfc"] == "on" else None
        out: dict = {"fields": list(proto.LOAD_FIELDS), "switches": {}}
        modes: dict[str, set] = {}
        for (owner, _), gid in self.routing.groups.items():
            if switch in (None, owner):
                modes.setdefault(owner, set()).add(self.dp.group_mode(gid))
        nodes = [n for n in self.spec.switches if switch in (None, n.name)]
        loads = self.dp.port_loads([i.ifindex for n in nodes for i in n.interfaces])   # one read for all
        for node in nodes:
            shapers = {}
            if any(i.ifindex in self._handoff_ports for i in node.interfaces):
                with self._queues(node) as queues:
                    shapers = queues.stats()
            ports = {}
            for i in node.interfaces:
                tx, rx, ecn, drops, backlog = loads[i.ifindex]
                speed = (self.dp.port_model(i.ifindex) or {}).get("speed_bps", 0)
                if i.ifindex in shapers:
                    queue = int(shapers[i.ifindex].get("backlog_bytes", 0))
                else:
                    queue = backlog if speed else 0
                sent = (pfc.port_counters(i.ifindex) if pfc is not None else None) or {}
                ports[i.name] = [tx, rx, ecn, drops, speed or i.speed_bps, queue, sent.get("paused_sent_ns", 0),
                                 int(bool(sent.get("pausing"))), int(self.dp.port_is_up(i.ifindex))]
            out["switches"][node.name] = {"ports": ports, "modes": sorted(modes.get(node.name, ()))}
        out["t_ns"] = (started + time.monotonic_ns()) // 2
        return out

    def pfc_counters(self, iface, state: dict | None = None) -> dict:
        """Per port, for the lossless priority: pause frames sent (XOFF and XON) and time
        spent pausing the neighbour (wall and real ns), frames received from it and time
        spent holding the priority for it (wall and real ns), headroom used (peak account
        above XOFF), headroom drops. Empty while PFC is off. state: the port's
        pfc_port_state, if already read."""
        if self.port_model["pfc"] != "on":
            return {}
        st = state if state is not None else self.dp.pfc_port_state(iface.ifindex)
        sent = self.pfc_sender.port_counters(iface.ifindex) if self.pfc_sender else {}
        wall = sent.get("paused_sent_ns", 0)
        return {"priority": self.port_model["pfc_priority"],
                "pause_frames_sent": sent.get("pause_frames_sent", 0), "xon_sent": sent.get("xon_sent", 0),
                "pausing": bool(sent.get("pausing")), "paused_ns": wall,
                "paused_real_ns": int(timescale.real_seconds(wall, self.port_model["scale"])),
                "pause_frames_received": st.get("pause_rx", 0),
                "holding": bool(sent.get("holding")), "holds": sent.get("holds", 0),
                "held_ns": sent.get("held_ns", 0),
                "held_real_ns": int(timescale.real_seconds(sent.get("held_ns", 0), self.port_model["scale"])),
                "occupancy_bytes": st.get("occupancy_bytes", 0),
                "headroom_used_bytes": max(0, st.get("peak_bytes", 0) - self.port_model["xoff_bytes"]),
                "headroom_drops": st.get("headroom_drops", 0)}

    def switch_reset(self, switch: str) -> dict:
        """Forget the switch's run-time state (as a reboot would); see reset_switch_state."""
        node = self.select(switch, None)[0]
        return self.dp.reset_switch_state(node.switch_id)

    def port_states(self, switch: str | None = None) -> dict:
        return {n.name: {i.name: self.dp.port_is_up(i.ifindex) for i in n.interfaces}
                for n in self.spec.switches if switch in (None, n.name)}


def check_real_times(**times) -> None:
    """Refuse a real-fabric time (microseconds) that is not a positive number up to a second."""
    for key, value in times.items():
        if value is not None and not (math.isfinite(float(value)) and 0 < float(value) <= MAX_REAL_US):
            raise ValueError(f"{key} must be more than 0 and at most {MAX_REAL_US:,.0f} us "
                             "(real-fabric time at the nominal port speed)")


def _run_frame(prog_fd: int, netns: str, frame: bytes, ifindex: int) -> tuple[int, bytes]:
    # The ingress device is looked up in the caller's namespace: the switch's.
    with in_netns(netns):
        result = prog_test_run(prog_fd, frame, ingress_ifindex=ifindex)
    if result.verdict == "pass" and abi.handoff_in(result.meta):
        return abi.RL_VERDICT_QUEUED, result.data      # forwarded, through a real queue
    return result.retval, result.data


