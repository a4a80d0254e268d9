"""PFC (IEEE 802.1Qbb, priority flow control): the frame, its timing, and a host's listener.

A PFC frame: destination 01:80:c2:00:00:01, EtherType 0x8808 (MAC control), opcode 0x0101,
a 2-byte class-enable vector (bit p: the time for priority p is valid), eight 2-byte pause
times in quanta of 512 bit times at the link's speed (0 = resume, i.e. XON), padded to the
60-byte minimum. Priorities here come from DSCP (the lab's lossless DSCP -> the lossless
priority, CNP DSCP -> the CNP priority, everything else -> 0, lossy).

Time: a quantum is 512 bit times at the NOMINAL speed (real-fabric time), applied as
wall-clock time through dataplane.timescale like every other time of the lab.
"""
from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

from dataplane import timescale
from dataplane.kernel.netns import in_netns

PFC_DST_MAC = bytes.fromhex("0180c2000001")
ETH_P_MAC_CONTROL = 0x8808
PFC_OPCODE = 0x0101
QUANTUM_BITS = 512
MAX_QUANTA = 0xFFFF
PRIORITIES = range(8)
MIN_FRAME = 60                         # without FCS
DEFAULT_LOSSLESS_DSCP, DEFAULT_LOSSLESS_PRIORITY = 26, 3     # RoCE data (AF31)
DEFAULT_CNP_DSCP, DEFAULT_CNP_PRIORITY = 48, 6               # CNPs (CS6)
_BODY = struct.Struct("!HH8H")         # opcode, class-enable vector, 8 pause times


def build_frame(src_mac: bytes | str, quanta: dict[int, int]) -> bytes:
    """A PFC frame pausing each priority p of `quanta` for quanta[p] (0 = XON)."""
    if isinstance(src_mac, str):
        src_mac = bytes.fromhex(src_mac.replace(":", ""))
    times = [0] * 8
    vector = 0
    for prio, q in quanta.items():
        if prio not in PRIORITIES or not 0 <= q <= MAX_QUANTA:
            raise ValueError(f"PFC priority {prio} / quanta {q} out of range")
        vector |= 1 << prio
        times[prio] = q
    frame = PFC_DST_MAC + src_mac + struct.pack("!H", ETH_P_MAC_CONTROL) + _BODY.pack(PFC_OPCODE, vector, *times)
    return frame.ljust(MIN_FRAME, b"\0")


def parse_frame(frame: bytes) -> dict[int, int] | None:
    """{priority: quanta} of the enabled classes of a PFC frame; None if it is not one."""
    if len(frame) < 14 + _BODY.size or frame[12:14] != struct.pack("!H", ETH_P_MAC_CONTROL):
        return None
    opcode, vector, *times = _BODY.unpack_from(frame, 14)
    if opcode != PFC_OPCODE:
        return None
    return {p: times[p] for p in PRIORITIES if vector & (1 << p)}


def quanta_wall_seconds(quanta: int, nominal_bps: float, scale: float | None) -> float:
    """Wall-clock seconds `quanta` pause quanta last on a link of nominal_bps at the lab's scale."""
    return timescale.wall_seconds(quanta * QUANTUM_BITS / nominal_bps, scale)


def dscp_priority(dscp: int, mapping: dict[int, int]) -> int:
    """The priority of a frame with this DSCP: mapping's, else 0 (lossy)."""
    return mapping.get(dscp, 0)


