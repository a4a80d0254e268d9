"""The emulated egress port on a deployed lab: a flow offered at twice a port's
(scaled) speed gets that speed through, the excess is counted as queue_full drops,
and ECN marks appear only when the queue is above its threshold. Real frames from a
host namespace; speeds, buffer and threshold come from the agent's port model."""
from __future__ import annotations

import pytest

from dataplane.lab.fabric import Fabric

from .conftest import deployed
from .lbtraffic import HostPort

# Timing measurements of real traffic on a shared 2-core machine: a run that the
# scheduler starves is measured again (up to twice) before the bound counts as missed.
TIMING = pytest.mark.flaky(reruns=2)    # on the tests that bound a timing

DST = "10.0.1.2"
SIZE = 1000


@pytest.fixture(scope="module")
def lab():
    with deployed("clos2", "pm") as spec:
        port = None
        try:
            Fabric(spec.name).set_port_model(scale=1 / 4000)   # 400G -> 100 Mb/s: Python fills it
            port = HostPort(spec, spec.hosts[0].name, 0)
            yield spec, Fabric(spec.name), port
        finally:
            if port:
                port.close()


def _run(fab, port, sport, rate_factor, seconds=1.5):
    """Offer one ECT(0) flow at rate_factor x the egress port's speed; return the port's
    speed and counter deltas."""
    leaf = port.switch
    dst_ip = _other_host_ip(fab, port)
    f = port.frame(dst_ip, sport, 9000, size=SIZE, tos=0x02)
    _, group = fab.group_of(leaf, dst_ip)
    members = [m["interface"] for m in group["members"]]
    before = fab.counters(leaf)["switches"][leaf]["ports"]
    show = fab.show()["switches"][leaf]["ports"]
    speed = show[members[0]]["speed_bps"]
    sent, secs = port.send([f], rate_bps=rate_factor * speed, duration_s=seconds)
    after = fab.counters(leaf)["switches"][leaf]["ports"]
    (egress,) = [m for m in members if after[m]["tx_packets"] + after[m]["drops"]["queue_full"]
                 > before[m]["tx_packets"] + before[m]["drops"]["queue_full"]]
    d = {k: after[egress][k] - before[egress][k] for k in ("tx_packets", "tx_bytes", "ecn_marked")}
    d["queue_full"] = after[egress]["drops"]["queue_full"] - before[egress]["drops"]["queue_full"]
    return speed, sent, secs, d, show[egress]


def _other_host_ip(fab, port):
    return port._dst


@pytest.fixture
def setup(lab):
    spec, fab, port = lab
    # a destination behind another leaf: the flow crosses a leaf uplink
    leaf = port.switch
    for h in spec.hosts:
        nic = spec.host_nics[h.name][0]
        iface = h.interface(nic.ports[0])
        if iface.peer.split(":")[0] != leaf:
            port._dst = nic.address.split("/")[0]
            break
    yield fab, port
    fab.set_port_model(scale=1 / 4000, buffer_bytes=32768, ecn_bytes=8192)   # resets the queues


@TIMING
def test_twice_the_speed_delivers_the_speed(setup):
    fab, port = setup
    speed, sent, secs, d, info = _run(fab, port, 7001, 2.0)
    assert info["nominal_speed_bps"] > info["speed_bps"] == speed > 0
    offered_bps = sent * SIZE * 8 / secs
    assert offered_bps > 1.7 * speed, f"sender too slow: {offered_bps:.3g} b/s for {speed:.3g}"
    delivered_bps = d["tx_bytes"] * 8 / secs
    assert abs(delivered_bps - speed) <= 0.1 * speed, (delivered_bps, speed, d)
    assert d["tx_packets"] + d["queue_full"] == sent
    assert d["queue_full"] >= 0.3 * sent, d
    assert d["ecn_marked"] > 0.5 * d["tx_packets"], d        # the queue sat above the threshold


@TIMING
def test_below_the_speed_no_drops_no_marks(setup):
    fab, port = setup
    speed, sent, secs, d, _ = _run(fab, port, 7002, 0.5)
    assert d["tx_packets"] == sent and d["queue_full"] == 0
    assert d["ecn_marked"] == 0, d
