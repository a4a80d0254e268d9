"""The agent's PFC sender: reads every switch port's lossless-priority ingress account (the
data path's pfc_port rings, bpf/pfc.h) and sends real PFC frames out of that port: XOFF
(the configured quanta) when the port holds more than XOFF bytes, again before that pause
runs out while it stays above XON, and XON (quanta 0) once it is at or below XON bytes.

The data path cannot send a frame of its own while it forwards one, so this thread does
it, every poll_ms of wall-clock time; the headroom above XOFF absorbs what arrives in
the meantime (the data path drops a lossless frame only beyond XOFF + headroom).

It also carries out the pauses switch ports receive: the data path records them
(pause_until) and stops accounting the port's lossless frames as sent; this thread holds
the lossless class of that port's qdisc while the pause lasts and releases it when it
ends (XON or expiry), so those frames really wait, and their ingress accounts fill and
pause the next hop upstream.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

from dataplane.kernel.netns import in_netns
from dataplane.kernel.realqueue import NamespaceQueues
from dataplane.wire import pfc

log = logging.getLogger(__name__)
POLL_S = 0.0005                 # wall-clock seconds between reads of the accounts
# The thread runs SCHED_FIFO, as the send engine does: its poll is the switches' PFC
# reaction, and a normal thread waits behind whatever else keeps the CPUs busy. With one
# core kept busy by a spinner (2-core EPYC, the DCQCN and reordering tests), the gap
# between two polls was p99 50 ms / p99.9 146 ms as a normal thread, 11-15 / 37-65 ms FIFO.
PFC_FIFO_PRIORITY = 1
SOL_PACKET, PACKET_QDISC_BYPASS = 263, 20


def _run_first() -> None:
    """Make the calling thread SCHED_FIFO (its children start normal); left as it is
    where the kernel refuses (no CAP_SYS_NICE, an RT budget of 0 in a container)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(PFC_FIFO_PRIORITY))
    except OSError as err:
        log.info("PFC sender stays a normal thread: %s", err)


@dataclass
class PortPause:
    """What one switch port has sent its neighbour."""
    paused: bool = False
    last_xoff_ns: int = 0
    since_ns: int = 0
    paused_ns: int = 0          # closed pauses
    frames_sent: int = 0
    xon_sent: int = 0

    def paused_total_ns(self, now: int) -> int:
        return self.paused_ns + (now - self.since_ns if self.paused else 0)


@dataclass
class PortHold:
    """What one switch port's neighbour has asked of it: the lossless class held."""
    held: bool = False
    since_ns: int = 0
    held_ns: int = 0            # closed holds
    holds: int = 0
    shaper: object = None       # the ShaperParams the hold was set on (a reshape releases it)

    def held_total_ns(self, now: int) -> int:
        return self.held_ns + (now - self.since_ns if self.held else 0)


