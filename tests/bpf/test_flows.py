"""Flow visibility (bpf/flows.h): per (egress port, 5-tuple) bytes, exact or sampled, on
the route path and the traffic-matrix path, nothing when off."""
from __future__ import annotations

import pytest

from .. import frames
from .conftest import run_frame, switch_bench

SW = 7
IN, EG1, EG2 = 171, 172, 173
SLOT = {IN: 71, EG1: 72, EG2: 73}
MAC = frames.macs("02:00:00:07:00", SLOT, 170)
HOST_MAC = "02:00:00:00:dd:07"
G = 70


@pytest.fixture(scope="module")
def lab(dp, module_netns):
    ports = {ifx: (SW, slot, MAC[ifx]) for ifx, slot in SLOT.items()}
    with switch_bench(dp, module_netns, "fl", {SW: 7}, ports, groups=[G]) as ns:
        dp.set_group(G, [(EG1, "02:00:00:08:00:01")])
        dp.add_route(SW, "10.70.0.0/16", G)
        yield ns
        dp.set_flow_visibility(False)
        dp.forget_flows_seen(2**64 - 1)


def send(dp, ns, sport, n, dst="10.70.0.9"):
    frame = bytes(frames.udp(dst, smac=HOST_MAC, dmac=MAC[IN], sport=sport, dport=4791, size=100))
    for _ in range(n):
        assert run_frame(dp, ns, frame, IN).verdict == "redirect"
    return len(frame)


def seen(dp, sport):
    return [f for f in dp.flows_seen() if f["sport"] == sport and f["dst"].startswith("10.70.")]


def test_every_frame_counted_per_egress_port(dp, lab):
    dp.set_flow_visibility(True, 0)
    size = send(dp, lab, 5001, 10)
    send(dp, lab, 5002, 3)
    (a,), (b,) = seen(dp, 5001), seen(dp, 5002)
    assert (a["slot"], a["bytes"], a["packets"]) == (SLOT[EG1], 10 * size, 10)
    assert (b["bytes"], b["packets"]) == (3 * size, 3)
    assert a["src"] == "10.9.0.2" and a["dport"] == 4791 and a["proto"] == 17
    assert 0 < a["first_ns"] <= a["last_ns"]


def test_traffic_matrix_path_is_counted_on_its_port(dp, lab):
    dp.set_flow_visibility(True, 0)
    dp.tm_add(SW, src="10.9.0.2", dst="10.70.0.9", sport=5003, dport=4791, egress_ifindex=EG2,
              dmac="02:00:00:08:00:02")
    try:
        size = send(dp, lab, 5003, 4)
    finally:
        dp.tm_del(SW, src="10.9.0.2", dst="10.70.0.9", sport=5003, dport=4791)
    (c,) = seen(dp, 5003)
    assert (c["slot"], c["bytes"]) == (SLOT[EG2], 4 * size)


def test_sampled_estimate_is_close(dp, lab):
    dp.set_flow_visibility(True, 3)
    assert dp.flow_visibility() == {"on": True, "sample_shift": 3}
    size = send(dp, lab, 5004, 800)
    (d,) = seen(dp, 5004)
    assert d["packets"] % 8 == 0
    assert 0.7 * 800 * size <= d["bytes"] <= 1.3 * 800 * size


def test_off_counts_nothing(dp, lab):
    dp.set_flow_visibility(False)
    send(dp, lab, 5005, 5)
    assert seen(dp, 5005) == []


def test_forget_removes_idle_entries(dp, lab):
    dp.set_flow_visibility(True, 0)
    send(dp, lab, 5006, 1)
    (e,) = seen(dp, 5006)
    assert dp.forget_flows_seen(e["last_ns"] + 1) >= 1
    assert seen(dp, 5006) == []
