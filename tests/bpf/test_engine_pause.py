"""The send engine honours PFC: the XDP NIC on the sender's port books the pause frames
its switch port sends (here an AF_PACKET socket on the veth's far end, the switch's
side) in nic_pauses, and the engine holds the paused priority's frames while the pause
lasts; the other priority goes on, an XON ends the pause early, the PFC watchdog drops a
priority paused too long. Open loop: an AF_PACKET capture at the far end, the railab
send stamps of the frames against the pause window the NIC booked. Closed loop: reliable
QPs through the XDP responder, the paused one resumes and completes. Bounds are loose
(tens of ms on pauses of hundreds): the machine is shared."""
from __future__ import annotations

import dataclasses
import socket
import time

import pytest

from dataplane.kernel.netns import in_netns
from dataplane.nic import engine
from dataplane.nic.responder import NicResponder
from dataplane.wire import pfc, roce

from .conftest import sh
from .test_engine import MAC_A, MAC_B, Capture, flow

SLOT = 2
QUANTUM_NS = 10_000.0            # 10 us a quantum: 20,000 quanta pause for 200 ms
PRIO = {26: 3}                   # DSCP 26 is priority 3; DSCP 0 (the other flow) is 0
LATE_NS = 40_000_000             # how late a resume may come on a busy machine
EARLY_NS = 50_000                # a frame whose gate read the map just before the pause landed


@pytest.fixture
def pair(netns):
    """a:e0 (the host, the NIC's XDP program) -- b:e1 (the switch's side)."""
    a, b = netns("pfca"), netns("pfcb")
    sh(["ip", "link", "add", "e0", "netns", a, "type", "veth", "peer", "name", "e1", "netns", b])
    for ns, ifname, mac in ((a, "e0", MAC_A), (b, "e1", MAC_B)):
        sh(["ip", "-n", ns, "link", "set", ifname, "address", mac])
        sh(["ip", "-n", ns, "link", "set", ifname, "addrgenmode", "none"])
        sh(["ip", "-n", ns, "link", "set", ifname, "up"])
    return a, b


class Switch:
    """The switch port's PFC frames, sent from the far end of the veth."""

    def __init__(self, ns: str, ifname: str):
        with in_netns(ns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(pfc.ETH_P_MAC_CONTROL))
            self.sock.bind((ifname, 0))

    def pause(self, quanta: dict[int, int]) -> int:
        self.sock.send(pfc.build_frame(MAC_B, quanta))
        return time.monotonic_ns()

    def close(self) -> None:
        self.sock.close()


def sleep_until(t_ns: int) -> None:
    time.sleep(max(0.0, (t_ns - time.monotonic_ns()) / 1e9))


def open_run(pair, tmp_path, script, *, watchdog_ns=0, restore_ns=0, pps=10_000, seconds=0.6):
    """Two flows on a:e0, flow 1 on priority 3 and flow 2 on priority 0, each `pps` for
    `seconds`; `script`: (ms after the start, quanta) PFC frames. Returns the engine's
    report, its port's PFC figures, the captured frames by flow and the NIC's slot."""
    a, b = pair
    n = int(pps * seconds)
    rate = roce.frame_len(256) * 8 * pps
    flows = [flow(1, [256] * n, rate_bps=rate), dataclasses.replace(flow(2, [256] * n, rate_bps=rate), dscp=0)]
    path = tmp_path / "pfc.sched"
    with NicResponder(max_qps=8, max_pauses=8) as nic:
        nic.configure(mode="count")
        nic.attach(a, "e0")
        nic.add_pause_port(MAC_B, SLOT, QUANTUM_NS)
        plan = engine.PausePlan(PRIO, {"a:e0": SLOT}, watchdog_ns=watchdog_ns, restore_ns=restore_ns)
        engine.write_schedule(path, {"a:e0": (a, "e0")}, {"a:e0": [(f, MAC_A, MAC_B) for f in flows]},
                              pfc=plan)
        cap, switch = Capture(b, "e1"), Switch(b, "e1")
        try:
            with engine.SendEngine(path, pauses=(nic.pauses_fd, nic.max_pauses)) as eng:
                start = eng.go(time.monotonic_ns() + 20_000_000)
                for ms, quanta in script:
                    sleep_until(start + ms * 1_000_000)
                    switch.pause(quanta)
                rep = eng.result(timeout=60)
        finally:
            switch.close()
        got = cap.frames()
        booked = nic.pause(SLOT)
        assert nic.counters()["pause"] == len(script)
    by_flow = {i: [p for p in got if p.hdr.flow_id == i] for i in (1, 2)}
    return rep, engine.port_reports(rep, ["a:e0"])["a:e0"], by_flow, booked


def stamps(frames) -> list[int]:
    return sorted(p.hdr.ts_ns for p in frames)


