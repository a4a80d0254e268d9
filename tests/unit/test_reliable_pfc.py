"""The closed-loop sender under PFC: a paused QP's data waits for the pause to end, other
priorities go on, and a watchdog-dropped priority sends nothing (its packets are lost,
for the transport to resend). Real sender loop, real frames; the wire is a recorder."""
from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from dataplane.experiment import spec as exp_spec
from dataplane.report import closedloop
from dataplane.traffic import reliable, sender
from dataplane.traffic import transport as tp
from dataplane.traffic.workload import Flow, Message
from recordingwire import RecordingWire

LINE_BPS = 10e6
ROOT = Path(__file__).resolve().parents[2]




def _flow(flow_id: int, dscp: int) -> Flow:
    return Flow(flow_id=flow_id, cls="elephant", src_host="a", src_ifname="nic0", src_ip="10.0.0.1",
                dst_host="b", dst_ifname="nic0", dst_ip="10.0.0.2", src_port=49152 + flow_id,
                dst_port=4791, src_qp=0x100 + flow_id, dst_qp=0x200 + flow_id, opcode="write",
                dscp=dscp, rate_bps=LINE_BPS, mtu=1024, messages=(Message(0, 4096, 0),))


def _run(flows, gate):
    wire = RecordingWire()
    quiet_a, quiet_b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)   # no feedback arrives
    quiet_a.setblocking(False)
    try:
        prepared = {"nic0": sender.prepare_flows(flows, "02:00:00:00:00:01", "02:00:00:00:00:02")}
        cfg = tp.TransportConfig(kind="go-back-n", window=64, rto_us=1e6)
        start = time.monotonic_ns()
        rep = reliable.run({"nic0": wire}, [quiet_a], reliable.packets_of(prepared), cfg,
                           {"nic0": LINE_BPS}, None, duration_s=0.0, limit_s=0.3,
                           pause={"nic0": gate}, burst_packets=1)
    finally:
        quiet_a.close()
        quiet_b.close()
    return start, wire.sent, rep


def _dscp(frame: bytes) -> int:
    return frame[15] >> 2


def test_a_paused_priority_waits_until_the_pause_ends_and_others_go_on():
    pause_ns = 100_000_000
    ends = {}

    def gate(dscp: int, now: int) -> int:
        end = ends.setdefault("t", now + pause_ns)
        return end if dscp == 26 and now < end else 0

    start, sent, rep = _run([_flow(1, 26), _flow(2, 0)], gate)
    lossless = [t for t, f in sent if _dscp(f) == 26]
    lossy = [t for t, f in sent if _dscp(f) == 0]
    assert len(lossless) == 4 and len(lossy) == 4          # every packet went out once
    assert min(lossless) >= ends["t"]                      # not one before the pause ended
    assert max(lossy) < ends["t"]                          # the lossy QP did not wait
    assert rep["ports"]["nic0"]["paused_waits"] > 0
    assert rep["ports"]["nic0"]["watchdog_drops"] == 0


def test_a_watchdog_dropped_priority_puts_nothing_on_the_wire():
    start, sent, rep = _run([_flow(1, 26)], lambda dscp, now: -1)
    assert sent == []
    assert rep["ports"]["nic0"]["watchdog_drops"] == 4
    assert rep["per_flow_packets"]["1"] == 4               # given up as sent: the transport resends


def test_shipped_fairness_experiment_compares_dcqcn_on_and_off_with_pfc_on():
    exp = exp_spec.load(ROOT / "experiments" / "dcqcn-fairness.yml")
    assert [m.dcqcn for m in exp.modes] == [True, False]
    pm = exp.port_model
    assert pm["pfc"] == "on" and pm["xon_bytes"] < pm["xoff_bytes"] and pm["ecn_bytes"] < pm["xoff_bytes"]


def test_a_mode_cannot_switch_dcqcn_on_the_open_loop_sender(tmp_path):
    path = tmp_path / "x.yml"
    path.write_text(f"name: x\nlab: {ROOT / 'experiments' / 'labs' / 'transport.clab.yml'}\n"
                    "modes: [{mode: ecmp, dcqcn: on}]\nworkload: {pattern: {type: all-to-all}}\n")
    with pytest.raises(exp_spec.ExperimentError) as err:
        exp_spec.load(path)
    assert "dcqcn" in str(err.value) and "closed-loop" in str(err.value)
    assert "\n" not in str(err.value)


def test_steady_state_counts_queues_and_pauses_inside_the_window_only():
    run = {"sample_t": [0.0, 1.0, 2.0, 3.0, 4.0],
           "host_port_queues": {"leaf2:down1": {"bytes": [0, 90_000, 1_000, 3_000, 0]}},
           "uplink_queues": {"leaf1:up1": {"bytes": [0, 0, 5_000, 7_000, 99_000]}},
           "pause_frames_at": [0, 40, 41, 43, 80]}
    out = closedloop.steady_state(run, (2.0, 3.0))
    assert out == {"steady_queue_max_bytes": 7_000, "steady_queue_mean_bytes": 6_000.0,
                   "steady_pause_frames": 3}
    assert closedloop.steady_state(run, None)["steady_pause_frames"] is None
    tx = [{"rate_timeline": [[0.1, 1, 5], [3.5, 1, 5]]}, {"rate_timeline": [[1.0, 1, 0], [1.2, 1, 5], [3.0, 1, 5]]}]
    assert closedloop.steady_window(tx) == (2.2, 3.0)
