"""Who plays a run's hosts (dataplane.nic.hosts.receive_side / send_side) and the engine's
closed-loop transport on the lab's wall clock (reliable_plan)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from dataplane import timescale
from dataplane.nic import hosts
from dataplane.traffic.transport import DcqcnParams, TransportConfig

XDP, TC = SimpleNamespace(dataplane="xdp"), SimpleNamespace(dataplane="tc")


@pytest.mark.parametrize("closed, events", [(False, False), (True, False), (False, True), (True, True)])
def test_an_xdp_lab_receives_with_the_kernel_nic(closed, events):
    assert hosts.receive_side(XDP, "kernel", closed_loop=closed, has_events=events)[0] == "kernel"
    assert hosts.receive_side(XDP, "python", closed_loop=closed, has_events=events)[0] == "python"
    side, why = hosts.receive_side(TC, "kernel", closed_loop=closed, has_events=events)
    assert side == "python" and "tc" in why


@pytest.mark.parametrize("closed, pfc", [(False, False), (True, False), (False, True), (True, True)])
def test_the_engine_sends_when_the_nic_receives(closed, pfc):
    side, why = hosts.send_side("kernel", closed_loop=closed, pfc=pfc, receive="kernel")
    assert side == "kernel" and ("closed loop" in why) == closed and ("PFC" in why) == pfc
    # feedback and pauses come from the NIC on the senders' ports: without it, Python sends
    side = hosts.send_side("kernel", closed_loop=closed, pfc=pfc, receive="python")[0]
    assert side == ("python" if closed or pfc else "kernel")
    assert hosts.send_side("python", closed_loop=closed, pfc=pfc)[0] == "python"


def test_the_closed_loop_plan_is_in_wall_time_through_the_scale():
    cfg = TransportConfig(kind="selective-repeat", window=48, rto_us=100.0, dcqcn=DcqcnParams())
    scale = 2.5e-4
    plan = hosts.reliable_plan(cfg, {"h:p": 1e8}, scale, limit_s=20.0, sample_s=0.1, pfc=False)
    assert (plan.kind, plan.window, plan.burst_packets) == ("selective-repeat", 48, 4)
    assert plan.rto_ns == timescale.wall_ns(100_000, scale) == 400_000_000
    assert plan.dcqcn["alpha_period_ns"] == timescale.wall_ns(55_000, scale)
    assert plan.dcqcn["rate_period_ns"] == timescale.wall_ns(55_000, scale)
    assert (plan.limit_ns, plan.sample_ns) == (20_000_000_000, 100_000_000)
    # under PFC a NIC cannot make up for a pause above its line rate
    assert hosts.reliable_plan(cfg, {}, scale, limit_s=1, sample_s=1, pfc=True).burst_packets == 1
    assert hosts.reliable_plan(TransportConfig(kind="go-back-n"), {}, None, limit_s=1, sample_s=1,
                               pfc=False).dcqcn is None
