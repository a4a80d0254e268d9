"""The experiment runner's clock and the results folder, without a lab."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from fakedp import programmed

from dataplane.agent.protocol import CounterSnapshot
from dataplane.experiment import runner, session


class _GrowingFabric:
    """Counters of a lab whose host ports deliver `rate` bytes per second from `go`,
    read slowly (as a busy agent answers)."""

    def __init__(self, programmer, rate: float, delay_s: float):
        self.p, self.rate, self.delay_s = programmer, rate, delay_s
        self.go: float | None = None
        self.lock = threading.Lock()

    def snapshot(self, switch=None) -> CounterSnapshot:
        with self.lock:
            time.sleep(self.delay_s / 2)
            since = 0.0 if self.go is None else max(time.monotonic() - self.go, 0.0)
            hosts = {h.name for h in self.p.spec.hosts}
            for node in self.p.spec.switches:
                for iface in node.interfaces:
                    if iface.peer_node in hosts:
                        self.p.dp.tx[iface.ifindex] = int(self.rate * since / 16)
            snap = CounterSnapshot.from_wire(self.p.counters())
            time.sleep(self.delay_s / 2)
            return snap

    counters = snapshot


def test_timeline_buckets_are_equal_and_start_at_the_common_start():
    """The first bucket once spiked above what the fabric can carry: it was measured
    from a different start than the bytes it counted. Buckets are now equal, from the
    moment the senders are told to go."""
    p = programmed()
    rate = 1_000_000                          # bytes/s delivered to all hosts together
    fabric = _GrowingFabric(p, rate * 16 / 16, delay_s=0.03)
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
    hosts = sum(1 for n in p.spec.switches for i in n.interfaces if i.peer_node in {h.name for h in p.spec.hosts})
    expected = rate / 16 * hosts
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
