"""The experiment runner's clock and the results folder, without a lab."""
from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

from fakedp import programmed

from dataplane.agent.protocol import CounterSnapshot
from dataplane.experiment import runner, session


class _GrowingFabric:
    """Counters (the agent's reply shape) of a lab whose host ports each deliver
    `rate` bytes per second from `go`, counted the moment they are asked for."""

    def __init__(self, programmer, rate: float):
        self.rate = rate
        self.go: float | None = None
        self.snap = CounterSnapshot.from_wire(programmer.counters())
        hosts = {h.name for h in programmer.spec.hosts}
        self.host_ports = [self.snap.port(n.name, i.name) for n in programmer.spec.switches
                           for i in n.interfaces if i.peer_node in hosts]

    def snapshot(self, switch=None) -> CounterSnapshot:
        now = time.monotonic()
        since = 0.0 if self.go is None else max(now - self.go, 0.0)
        for port in self.host_ports:
            port.tx_bytes = int(self.rate * since)
        self.snap.t_ns = int(now * 1e9)          # as the agent stamps its reply
        return self.snap

    def counters(self, switch=None) -> dict:
        return self.snapshot().to_wire()


def test_timeline_buckets_are_equal_and_start_at_the_common_start():
    """The first bucket once spiked above what the fabric can carry: it was measured
    from a different start than the bytes it counted. Buckets are now equal, from the
    moment the senders are told to go."""
    p = programmed()
    rate = 62_500                             # bytes/s per host port
    fabric = _GrowingFabric(p, rate)
    clock = runner._RunClock(p.spec, fabric, [], sample_s=0.05)
    time.sleep(0.1)                           # senders start up after the clock is made
    clock.mark_start()
    fabric.go = clock.t0
    clock.start()
    time.sleep(0.62)
    clock.stop.set()
    clock.join()
    ts = [pt["t"] for pt in clock.timeline]
    assert len(ts) >= 10
    assert ts == [round(0.05 * (k + 1), 4) for k in range(len(ts))]
    rates = [pt["bps"] / 8 for pt in clock.timeline]
    expected = rate * len(fabric.host_ports)
    assert all(abs(r - expected) <= 0.1 * expected for r in rates), (expected, rates)


def test_equal_buckets_interpolate_between_samples():
    samples = [(0.0, 0), (0.07, 700), (0.21, 2100), (0.26, 2600)]
    out = runner.equal_buckets(samples, 0.1)
    assert [p["t"] for p in out] == [0.1, 0.2]
    assert [round(p["bps"]) for p in out] == [80_000, 80_000]


def test_results_json_is_written_once(tmp_path, monkeypatch):
    written = []
    real = Path.write_text

    def counting(self, text, *a, **kw):
        written.append(self.name)
        return real(self, text, *a, **kw)

    monkeypatch.setattr(Path, "write_text", counting)
    from dataplane.report import plots
    monkeypatch.setattr(plots, "write_plots", lambda view, folder: [folder / "a.png"])
    monkeypatch.setattr(session.table, "render_text", lambda view, title: "table")
    exp = SimpleNamespace(name="once", output=tmp_path)
    folder = session.write({"modes": {}, "sweeps": {}}, exp)
    assert written.count("results.json") == 1
    assert json.loads((folder / "results.json").read_text())["plots"] == [str(folder / "a.png")]


class _FillingFabric(_GrowingFabric):
    """Host ports of `capacity` bytes/s whose queues take a burst of `burst` bytes at
    the start (counted as sent when queued) and then drain, while `rate` keeps coming."""

    def __init__(self, programmer, rate: float, capacity: float, burst: int):
        super().__init__(programmer, rate)
        self.capacity, self.burst = capacity, burst

    def snapshot(self, switch=None) -> CounterSnapshot:
        now = time.monotonic()
        since = 0.0 if self.go is None else max(now - self.go, 0.0)
        self.snap.t_ns = int(now * 1e9)
        queued = 0 if self.go is None else max(self.burst - (self.capacity - self.rate) * since, 0)
        for port in self.host_ports:
            port.tx_bytes = int((self.burst if self.go is not None else 0) + self.rate * since)
            port.queue_bytes = int(queued)
        return self.snap


def test_timeline_counts_what_left_the_ports_not_what_filled_their_queues():
    """The first bucket once showed more than the fabric can carry (140 Mb/s where it
    carries 64): frames that filled the ports' queues at the start were counted as
    delivered when they were queued."""
    p = programmed()
    capacity = 250_000                       # bytes/s per host port (2 Mb/s)
    fabric = _FillingFabric(p, rate=200_000, capacity=capacity, burst=32_768)
    clock = runner._RunClock(p.spec, fabric, [], sample_s=0.05)
    clock.mark_start()
    fabric.go = clock.t0
    clock.start()
    time.sleep(0.5)
    clock.stop.set()
    clock.join()
    most = capacity * len(fabric.host_ports)
    assert clock.timeline and all(pt["bps"] / 8 <= 1.1 * most for pt in clock.timeline), \
        (most, [round(pt["bps"] / 8) for pt in clock.timeline[:4]])


def test_fired_events_carry_their_time_and_the_agents_reaction(monkeypatch):
    """Each fault the clock fires keeps the monotonic ns it was made at; the run's events
    then carry the agent's reaction to it (metrics.dataplane_reaction)."""
    from dataplane import faults

    p = programmed()
    made = []

    def apply(lab, event):
        made.append(time.monotonic_ns())
        return {"t_ns": made[-1]}

    monkeypatch.setattr(faults, "apply", apply)
    clock = runner._RunClock(p.spec, _GrowingFabric(p, 0), [
        {"at": 0.05, "for": 0.05, "fault": "link-down", "a": "leaf1:up1", "b": "spine1:down1"}], sample_s=0.05)
    clock.mark_start()
    clock.start()
    time.sleep(0.3)
    clock.stop.set()
    clock.join()
    assert [e["t_ns"] for e in clock.fired] == made and len(made) == 2
    log = [{"event": "port_down", "switch": "leaf1", "port": "up1", "t_rx_ns": made[0] + 1000,
            "t_map_ns": made[0] + 3000}]
    monkeypatch.setattr(faults, "events", lambda lab, since_ns=0: log)
    down, up = runner._with_reaction(p.spec, clock.fired, [{"fault": "link-down"}], made[0] - 1)
    assert down["failover_us"] == 3.0 and down["local"][0]["netlink_to_mask_us"] == 2.0
    assert up["local"] == [] and up["failover_us"] is None

    def broken(lab, since_ns=0):
        raise RuntimeError("agent gone")

    monkeypatch.setattr(faults, "events", broken)
    assert all(e["reaction_error"] == "agent gone"
               for e in runner._with_reaction(p.spec, clock.fired, [{"fault": "link-down"}], 0))


def test_a_deployed_lab_from_another_topology_is_named_not_silently_used():
    from dataplane.runtime import labspec
    from dataplane.topology import clab

    root = Path(__file__).resolve().parents[2] / "labs"

    def spec(kind):
        return labspec.build(clab.read(root / kind / f"{kind}.clab.yml"), kind)

    assert session.topology_difference(spec("rail-optimized"), spec("rail-optimized")) is None
    text = session.topology_difference(spec("rail-optimized"), spec("clos2"))
    assert text and text.startswith("nodes missing: ")
