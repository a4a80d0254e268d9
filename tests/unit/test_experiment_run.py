"""The experiment runner's clock and the results folder, without a lab."""
from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fakedp import programmed

from dataplane.agent.protocol import CounterSnapshot
from dataplane.experiment import runner, session, timeline
from dataplane.report import faultruns
from dataplane.traffic import receiver
from dataplane.wire import roce


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


def test_timeline_buckets_are_equal_from_the_common_start_and_share_straddling_bins():
    t0 = 10_000_500_000                    # t = 0 half-way through a 1 ms bin
    bins = {10_000 + k: 1000 for k in range(400)}   # 1000 bytes every ms for 0.4 s
    out = timeline.delivered_timeline(bins, 1_000_000, t0, 0.1)
    assert [p["t"] for p in out] == [0.1, 0.2, 0.3]
    # 1 MB/s -> 8 Mb/s in every full bucket, the half bin before t0 left out
    assert all(abs(p["bps"] - 8e6) < 1 for p in out), out


def test_a_receiver_that_reads_late_makes_no_burst():
    """The old timeline drew spray-rr at 97 Mb/s for a second where the fabric carries
    64: it came from when the counters were read. Frames read in one late burst keep the
    kernel's receive stamps, so the timeline stays at the rate they arrived at."""
    line_bps = 2_000_000
    rx = receiver.Receiver(line_bps=line_bps)
    frames = _frames(1100, 2000)
    gap_ns = -(-len(frames[0]) * 8 * 1_000_000_000 // line_bps)     # back to back at line rate
    t0 = 5_000_000_000
    packets = [roce.parse(f) for f in frames]
    for i, pkt in enumerate(packets):                  # all read at the end, in one go
        rx.add(pkt, t0 + i * gap_ns)
    bins, width = timeline.merge_bins([{"rx_bin_ns": receiver.RX_BIN_NS,
                                        "rx_bins": {str(b): n for b, n in rx.rx_bins.items()}}])
    out = timeline.delivered_timeline(bins, width, t0, 0.1)
    assert len(out) >= 80
    assert max(p["bps"] for p in out) <= line_bps * 1.0001, max(p["bps"] for p in out)
    assert min(p["bps"] for p in out[:-1]) >= line_bps * 0.95


def test_host_capacity_is_the_host_links_emulated_speeds():
    links = [{"a_role": "leaf", "b_role": "host", "scaled_bps": 2e6},
             {"a_role": "leaf", "b_role": "host", "scaled_bps": 2e6},
             {"a_role": "leaf", "b_role": "spine", "scaled_bps": 2e6}]
    assert timeline.host_capacity_bps(links) == 4e6
    assert timeline.host_capacity_bps([{"a_role": "leaf", "b_role": "host", "scaled_bps": None}]) is None


def _frames(length: int, count: int) -> list[bytes]:
    """`count` railab RoCE data frames of one flow, `length` bytes each."""
    tpl = roce.FrameTemplate(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                             src_ip="10.0.0.1", dst_ip="10.0.1.2", sport=50000, dqpn=0x100,
                             opcode=roce.Opcode.SEND_ONLY,
                             payload_len=length - roce.frame_len(0))
    return [bytes(tpl.fill(seq, False, 1, 0x101, seq, seq, 0, 1, length, 0, 0)) for seq in range(count)]


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
    exp = SimpleNamespace(name="once", output=tmp_path, plots=True)
    folder = session.write({"modes": {}, "sweeps": {}}, exp)
    assert written.count("results.json") == 1
    assert json.loads((folder / "results.json").read_text())["plots"] == [str(folder / "a.png")]
    exp = SimpleNamespace(name="without", output=tmp_path / "without", plots=False)   # --no-plots
    folder = session.write({"modes": {}, "sweeps": {}}, exp)
    assert json.loads((folder / "results.json").read_text())["plots"] == []


def test_fired_events_carry_their_time_and_the_agents_reaction(monkeypatch):
    """Each fault the clock fires keeps the monotonic ns it was made at; the run's events
    then carry the agent's reaction to it (faultruns.dataplane_reaction)."""
    from dataplane.lab import faults

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


def test_a_reliable_senders_grace_after_the_run_covers_its_retransmission_timeouts():
    """20 s of wall time, or 8 RTOs where the scale stretches an RTO past 2.5 s."""
    assert runner.closed_loop_limit_s(12.5, 1.0) == runner.CLOSED_LOOP_LIMIT_S
    assert runner.closed_loop_limit_s(12.5, 3.125e-6) == pytest.approx(32.0)     # an RTO = 4 s
    assert runner.closed_loop_limit_s(12.5, 6.25e-7) == pytest.approx(160.0)     # an RTO = 20 s


def test_the_common_start_comes_after_the_first_counter_read():
    """The senders' start is fixed after the t = 0 counters were read, a lead ahead: the read
    takes seconds in a 16,384-GPU lab, and a start fixed before it had passed when the
    engine got it (it sent nothing: every flow cut by the duration)."""
    p = programmed()
    fabric = _GrowingFabric(p, 0)
    slow = fabric.snapshot

    def snapshot(switch=None):
        time.sleep(0.2)           # a large lab's counters
        return slow(switch)

    fabric.snapshot = snapshot
    clock = runner._RunClock(p.spec, fabric, [], sample_s=1.0)
    asked = time.monotonic()
    started = clock.mark_start(lead=runner.GO_LEAD_S)
    assert started >= asked + 0.2 + runner.GO_LEAD_S and started > time.monotonic()
    assert clock.sample_t == [0.0] and clock.uplink_samples[-1]["t"] == 0.0
