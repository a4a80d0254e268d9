"""The port model's real queue on a deployed lab: frames really wait in a shaper at the
port's emulated speed (tc_handoff + tbf behind the XDP decision), so a burst leaves a
slow port spread out, and packets sprayed over paths of unequal delay arrive out of
order while ECMP keeps them in order. Real frames between host namespaces."""
from __future__ import annotations

import subprocess
import time

import pytest

from dataplane.lab import faults
from dataplane.lab.fabric import Fabric
from dataplane.nic.steering import ForwardingSteering
from dataplane.traffic import iperf

from .conftest import deployed
from .faulttraffic import RawStream, Receiver

SCALE = 1 / 40000            # 400G -> 10 Mb/s: a 1,000-byte frame takes 0.8 ms
PORT_BPS = 400e9 * SCALE
SIZE = 1000
DPORT = 9300

# Timing of real traffic on a shared 2-core machine: a starved run is measured again
# (the tests that bound a timing are marked TIMING).
TIMING = pytest.mark.flaky(reruns=2)


@pytest.fixture(scope="module")
def lab():
    with deployed("clos2", "rq") as spec:
        stream = None
        try:
            fab = Fabric(spec.name)
            fab.set_port_model(scale=SCALE, queue="real")
            src = spec.hosts[0].name
            leaf = spec.hosts[0].interfaces[0].peer.split(":")[0]
            far = next(h for h in spec.hosts if h.interfaces[0].peer.split(":")[0] != leaf)
            dst_ip = spec.host_nics[far.name][0].address.split("/")[0]
            stream = RawStream(spec, src, dst_ip, dport=DPORT, size=SIZE)
            receiver_ns = far.netns
            stream.dst_ip = dst_ip
            yield spec, fab, stream, receiver_ns, leaf
        finally:
            if stream:
                stream.close()


def _qdiscs(netns: str) -> str:
    return subprocess.run(["tc", "-n", netns, "qdisc", "show"], capture_output=True, text=True,
                          check=True).stdout


def _deliver(fab, stream, receiver_ns, frames: int, *, rate_bps: float | None, flow: int = 0,
             first_seq: int = 0) -> list[tuple[int, int]]:
    """Send `frames` sequence-numbered frames of one flow (back to back if rate_bps is
    None), wait until the fabric's queues are empty; (seq, arrival ns) in arrival order."""
    rx = Receiver(receiver_ns, DPORT)
    try:
        gap = SIZE * 8 / rate_bps if rate_bps else 0
        next_t = time.monotonic()
        for seq in range(first_seq, first_seq + frames):
            while time.monotonic() < next_t:
                pass
            stream.send_one(flow, seq)
            next_t += gap
        fab.drain(limit_s=10)
    finally:
        rx.stop(linger=0.2)
    return rx.arrivals


def _reordered(arrivals: list[tuple[int, int]]) -> int:
    """Frames that arrived after a frame sent later than them."""
    late, highest = 0, -1
    for seq, _ in arrivals:
        if seq < highest:
            late += 1
        highest = max(highest, seq)
    return late


def test_real_queue_puts_tc_handoff_and_a_shaper_on_every_switch_port(lab):
    spec, fab, *_ = lab
    for node in spec.switches:
        text = _qdiscs(node.netns)
        for iface in node.interfaces:
            assert f"qdisc tbf 1: dev {iface.name} root" in text, (node.name, iface.name, text)
            assert f"qdisc clsact ffff: dev {iface.name}" in text, (node.name, iface.name)
    assert fab.show()["port_model"]["queue"] == "real"
    try:
        fab.set_port_model(queue="virtual")
        for node in spec.switches:
            assert "tbf" not in _qdiscs(node.netns) and "clsact" not in _qdiscs(node.netns)
    finally:
        fab.set_port_model(queue="real")


