"""Flow visibility, the agent's side: reads the data plane's flow_seen table (bpf/flows.h)
and turns it into the heaviest flows per egress port over a window.

The table holds cumulative (sampled) bytes per (egress port, 5-tuple). A rate needs two
readings: every read is kept for a while, and a flow's rate over a window is the bytes it
gained since the oldest kept reading inside that window, over the time between the two.
A flow with no earlier reading (new, or nobody read the table for longer than the window)
gets its bytes over its life in the table, that life counted as a tenth of the window at
least (a flow seen twice in a microsecond is not a terabit flow).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import asdict, dataclass

FLOW_SAMPLE_SHIFT = 3          # agent default: one frame in 8 (~5 ns/frame; 1:1 costs ~28 ns)
EXACT_SAMPLE_SHIFT = 0         # what the navigation controller asks for while it runs
KEEP_READINGS = 64
IDLE_FORGET_FACTOR = 4
NEW_FLOW_MIN_SPAN = 0.1         # entries idle for 4 windows are deleted (room in the LRU)

FiveTuple = tuple[str, str, int, int, int]     # src, dst, sport, dport, proto


@dataclass
class FlowRate:
    switch: str
    port: str
    src: str
    dst: str
    sport: int
    dport: int
    proto: int
    bytes: int             # estimated bytes out of this port since the entry was made
    packets: int           # estimated frames, likewise
    rate_bps: float        # over the window (see the module's doc)
    share: float           # rate_bps / the port's emulated speed (0 if the port has no model)
    last_ns: int

    @property
    def five(self) -> FiveTuple:
        return (self.src, self.dst, self.sport, self.dport, self.proto)

    def to_wire(self) -> dict:
        return asdict(self)


class FlowTable:
    """Readings of flow_seen, mapped to (switch, port) names."""

    def __init__(self, dataplane, ports_by_slot: dict[int, tuple[str, str]],
                 speed_of=lambda switch, port: 0):
        self.dp = dataplane
        self.ports_by_slot = ports_by_slot
        self.speed_of = speed_of
        self.readings: deque[tuple[int, dict]] = deque(maxlen=KEEP_READINGS)
        self.lock = threading.Lock()

    def read(self, window_ns: int) -> list[FlowRate]:
        """Every flow seen within the window, with its rate over the window."""
        with self.lock:
            now = time.monotonic_ns()
            entries = self.dp.flows_seen()
            current = {(e["slot"], e["src"], e["dst"], e["sport"], e["dport"], e["proto"]): e
                       for e in entries}
            base_t, base = None, {}
            for t, reading in self.readings:
                if now - t <= window_ns and t < now:
                    base_t, base = t, reading
                    break
            out = []
            for key, e in current.items():
                if now - e["last_ns"] > window_ns or key[0] not in self.ports_by_slot:
                    continue
                if key in base:
                    rate = (e["bytes"] - base[key]) * 8e9 / (now - base_t)
                else:   # no earlier reading: its bytes over its life in the table, but
                    # over NEW_FLOW_MIN_SPAN of the window at least
                    rate = e["bytes"] * 8e9 / max(now - e["first_ns"], window_ns * NEW_FLOW_MIN_SPAN)
                switch, port = self.ports_by_slot[key[0]]
                speed = self.speed_of(switch, port)
                out.append(FlowRate(switch, port, *key[1:], bytes=e["bytes"], packets=e["packets"], rate_bps=rate,
                                    share=rate / speed if speed else 0.0, last_ns=e["last_ns"]))
            # oldest first, so the walk above meets the oldest reading inside the window first
            self.readings.append((now, {k: e["bytes"] for k, e in current.items()}))
            self.dp.forget_flows_seen(now - IDLE_FORGET_FACTOR * window_ns)
            return out


def heaviest(flows: list[FlowRate], top: int) -> list[FlowRate]:
    """The `top` heaviest flows of each (switch, port), heaviest first, ports in name order."""
    by_port: dict[tuple[str, str], list[FlowRate]] = {}
    for f in flows:
        by_port.setdefault((f.switch, f.port), []).append(f)
    out = []
    for key in sorted(by_port):
        out.extend(sorted(by_port[key], key=lambda f: -f.rate_bps)[:top])
    return out