@dataclass
class PauseState:
    """What one side of a link knows of the pauses it received: per priority, until when
    (monotonic ns) it must not send, and counters (frames, resumes, time paused)."""
    until_ns: dict[int, int] = field(default_factory=dict)
    frames: int = 0                     # PFC frames received
    xon: int = 0                        # of them, resumes (quanta 0) of a paused priority
    paused_ns: dict[int, int] = field(default_factory=dict)   # closed pauses, by priority
    opened_ns: dict[int, int] = field(default_factory=dict)   # start of the pause in force
    # PFC watchdog (SONiC pfcwd): a priority paused without a break for longer than
    # watchdog_ns stops honouring pauses and is dropped for restore_ns (0: no watchdog)
    watchdog_ns: int = 0
    restore_ns: int = 0
    storm_until_ns: dict[int, int] = field(default_factory=dict)
    watchdog_trips: int = 0

    def apply(self, quanta: dict[int, int], now: int, quantum_ns: float) -> None:
        self.frames += 1
        for prio, q in quanta.items():
            if self.storm_until_ns.get(prio, 0) > now:
                continue                # the watchdog tripped: pauses are not honoured
            was_paused = self.paused(prio, now)
            if q == 0:
                if was_paused:
                    self.xon += 1
                    self._close(prio, now)
                self.until_ns[prio] = now
                continue
            if not was_paused:
                self.opened_ns[prio] = now
            self.until_ns[prio] = now + int(q * quantum_ns)   # a refresh restarts the time

    def _close(self, prio: int, end: int) -> None:
        opened = self.opened_ns.pop(prio, None)
        if opened is not None:
            self.paused_ns[prio] = self.paused_ns.get(prio, 0) + max(0, end - opened)

    def paused(self, prio: int, now: int) -> bool:
        until = self.until_ns.get(prio, 0)
        if until > now:
            return True
        if prio in self.opened_ns:     # expired: it lasted until its time ran out
            self._close(prio, until)
        return False

    def verdict(self, prio: int, now: int) -> int:
        """0: send now; -1: drop (the watchdog tripped on this priority); else the
        monotonic ns its pause ends (an XON may end it sooner)."""
        if self.storm_until_ns.get(prio, 0) > now:
            return -1
        if not self.paused(prio, now):
            return 0
        if self.watchdog_ns and now - self.opened_ns.get(prio, now) > self.watchdog_ns:
            self.watchdog_trips += 1
            self.storm_until_ns[prio] = now + self.restore_ns
            self._close(prio, now)
            self.until_ns[prio] = now
            return -1
        return self.until_ns[prio]

    def total_paused_ns(self, now: int) -> dict[int, int]:
        out = dict(self.paused_ns)
        for prio, opened in self.opened_ns.items():
            out[prio] = out.get(prio, 0) + max(0, min(self.until_ns.get(prio, 0), now) - opened)
        return out


class PauseListener:
    """A host NIC's PFC receiver: an AF_PACKET socket for EtherType 0x8808 on `ifname`
    (the NIC's XDP program passes MAC control frames up). poll() reads what arrived
    without blocking; paused(prio) says whether the NIC must hold that priority now."""

    def __init__(self, ifname: str, netns: str | None, nominal_bps: float, scale: float | None,
                 watchdog_real_s: float = 0.0, restore_real_s: float = 0.0):
        with in_netns(netns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_MAC_CONTROL))
            self.sock.bind((ifname, ETH_P_MAC_CONTROL))
        self.sock.setblocking(False)
        self.quantum_ns = quanta_wall_seconds(1, nominal_bps, scale) * 1e9
        self.state = PauseState(watchdog_ns=int(timescale.wall_seconds(watchdog_real_s, scale) * 1e9),
                                restore_ns=int(timescale.wall_seconds(restore_real_s, scale) * 1e9))

    def poll(self, now: int | None = None) -> None:
        while True:
            try:
                frame = self.sock.recv(2048)
            except (BlockingIOError, InterruptedError):
                return
            quanta = parse_frame(frame)
            if quanta is not None:
                self.state.apply(quanta, now or time.monotonic_ns(), self.quantum_ns)

    def paused_until(self, prio: int, now: int) -> int:
        """0 if prio may send now, -1 if the watchdog drops it, else when its pause ends."""
        self.poll(now)
        return self.state.verdict(prio, now)

    def report(self) -> dict:
        now = time.monotonic_ns()
        return {"pause_frames_received": self.state.frames, "xon_received": self.state.xon,
                "watchdog_trips": self.state.watchdog_trips,
                "paused_ns": {str(p): ns for p, ns in self.state.total_paused_ns(now).items()}}

    def close(self) -> None:
        self.sock.close()
