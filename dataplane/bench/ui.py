"""`railab bench ui`: does the web view keep up with a large lab, and what does it cost?

Deploys the 56-node dual-plane lab (32 servers x 8 rails, 4 spines per plane; or uses a
deployed lab), starts `railab ui` as its own process, subscribes to the lab's WebSocket
feed for the duration and counts the updates that arrive, while reading the server's CPU
time (utime + stime of all its threads, /proc/PID/stat) at the start and end of the
window. The agent's CPU is read the same way: it answers the server's polls (its
port_load replies), work the view causes outside the server's process. CPU time per
update does not depend on how loaded the machine is; the share of a core does a little
(a starved server sends fewer updates), so the load average is recorded with it."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from aiohttp import ClientSession

from dataplane.bench.traffic import stop_group
from dataplane.errors import RuntimeStateError
from dataplane.runtime import labspec, lifecycle, state
from dataplane.topology.generate import generate

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK      # utime, stime (fields 14, 15)


def _start_server(lab: str, interval_s: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "dataplane.cli.main", "ui", lab, "--port", "0",
                             "--read-only", "--interval", str(interval_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    line = proc.stdout.readline()
    if not line.startswith("railab ui: http://"):
        proc.kill()
        raise RuntimeStateError(f"railab ui did not start: {line.strip()} {proc.stderr.read().strip()}")
    return proc, line.split()[2].split("/lab/")[0]


async def _subscribe(base: str, lab: str, duration_s: float, server_pid: int, agent_pid: int | None) -> dict:
    arrivals, sizes = [], []
    async with ClientSession() as session:
        async with session.ws_connect(f"{base}/api/labs/{lab}/ws".replace("http", "ws", 1)) as ws:
            await ws.receive()                      # the first update: the feed is running
            cpu0, agent0, t0 = cpu_seconds(server_pid), agent_pid and cpu_seconds(agent_pid), time.monotonic()
            while time.monotonic() - t0 < duration_s:
                try:
                    msg = await asyncio.wait_for(ws.receive(), timeout=max(0.1, duration_s - (time.monotonic() - t0)))
                except asyncio.TimeoutError:
                    break
                arrivals.append(time.monotonic())
                sizes.append(len(msg.data))
            cpu1, agent1, t1 = cpu_seconds(server_pid), agent_pid and cpu_seconds(agent_pid), time.monotonic()
    gaps = [b - a for a, b in zip([t0] + arrivals, arrivals)]
    window = t1 - t0
    per_update = max(1, len(arrivals))
    # the rate is one over the mean time between updates (the window opens at an update):
    # counting updates in the window would miss the one due at its very end
    return {"updates": len(arrivals), "updates_per_s": round(len(gaps) / sum(gaps), 2) if gaps else 0.0,
            "max_gap_s": round(max(gaps), 3) if gaps else None,
            "message_bytes": round(sum(sizes) / len(sizes)) if sizes else 0,
            "server_cpu_percent": round(100 * (cpu1 - cpu0) / window, 2),
            "server_cpu_ms_per_update": round(1000 * (cpu1 - cpu0) / per_update, 1),
            "agent_cpu_percent": round(100 * (agent1 - agent0) / window, 2) if agent_pid else None,
            "agent_cpu_ms_per_update": round(1000 * (agent1 - agent0) / per_update, 1) if agent_pid else None,
            "window_s": round(window, 2),
            "loadavg": [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]}


def bench_ui(duration_s: float = 30.0, interval_s: float = 0.5, lab: str | None = None) -> dict:
    deployed_here = lab is None
    if deployed_here:
        topo = generate("dual-plane", name=f"bench-ui-{uuid.uuid4().hex[:6]}", servers=32, rails=8, spines=4)
        spec = labspec.build(topo, "bench")
        lab = spec.name
    server = None
    try:
        if deployed_here:
            lifecycle.deploy(spec)
        current = state.load(lab)
        if current is None:
            raise RuntimeStateError(f"lab {lab} is not deployed")
        spec = current.spec
        server, base = _start_server(lab, interval_s)
        result = asyncio.run(_subscribe(base, lab, duration_s, server.pid, current.agent_pid))
    finally:
        if server is not None:
            stop_group(server)
        if deployed_here:
            lifecycle.destroy(lab)
    return {"lab": lab if not deployed_here else "dual-plane 32x8, 4+4 spines",
            "nodes": len(spec.nodes), "links": sum(1 for _ in spec.links()),
            "switch_ports": sum(len(n.interfaces) for n in spec.switches),
            "interval_s": interval_s, "expected_updates_per_s": round(1 / interval_s, 2), **result}