class PfcSender:
    def __init__(self, programmer, cfg: dict):
        self.p = programmer
        self.cfg = dict(cfg)
        self.ports = [(n, i) for n in programmer.spec.switches for i in n.interfaces]
        self.state = {i.ifindex: PortPause() for _, i in self.ports}
        self.holds = {i.ifindex: PortHold() for _, i in self.ports}
        self.slots = {i.ifindex: programmer.dp.port_info(i.ifindex).slot for _, i in self.ports}
        self.slot_count = max(self.slots.values(), default=-1) + 1
        self.rows = [(n, i, self.slots[i.ifindex], self.state[i.ifindex], self.holds[i.ifindex])
                     for n, i in self.ports]
        self.queues: dict[str, NamespaceQueues] = {}    # per switch netns, opened by the thread
        self.socks: dict[int, socket.socket] = {}
        self.frames: dict[tuple[int, int], bytes] = {}
        for node, iface in self.ports:
            with in_netns(node.netns):
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
                # a PFC frame must not wait behind the port's own queue (the shaper)
                s.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
                s.bind((iface.name, 0))
            self.socks[iface.ifindex] = s
            for quanta in (0, self.cfg["quanta"]):
                self.frames[(iface.ifindex, quanta)] = pfc.build_frame(iface.mac, {self.cfg["priority"]: quanta})
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="pfc-sender", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=2)
        now = time.monotonic_ns()
        for ifindex, st in self.state.items():     # leave no neighbour paused
            if st.paused:
                self._send(ifindex, 0, now)
        for s in self.socks.values():
            s.close()

    def _send(self, ifindex: int, quanta: int, now: int) -> None:
        st = self.state[ifindex]
        try:
            self.socks[ifindex].send(self.frames[(ifindex, quanta)])
        except OSError as err:            # a port that is down: nothing to pause
            log.debug("PFC frame on ifindex %s: %s", ifindex, err)
            return
        st.frames_sent += 1
        if quanta:
            if not st.paused:
                st.paused, st.since_ns = True, now
            st.last_xoff_ns = now
        else:
            st.xon_sent += 1
            if st.paused:
                st.paused = False
                st.paused_ns += now - st.since_ns

    def step(self, now: int) -> None:
        """One poll of every port. Its cost is the PFC's reaction time, which does not
        stretch with the time scale (a lab at 4x the speed sees the same wall-clock delay
        as 4x the real-fabric delay), so it stays a tight loop: the accounts in one batch
        read, an idle account (no lossless bytes, no pause sent) costs two comparisons,
        and a pause's length is only worked out when one is sent or may have run out."""
        xoff, xon, prio = self.cfg["xoff_bytes"], self.cfg["xon_bytes"], self.cfg["priority"]
        accounts = self.p.dp.pfc_accounts(self.slot_count)
        shapers = self.p.shapers

        def still_held(slot: int) -> bool:
            return slot < self.slot_count and accounts[slot].pause_until[prio] > now

        for node, iface, slot, st, hold in self.rows:
            pp = accounts[slot]
            paused = pp.pause_until[prio] > now
            shaper = shapers.get(iface.ifindex)
            if shaper is not None and (paused != hold.held or hold.shaper is not shaper):
                self._follow_pause(node, iface, paused, now)
            if not pp.bytes and not st.paused:
                continue
            occupancy = self.p.dp.pfc_occupancy_of(pp, now, still_held)
            if occupancy > xoff:
                if not st.paused or now - st.last_xoff_ns > self.p.pause_wall_ns(iface, self.cfg["quanta"]) // 2:
                    self._send(iface.ifindex, self.cfg["quanta"], now)
            elif st.paused and occupancy <= xon:
                self._send(iface.ifindex, 0, now)
            elif st.paused:
                pause_ns = self.p.pause_wall_ns(iface, self.cfg["quanta"])
                if now - st.last_xoff_ns > pause_ns:      # ran out by itself
                    st.paused = False
                    st.paused_ns += st.last_xoff_ns + pause_ns - st.since_ns

    def _follow_pause(self, node, iface, paused: bool, now: int) -> None:
        """Hold or release the port's lossless class as its neighbour's pause asks."""
        hold = self.holds[iface.ifindex]
        shaper = self.p.shapers.get(iface.ifindex)
        if shaper is None:
            return
        if hold.shaper is not shaper:
            # shaped anew: a changed qdisc (a new speed) keeps its hold, a new one starts
            # released; only that one is held again (holding a held tbf again lets a frame go)
            hold.shaper = shaper
            queues = self._queues(node)
            if hold.held and paused and not queues.lossless_held(iface.ifindex, shaper):
                queues.hold(iface.ifindex, shaper, True)
        if paused != hold.held:
            self._hold(node, iface, paused, now)

    def _queues(self, node) -> NamespaceQueues:
        queues = self.queues.get(node.netns)
        if queues is None:
            queues = self.queues[node.netns] = NamespaceQueues(node.netns)
        return queues

    def _hold(self, node, iface, held: bool, now: int) -> None:
        hold = self.holds[iface.ifindex]
        self._queues(node).hold(iface.ifindex, self.p.shapers[iface.ifindex], held)
        if held:
            hold.held, hold.since_ns, hold.holds = True, now, hold.holds + 1
        else:
            hold.held = False
            hold.held_ns += now - hold.since_ns

    def _loop(self) -> None:
        _run_first()
        try:
            while not self.stop_event.wait(POLL_S):
                try:
                    self.step(time.monotonic_ns())
                except Exception:        # never let one bad read stop the pauses
                    log.exception("PFC sender")
        finally:      # on this thread: pyroute2 sockets answer on the thread that opened them
            now = time.monotonic_ns()
            for node, iface in self.ports:           # leave no class held
                if self.holds[iface.ifindex].held:
                    try:
                        self._hold(node, iface, False, now)
                    except Exception:
                        log.exception("PFC release of %s:%s", node.name, iface.name)
            for queues in self.queues.values():
                queues.close()

    def port_counters(self, ifindex: int) -> dict:
        st, hold = self.state.get(ifindex), self.holds.get(ifindex)
        if st is None:
            return {}
        now = time.monotonic_ns()
        return {"pause_frames_sent": st.frames_sent, "xon_sent": st.xon_sent,
                "paused_sent_ns": st.paused_total_ns(now), "pausing": st.paused,
                "holding": hold.held, "held_ns": hold.held_total_ns(now), "holds": hold.holds}
