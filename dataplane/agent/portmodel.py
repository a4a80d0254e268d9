"""The emulated port model of a lab's switch ports: speed, buffer, ECN, the real queue
(tc) and PFC, and the lab's one clock (real-fabric time -> wall time at the model's scale).
A part of the agent's programmer (dataplane.agent.programmer)."""
from __future__ import annotations

import contextlib
import math
import time
from typing import Callable

from dataplane import timescale
from dataplane.settings import merged
from dataplane.wire import pfc


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
MAX_REAL_US = 1e6                 # a time constant longer than a real-fabric second is a typo
MAX_WALL_US = 4e6 - 1            # the data path keeps these times as u32 nanoseconds (< 4.29 s)
QUEUE_KINDS = ("virtual", "real")
MAX_BUFFER_BYTES = 256 << 20      # a real queue's tbf limit (2 x buffer) must fit 32 bits
MIN_PORT_BPS = 2000               # the data path keeps picoseconds per byte in 32 bits


class PortModel:
    """Every switch port's model, as one lab-wide setting (`port_model`) with per-port
    speed overrides (fault "degrade"), and the real queues and PFC sender behind it."""

    def __init__(self, spec, dataplane, on_rescale: Callable[[], None]):
        self.spec = spec
        self.dp = dataplane
        self.port_model = dict(PORT_MODEL_DEFAULTS)
        self.speed_override: dict[int, int] = {}   # ifindex -> nominal b/s (fault "degrade")
        self.handoff_ports: set[int] = set()         # ifindexes with tc_handoff attached
        self.shapers: dict = {}                      # ifindex -> realqueue.ShaperParams set
        self.pfc_sender = None                     # dataplane.agent.pfc.PfcSender while PFC is on
        self._on_rescale = on_rescale              # the times written at the old scale change

    def wall_us(self, real_us: float) -> float:
        """Real-fabric microseconds -> the wall-clock microseconds the lab applies at its
        scale, capped at what the data path's u32 nanoseconds hold (about 4.3 s)."""
        return min(timescale.wall_seconds(real_us * 1e-6, self.port_model["scale"]) * 1e6, MAX_WALL_US)

    def clock(self) -> dict:
        """The lab's clock: wall-clock seconds per real-fabric second, and the wall values
        of the port model's times (lb show, top and reports print both)."""
        return {"scale": self.port_model["scale"], "stretch": timescale.stretch(self.port_model["scale"]),
                "window_wall_us": self.wall_us(self.port_model["window_us"])}

    def apply(self, **changes) -> dict:
        """Change the port model (only what `changes` names) on every switch port."""
        new = merged(self.port_model, changes, PORT_MODEL_DEFAULTS, "port-model")
        self._check_port_model(new)
        rescaled = new["scale"] != self.port_model["scale"]
        if self.pfc_sender is not None:     # it must not hold a qdisc being replaced
            self.pfc_sender.close()
            self.pfc_sender = None
        self.port_model = new
        for node in self.spec.switches:
            with self.queues(node) as queues:
                for iface in node.interfaces:
                    self._apply_port(iface, queues)
        if rescaled:       # the same real-fabric times are other wall-clock times now
            self._on_rescale()
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

    def queues(self, node):
        """The real-queue (tc) side of node's ports, or a no-op context if neither the
        model nor any port of node needs it. A fresh netlink socket per use: pyroute2's
        IPRoute answers dumps only on the thread that opened it, and requests arrive on
        many threads."""
        if self.port_model["queue"] == "real" or any(i.ifindex in self.handoff_ports
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
            if iface.ifindex not in self.handoff_ports:
                queues.attach(iface.ifindex, self.dp.handoff_prog_fd)
                self.handoff_ports.add(iface.ifindex)
            self.shapers[iface.ifindex] = queues.shape(iface.ifindex, speed,
                                                       pm["buffer_bytes"] + self._pfc_room(pm),
                                                       classes=pm["pfc"] == "on")
        self.dp.set_port_model(iface.ifindex, speed_bps=speed, buffer_bytes=pm["buffer_bytes"],
                               ecn_bytes=pm["ecn_bytes"] if pm["ecn_bytes"] >= 0 else None,
                               window_us=self.wall_us(pm["window_us"]), real_queue=real,
                               ecn_max_bytes=pm["ecn_max_bytes"] if pm["ecn_max_bytes"] >= 0 else None,
                               ecn_pmax=pm["ecn_pmax"])
        if not real and iface.ifindex in self.handoff_ports:
            self.shapers.pop(iface.ifindex, None)
            queues.detach(iface.ifindex)
            self.handoff_ports.discard(iface.ifindex)

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
        node = self.spec.select_switches(switch, None)[0]
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
        with self.queues(node) as queues:
            self._apply_port(iface, queues)
        model = self.dp.port_model(iface.ifindex) or {}
        return {"switch": node.name, "port": port, "nominal_speed_bps": iface.speed_bps,
                "degraded_to_bps": self.speed_override.get(iface.ifindex),
                "speed_bps": model.get("speed_bps", 0), "t_ns": time.monotonic_ns()}

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


def check_real_times(**times) -> None:
    """Refuse a real-fabric time (microseconds) that is not a positive number up to a second."""
    for key, value in times.items():
        if value is not None and not (math.isfinite(float(value)) and 0 < float(value) <= MAX_REAL_US):
            raise ValueError(f"{key} must be more than 0 and at most {MAX_REAL_US:,.0f} us "
                             "(real-fabric time at the nominal port speed)")
