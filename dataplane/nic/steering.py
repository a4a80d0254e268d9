"""Keeps the lab's forwarding off the send engines' CPUs: Receive Packet Steering on the
switch ports, for the run's duration.

A frame an engine sends crosses the first switch's XDP program inside the engine's own
sendmmsg (veth hands it on in the sending CPU's softirq). With real queues the frame then
goes up to tc, waits in its port's shaper and leaves by a timer that fires on the CPU that
armed it, and so does everything after it. With one engine on 2 CPUs the whole lab's
forwarding therefore ran on the engine's CPU while the other sat idle, and where ports
congest (one timer per queued frame: docs/dev/benchmarks.md) the engine fell behind its
schedule: in the demo's ECMP runs it sent up to 8 ms (wall) late during every chunk and
the fabric dropped 6-10 k frames instead of the 15 k it drops when they leave on time.

With RPS on every port of this machine's switches, a frame a switch's XDP program hands
up (XDP_PASS, the real queues' way) goes on in softirq on the CPUs that have no engine,
in arrival order per CPU (RPS keeps a flow on one CPU); the engines are pinned to theirs.
Frames XDP forwards itself (XDP-only queues) are not steered. Runs whose switches' PFC is
the agent's Python poll are left as they were: on 2 CPUs that poll shares the one CPU left.

A steered frame waits in the forwarding CPU's backlog, which drops what it cannot hold
(net.core.netdev_max_backlog): an overloaded forwarding CPU loses frames the fabric never
saw (one engine at 320 Mb/s: 30 %). Runs get one engine only below what one CPU forwards
(dataplane.nic.shards), and the steering counts the backlogs' drops for the run's record.
"""
from __future__ import annotations

import os
import subprocess
from typing import Sequence

from dataplane.closing import Closing
from dataplane.runtime.labspec import LabSpec

# One shell per namespace: sysfs shows a namespace's devices only to a mount made in it,
# which `ip netns exec` makes. The glob leaves out devices without RPS (none on veth).
_WRITE = 'm=$1; shift; for d; do for f in /sys/class/net/"$d"/queues/rx-*/rps_cpus; do ' \
         'if [ -e "$f" ]; then echo "$m" > "$f"; fi; done; done'


SOFTNET_STAT = "/proc/net/softnet_stat"


def backlog_drops() -> int:
    """Frames the CPUs' input backlogs dropped since boot (softnet_stat's second column)."""
    with open(SOFTNET_STAT) as f:
        return sum(int(line.split()[1], 16) for line in f if line.strip())


def plan(engines: int, cpus: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
    """(the engines' CPUs, the forwarding's CPUs) for `engines` engines on `cpus` (this
    process's, by default); no forwarding CPUs (nothing to steer) when every CPU has an
    engine."""
    cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    if engines >= len(cpus):
        return [], []
    return cpus[:engines], cpus[engines:]


def cpu_mask(cpus: Sequence[int]) -> str:
    """The hex CPU mask sysfs takes, in comma-separated 32-bit words."""
    bits = sum(1 << c for c in cpus)
    words = []
    while True:
        words.append(f"{bits & 0xFFFFFFFF:08x}")
        bits >>= 32
        if not bits:
            break
    return ",".join(reversed(words))


class ForwardingSteering(Closing):
    """RPS to `cpus` on every port of the lab's local switches; close() turns it off."""

    def __init__(self, spec: LabSpec, cpus: Sequence[int]):
        self._ports = {n.netns: [i.name for i in n.interfaces] for n in spec.switches if n.interfaces}
        self.cpus = list(cpus)
        self._drops0 = backlog_drops()
        try:
            self._set(cpu_mask(self.cpus))
        except BaseException:
            self.close()       # the namespaces it did reach
            raise

    def _set(self, mask: str) -> None:
        procs = [subprocess.Popen(["ip", "netns", "exec", ns, "sh", "-c", _WRITE, "sh", mask, *ports],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for ns, ports in self._ports.items()]
        failed = []
        for ns, proc in zip(self._ports, procs):
            err = proc.communicate()[1].strip()
            if proc.returncode:
                failed.append(f"{ns}: {err.splitlines()[-1] if err else 'failed'}")
        if failed:
            raise OSError(f"RPS on the switch ports: {'; '.join(failed)}")

    def drops(self) -> int:
        """Backlog drops since the steering began (any CPU's: the machine's other traffic
        too, which a lab's run leaves little of)."""
        return backlog_drops() - self._drops0

    def close(self) -> None:
        self._set("0")
