"""The egress port model and PFC: `port_queue` (speed, buffer, ECN thresholds,
utilisation window, virtual or real queue) and `pfc_cfg` / `pfc_port` (lossless
priority, ingress accounts, pause times), and the queue and pause state read back.

Owns SwitchDataplane._port_model and _pfc_prio."""
from __future__ import annotations

import ctypes as ct
import time

from dataplane.xdp import abi
from dataplane.xdp.bpfio import BPF_F_LOCK


class PortModelTables:
    """Emulated egress ports (speed, buffer, ECN) and PFC.

    A part of SwitchDataplane (dataplane.xdp.switch): it uses the class's maps,
    shadow state and range checks."""

    def set_port_model(self, ifindex: int, *, speed_bps: int, buffer_bytes: int = 32768,
                       ecn_bytes: int | None = 8192, window_us: float = 1000.0,
                       real_queue: bool = False, ecn_max_bytes: int | None = None,
                       ecn_pmax: float = 1.0) -> None:
        """Emulate an egress port: speed_bps (already scaled), a tail-drop buffer of
        buffer_bytes, CE marking of ECT frames while the backlog exceeds ecn_bytes (None =
        never) -- RED-style if ecn_max_bytes is above it: probability rising from 0 at
        ecn_bytes (Kmin) to ecn_pmax at ecn_max_bytes (Kmax), every frame above Kmax (None
        or <= Kmin: a step at Kmin) --, utilisation averaged over window_us windows
        (wall-clock time). speed_bps 0 = no model
        (unlimited, no queue). The queue is virtual: frames are not delayed -- unless
        real_queue, which hands them to tc_handoff and the port's shaper qdisc instead of
        redirecting them (the caller sets those up first, see dataplane.kernel.realqueue)."""
        port = self.port_info(ifindex)
        if speed_bps < 0 or buffer_bytes <= 0 or window_us <= 0:
            raise ValueError("speed_bps >= 0, buffer_bytes > 0, window_us > 0")
        ps_per_byte = round(8e12 / speed_bps) if speed_bps else 0
        if ps_per_byte >= 2**32:
            raise ValueError(f"speed {speed_bps} b/s is too slow to emulate (< 2 kb/s)")
        key = ct.c_uint32(port.slot)
        q = abi.PortQueue()          # (re)configuring starts from an empty, idle queue
        q.ps_per_byte = ps_per_byte
        q.buf_ns = buffer_bytes * ps_per_byte // 1000
        q.ecn_ns = (2**64 - 1) if ecn_bytes is None else ecn_bytes * ps_per_byte // 1000
        if not 0 <= ecn_pmax <= 1:
            raise ValueError(f"ECN Pmax {ecn_pmax} is not a probability (0..1)")
        if ecn_bytes is not None and ecn_max_bytes is not None and ecn_max_bytes > ecn_bytes:
            q.ecn_max_ns = ecn_max_bytes * ps_per_byte // 1000
            q.ecn_pmax = round(ecn_pmax * abi.ECN_P_ONE)
        q.win_ns = min(int(window_us * 1000), 2**32 - 1)
        if real_queue:
            if not speed_bps:
                raise ValueError("a real queue needs a port speed (speed_bps > 0)")
            q.flags = abi.QUEUE_F_REAL
        self.maps.update("port_queue", key, q, flags=BPF_F_LOCK)
        port.speed_bps = speed_bps
        self._write_port(ifindex, port)
        self._port_model[ifindex] = {"speed_bps": speed_bps, "buffer_bytes": buffer_bytes,
                                     "ecn_bytes": ecn_bytes, "window_us": window_us,
                                     "real_queue": real_queue, "ecn_max_bytes": ecn_max_bytes,
                                     "ecn_pmax": ecn_pmax}

    def port_model(self, ifindex: int) -> dict | None:
        return self._port_model.get(ifindex)

    def port_queue_state(self, ifindex: int) -> dict:
        """queue_bytes (virtual backlog now), utilization (0..1, EWMA; 0 when stale)."""
        port = self.port_info(ifindex)
        q = abi.PortQueue()
        if not self.maps.lookup("port_queue", ct.c_uint32(port.slot), q):
            return {"queue_bytes": 0, "utilization": 0.0}
        return self._queue_state_of(q, time.monotonic_ns())   # bpf_ktime_get_ns() is CLOCK_MONOTONIC

    @staticmethod
    def _queue_state_of(q: "abi.PortQueue", now: int) -> dict:
        if not q.ps_per_byte:
            return {"queue_bytes": 0, "utilization": 0.0}
        backlog_ns = max(q.t_free - now, 0)
        stale = now - q.win_start > 4 * q.win_ns
        return {"queue_bytes": backlog_ns * 1000 // q.ps_per_byte,
                "utilization": 0.0 if stale else q.util / abi.UTIL_ONE}

    def set_pfc(self, *, on: bool, lossless_dscp: int = 26, lossless_prio: int = 3) -> None:
        """Lab-wide PFC: frames with lossless_dscp are the lossless priority (accounted at
        their ingress port, never tail-dropped by an egress queue) while on."""
        cfg = abi.PfcCfg(flags=abi.PFC_F_ON if on else 0, lossless_dscp=lossless_dscp,
                         lossless_prio=lossless_prio)
        self.maps.update("pfc_cfg", ct.c_uint32(0), cfg)
        self._pfc_prio = lossless_prio

    def set_pfc_port(self, ifindex: int, *, limit_bytes: int, ns_per_quantum: int) -> None:
        """An ingress port's PFC account: a lossless frame beyond limit_bytes (XOFF +
        headroom; 0 = no accounting) is dropped; ns_per_quantum: wall ns of one pause
        quantum it receives. Resets the account and the pause times."""
        port = self.port_info(ifindex)
        pp = abi.PfcPort(limit_bytes=min(int(limit_bytes), 2**32 - 1), ns_per_quantum=int(ns_per_quantum))
        self.maps.update("pfc_port", ct.c_uint32(port.slot), pp)

    def pfc_port(self, ifindex: int) -> "abi.PfcPort | None":
        """The raw PFC account of a port (bpf/pfc.h), or None."""
        pp = abi.PfcPort()
        if not self.maps.lookup("pfc_port", ct.c_uint32(self.port_info(ifindex).slot), pp):
            return None
        return pp

    def pfc_ports(self, ifindexes) -> dict[int, "abi.PfcPort"]:
        """The raw PFC accounts of many ports in one batch lookup (the agent's PFC thread
        reads every port's account every poll: one system call, not one a port)."""
        slots = {ifx: self.port_info(ifx).slot for ifx in ifindexes}
        if not slots:
            return {}
        accounts = self.maps.array_values("pfc_port", max(slots.values()) + 1, abi.PfcPort)
        return {ifx: accounts[slot] for ifx, slot in slots.items()}

    def pfc_accounts(self, count: int):
        """The raw PFC accounts of slots 0..count-1 in one batch lookup, indexed by slot
        (the agent's PFC thread, whose poll is PFC's reaction time, resolves the slots of
        its ports once)."""
        return self.maps.array_values("pfc_port", count, abi.PfcPort)

    @staticmethod
    def pfc_occupancy_of(pp: "abi.PfcPort", now: int, still_held) -> int:
        """Lossless bytes of an ingress account still waiting in egress queues at `now`:
        entries whose departure time is ahead, and entries held by a pause on an egress
        slot for which still_held(slot) is true."""
        if not pp.bytes:
            return 0
        if pp.head - pp.tail > abi.PFC_RING:
            return pp.bytes
        waiting = 0
        for i in range(pp.tail, pp.head):
            t_dep = pp.t_dep[i % abi.PFC_RING]
            if (still_held(t_dep & 0xFFFFFFFF) if t_dep & abi.PFC_HELD else t_dep > now):
                waiting += pp.len[i % abi.PFC_RING]
        return waiting

    def pfc_paused(self, slot: int, now: int) -> bool:
        """Whether the neighbour of port `slot` pauses its lossless priority at `now`."""
        pp = abi.PfcPort()
        if not self.maps.lookup("pfc_port", ct.c_uint32(slot), pp):
            return False
        return pp.pause_until[self._pfc_prio & 7] > now

    def pfc_port_state(self, ifindex: int) -> dict:
        """occupancy_bytes: lossless bytes from this ingress port still waiting in egress
        queues now; peak_bytes, headroom_drops; pause_rx (PFC frames received here) and
        paused_until_ns per priority (monotonic ns; 0 = never paused)."""
        return self.pfc_ports_state([ifindex]).get(ifindex, {})

    def pfc_ports_state(self, ifindexes) -> dict[int, dict]:
        """pfc_port_state of many ports, their accounts read in one batch lookup."""
        accounts = self.pfc_ports(ifindexes)
        by_slot = {self.port_info(ifx).slot: pp for ifx, pp in accounts.items()}
        now = time.monotonic_ns()
        paused: dict[int, bool] = {}          # one read per egress port however many entries

        def still_held(slot: int) -> bool:
            if slot not in paused:
                pp = by_slot.get(slot)
                paused[slot] = pp.pause_until[self._pfc_prio & 7] > now if pp is not None \
                    else self.pfc_paused(slot, now)
            return paused[slot]

        return {ifx: {"occupancy_bytes": self.pfc_occupancy_of(pp, now, still_held), "peak_bytes": pp.peak,
                      "headroom_drops": pp.headroom_drops, "pause_rx": pp.pause_rx,
                      "paused_until_ns": list(pp.pause_until)}
                for ifx, pp in accounts.items()}