@TIMING
def test_a_burst_leaves_a_slow_port_at_its_speed(lab):
    spec, fab, stream, receiver_ns, leaf = lab
    frames = 24
    one_frame_s = (SIZE + 0) * 8 / PORT_BPS
    before = fab.counters(leaf)["switches"][leaf]["ports"]
    arrivals = _deliver(fab, stream, receiver_ns, frames, rate_bps=None)
    assert len(arrivals) == frames, "the buffer (32 KiB) holds the whole burst: nothing lost"
    spread_s = (arrivals[-1][1] - arrivals[0][1]) / 1e9
    # The fabric sends the burst at 10 Mb/s: 23 frame times between first and last.
    assert spread_s >= 0.8 * (frames - 1) * one_frame_s, spread_s
    after = fab.counters(leaf)["switches"][leaf]["ports"]
    shaped = sum(after[p]["shaper"]["sent_packets"] - before[p]["shaper"]["sent_packets"] for p in after)
    assert shaped >= frames and all(p["shaper"]["drops"] == 0 for p in after.values())
    # The same burst through the virtual queue is not delayed.
    fab.set_port_model(queue="virtual")
    try:
        arrivals = _deliver(fab, stream, receiver_ns, frames, rate_bps=None, first_seq=1000)
    finally:
        fab.set_port_model(queue="real")
    assert len(arrivals) == frames
    assert (arrivals[-1][1] - arrivals[0][1]) / 1e9 < 0.25 * (frames - 1) * one_frame_s


@TIMING
def test_spraying_over_unequal_paths_reorders_ecmp_does_not(lab):
    """One of the leaf's 4 uplinks at an eighth of the speed: spraying offers it a quarter
    of the flow, more than it sends, so a queue builds there (a token bucket delays only
    what exceeds its rate) and the frames that take it are overtaken by the frames sent
    after them on the others. ECMP keeps the flow on one path, in order."""
    spec, fab, stream, receiver_ns, leaf = lab
    slow = f"{leaf}:up1"
    faults.degrade(spec.name, slow, "50G")   # 1.25 Mb/s against 2 Mb/s offered: the backlog
    rate = 0.8 * PORT_BPS                    # grows to ~21 KB in 200 frames, below the 32 KiB
    try:                                     # buffer, so nothing is dropped
        fab.set_mode("spray-rr", role="leaf")
        sprayed = _deliver(fab, stream, receiver_ns, 200, rate_bps=rate)
        fab.set_mode("ecmp", role="leaf")
        hashed = _deliver(fab, stream, receiver_ns, 200, rate_bps=rate, first_seq=10_000)
    finally:
        fab.set_mode("ecmp", role="leaf")
        faults.clear(spec.name)
    assert len(sprayed) == 200
    assert _reordered(sprayed) >= 20, _reordered(sprayed)   # 1 in 4 frames takes the slow uplink
    # (if the hash puts the flow on the slow uplink, it loses frames there -- in order)
    assert len(hashed) > 0 and _reordered(hashed) == 0


@TIMING
def test_tcp_fills_a_slow_port_through_a_real_queue(lab):
    """With frames waiting in a queue, TCP sees delay grow before loss and settles at the
    port's speed (through the virtual queue at 10 Mb/s it could only lose its way there)."""
    spec, fab, stream, receiver_ns, _ = lab
    bps = iperf.tcp_bps(spec.hosts[0].netns, receiver_ns, stream.dst_ip)
    assert 0.7 * PORT_BPS <= bps <= 1.02 * PORT_BPS, bps


def _rps_masks(spec) -> dict[str, int]:
    """switch:port -> its receive queue's RPS CPU mask, read in the switch's namespace."""
    masks = {}
    for node in spec.switches:
        names = [i.name for i in node.interfaces]
        out = subprocess.run(["ip", "netns", "exec", node.netns, "sh", "-c",
                              'for d; do cat /sys/class/net/"$d"/queues/rx-0/rps_cpus; done', "sh", *names],
                             capture_output=True, text=True, check=True).stdout.split()
        masks.update({f"{node.name}:{n}": int(m.replace(",", ""), 16) for n, m in zip(names, out)})
    return masks


def test_steering_sends_every_switch_ports_frames_to_the_cpus_given_and_back(lab):
    """A run with fewer engines than CPUs steers the switches' forwarding (after XDP) to
    the CPUs without an engine; afterwards the ports are as they were (no steering)."""
    spec = lab[0]
    assert set(_rps_masks(spec).values()) == {0}
    with ForwardingSteering(spec, [1]):
        masks = _rps_masks(spec)
        assert len(masks) == sum(len(n.interfaces) for n in spec.switches) > 0
        assert set(masks.values()) == {0b10}
    assert set(_rps_masks(spec).values()) == {0}
