"""The agent's PFC sender: reads every switch port's lossless-priority ingress account (the
data path's pfc_port rings, bpf/pfc.h) and sends real PFC frames out of that port: XOFF
(the configured quanta) when the port holds more than XOFF bytes, again before that pause
runs out while it stays above XON, and XON (quanta 0) once it is at or below XON bytes.

The data path cannot send a frame of its own while it forwards one, so this thread does
it, every poll_ms of wall-clock time; the headroom above XOFF absorbs what arrives in
the meantime (the data path drops a lossless frame only beyond XOFF + headroom).
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass

from dataplane import pfc
from dataplane.netns_util import in_netns

log = logging.getLogger(__name__)
POLL_S = 0.0005                 # wall-clock seconds between reads of the accounts
SOL_PACKET, PACKET_QDISC_BYPASS = 263, 20


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


class PfcSender:
    def __init__(self, programmer, cfg: dict):
        self.p = programmer
        self.cfg = dict(cfg)
        self.ports = [(n, i) for n in programmer.spec.switches for i in n.interfaces]
        self.state = {i.ifindex: PortPause() for _, i in self.ports}
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
        xoff, xon = self.cfg["xoff_bytes"], self.cfg["xon_bytes"]
        for node, iface in self.ports:
            st = self.state[iface.ifindex]
            occupancy = self.p.dp.pfc_occupancy(iface.ifindex)
            pause_ns = self.p.pause_wall_ns(iface, self.cfg["quanta"])
            if occupancy > xoff and (not st.paused or now - st.last_xoff_ns > pause_ns // 2):
                self._send(iface.ifindex, self.cfg["quanta"], now)
            elif st.paused and occupancy <= xon:
                self._send(iface.ifindex, 0, now)
            elif st.paused and now - st.last_xoff_ns > pause_ns:   # ran out by itself
                st.paused = False
                st.paused_ns += st.last_xoff_ns + pause_ns - st.since_ns

    def _loop(self) -> None:
        while not self.stop_event.wait(POLL_S):
            try:
                self.step(time.monotonic_ns())
            except Exception:        # never let one bad read stop the pauses
                log.exception("PFC sender")

    def port_counters(self, ifindex: int) -> dict:
        st = self.state.get(ifindex)
        if st is None:
            return {}
        return {"pause_frames_sent": st.frames_sent, "xon_sent": st.xon_sent,
                "paused_sent_ns": st.paused_total_ns(time.monotonic_ns()), "pausing": st.paused}
