"""One clock for a lab. Ports run at `scale` x their nominal speed, so everything in the lab
happens 1/scale times slower than in the real fabric it emulates. Every time constant a
user gives (flowlet gap, timeouts, hold times, PFC quanta, DCQCN timers) is in real-fabric
time at the nominal speed; the lab applies it as wall-clock time = real / scale. Sizes
(buffers, thresholds) stay in real bytes: a queue of N bytes drains in the same number of
packet times at any scale.

scale 0 (or None) means "no port model": ports are as fast as the machine, there is no
stretch, and real time is wall time."""
from __future__ import annotations


def stretch(scale: float | None) -> float:
    """Wall-clock seconds per real-fabric second at this scale."""
    if not scale or scale <= 0:
        return 1.0
    return 1.0 / scale


def wall_seconds(real_seconds: float, scale: float | None) -> float:
    """Real-fabric time -> the wall-clock time the lab takes for it."""
    return real_seconds * stretch(scale)


def real_seconds(wall: float, scale: float | None) -> float:
    """Wall-clock time measured in the lab -> the real-fabric time it stands for."""
    return wall / stretch(scale)


def wall_ns(real_ns: float, scale: float | None) -> int:
    """Real-fabric nanoseconds -> wall-clock nanoseconds, for BPF maps (u64 ns)."""
    return int(round(real_ns * stretch(scale)))