def test_a_paused_priority_waits_out_the_pause_and_the_other_goes_on(pair, tmp_path):
    rep, port, by_flow, booked = open_run(pair, tmp_path, [(150, {3: 20_000})])
    opened, until = booked.opened_ns[3], booked.until_ns[3]
    assert until - opened == 200_000_000
    held = stamps(by_flow[1])
    assert not [t for t in held if opened + EARLY_NS <= t < until]
    resumed = min(t for t in held if t >= until)
    assert resumed - until < LATE_NS
    # priority 0 kept its rate through the pause (10 k/s: about 2,000 frames in 200 ms)
    assert len([t for t in stamps(by_flow[2]) if opened <= t < until]) > 1000
    # everything was sent in the end, nothing dropped
    assert rep["per_flow_packets"] == {1: 6000, 2: 6000} and rep["errors"] == 0
    assert len(by_flow[1]) == len(by_flow[2]) == 6000
    assert (port["pause_frames_received"], port["xon_received"], port["watchdog_trips"]) == (1, 0, 0)
    assert port["paused_ns"] == {"3": 200_000_000} and port["paused_waits"] > 0
    assert port["watchdog_drops"] == 0
    # no burst above the rate after the pause: the flow sends at its pace from the resume
    after = [t for t in held if t >= resumed][:200]
    assert after[-1] - after[0] >= 199 * 100_000 * 0.9


def test_an_xon_ends_the_pause_early(pair, tmp_path):
    rep, port, by_flow, booked = open_run(pair, tmp_path, [(100, {3: 65_535}), (250, {3: 0})])
    length, xon = booked.paused_ns[3], booked.until_ns[3]     # closed: its length; until: the XON
    assert booked.opened_ns[3] == 0 and 140_000_000 < length < 160_000_000
    held = stamps(by_flow[1])
    assert not [t for t in held if xon - length + EARLY_NS <= t < xon]
    assert min(t for t in held if t >= xon) - xon < LATE_NS      # not 655 ms later
    assert port["xon_received"] == 1 and port["pause_frames_received"] == 2
    assert port["paused_ns"] == {"3": length}
    assert rep["per_flow_packets"] == {1: 6000, 2: 6000}


def test_the_watchdog_drops_a_priority_paused_too_long(pair, tmp_path):
    rep, port, by_flow, booked = open_run(pair, tmp_path, [(100, {3: 65_535})],
                                          watchdog_ns=100_000_000, restore_ns=10_000_000_000)
    opened = booked.opened_ns[3]
    held = stamps(by_flow[1])
    # held for the watchdog's time, then dropped for the rest of the run (restore: 10 s)
    assert max(held) < opened + EARLY_NS and 800 < len(held) < 1200      # 100 ms at 10 k/s
    assert port["watchdog_trips"] == 1 and rep["errors"] == port["watchdog_drops"]
    assert len(held) + port["watchdog_drops"] == 6000                    # each dropped one used its PSN
    assert rep["per_flow_packets"] == {1: len(held), 2: 6000}
    # the drops went at the flow's pace from the trip (100 ms after the pause began), not
    # at once: the run lasted the 0.6 s of its schedule and the 0.1 s it was held
    assert rep["elapsed_s"] > 0.65


def test_a_paused_reliable_qp_resumes_and_completes(pair, tmp_path):
    """Closed loop: two go-back-N QPs through the XDP responder on b:e1; QP 1's priority
    is paused for 150 ms: it sends nothing then (the responder's longest gap between its
    deliveries), QP 2 goes on, and both complete."""
    a, b = pair
    flows = [flow(1, [16384] * 40, rate_bps=0), dataclasses.replace(flow(2, [16384] * 40, rate_bps=0), dscp=0)]
    path = tmp_path / "closed.sched"
    with NicResponder(max_qps=8, max_reqs=8, max_pauses=8) as nic:
        nic.configure(mode="respond", consume=True, ack_every=4, ack_delay_us=100)
        nic.attach(a, "e0")
        nic.attach(b, "e1")
        for slot, f in enumerate(flows):
            nic.add_requester(f.src_ip, f.src_qp, slot)
        nic.add_pause_port(MAC_B, SLOT, QUANTUM_NS)
        rel = engine.Reliable("go-back-n", window=32, rto_ns=3_000_000, line_bps={"a:e0": 50e6},
                              limit_ns=20_000_000_000)
        engine.write_schedule(path, {"a:e0": (a, "e0")}, {"a:e0": [(f, MAC_A, MAC_B) for f in flows]},
                              reliable=rel, pfc=engine.PausePlan(PRIO, {"a:e0": SLOT}))
        switch = Switch(b, "e1")
        try:
            with engine.SendEngine(path, feedback=(nic.requesters_fd, nic.max_reqs),
                                   pauses=(nic.pauses_fd, nic.max_pauses)) as eng:
                start = eng.go(time.monotonic_ns() + 20_000_000)
                sleep_until(start + 40_000_000)
                switch.pause({3: 15_000})
                rep = eng.result(timeout=60)
        finally:
            switch.close()
        qps = {q["flow_id"]: q for q in nic.qps()}
    t = rep["transport"]
    assert [t[str(i)]["unacked_packets"] for i in (1, 2)] == [0, 0]
    assert qps[1]["messages"] == qps[2]["messages"] == 40
    assert qps[1]["max_gap_ns"] >= 150_000_000 - 1_000_000
    assert qps[2]["max_gap_ns"] < 50_000_000                      # priority 0 was never held
    port = engine.port_reports(rep, ["a:e0"])["a:e0"]
    assert port["paused_waits"] > 0 and port["paused_ns"] == {"3": 150_000_000}
    assert port["watchdog_drops"] == 0 and rep["errors"] == 0
