"""Fault injection with real traffic through a deployed clos2 lab: local fast failover
(leaf uplink down under ECMP, flowlet, spraying), FGLB remote-failure notices (spine loses
its links to a leaf), ARN on a degraded spine downlink, and switch down/up without stale
state. Paced, sequence-numbered UDP streams; loss windows from the sender's send times."""
from __future__ import annotations

import ipaddress
import subprocess
import time

import pytest

from dataplane.agent import client
from dataplane.lab import faults
from dataplane.lab.fabric import Fabric
from dataplane.report import faultruns

from .conftest import lab_fixture
from .faulttraffic import RawStream, Receiver, Result, paced
from .lbtraffic import delta, member_packets

# Timing measurements of real traffic on a shared 2-core machine: a run that the
# scheduler starves is measured again (up to three times) before the bound counts as missed.
TIMING = pytest.mark.flaky(reruns=3)    # every test here bounds a loss window or a reaction

SRC = "srv1"                  # behind leaf1
DST_A = ("srv3", "10.0.1.2")  # behind leaf2
DST_B = ("srv5", "10.0.2.2")  # behind leaf3
FLOWS = 16
PPS = 16000


lab = lab_fixture("clos2", "flt")


@pytest.fixture
def fab(lab):
    fab = Fabric(lab.name)
    yield fab
    faults.clear(lab.name)
    faults.notifications(lab.name, notify=True, arn=False)
    fab.set_mode("ecmp", flowlet_timeout_us=100)
    fab.set_port_model(scale=1 / 40, buffer_bytes=32768, ecn_bytes=8192)
    time.sleep(0.05)
    assert faults.status(lab.name)["exclusions"] == []


def _stream(spec, dst, port, **kw):
    host, ip = dst
    return RawStream(spec, SRC, ip, dport=port, **kw), Receiver(spec.node(host).netns, port)


def _members_used(fab, stream, packets: int) -> dict:
    """Packets per member of leaf1's group towards DST_A while every flow of stream sends
    `packets` more (sequence numbers far above a paced run's)."""
    before = member_packets(fab, "leaf1", DST_A[1])
    for f in range(FLOWS):
        for s in range(packets):
            stream.send_one(f, 2 * 10**9 + s)
    time.sleep(0.05)
    return delta(member_packets(fab, "leaf1", DST_A[1]), before)


def _busiest_spine_port(lab, fab, stream) -> tuple[str, str, list[str]]:
    """(spine, its port towards DST_A's leaf, leaf1's uplinks to that spine) for the spine
    port ECMP gives the most of stream's flows: at least a quarter of them, at 4000
    packets/s of 1000 bytes three times what the degraded port carries. The flows'
    placement follows the hash seed, which comes from the lab's per-run name: a test that
    degraded spine1:down3 whatever the placement failed whenever one flow of 16 crossed it
    (250 packets/s, under the degraded port's 312)."""
    spines = sorted({i.peer.split(":")[0] for i in lab.node("leaf1").interfaces if i.name.startswith("up")})
    flows_on: dict[tuple[str, str], int] = {}
    for f in range(FLOWS):
        before = {sp: member_packets(fab, sp, DST_A[1]) for sp in spines}
        for s in range(5):
            stream.send_one(f, 10**9 + s)
        time.sleep(0.01)
        moved = {(sp, port): n for sp in spines
                 for port, n in delta(member_packets(fab, sp, DST_A[1]), before[sp]).items()}
        busiest = max(moved, key=moved.get)
        flows_on[busiest] = flows_on.get(busiest, 0) + 1
    spine, port = max(flows_on, key=flows_on.get)
    uplinks = [i.name for i in lab.node("leaf1").interfaces if i.peer.split(":")[0] == spine]
    return spine, port, uplinks


def _reaction_ms(lab, t_ns, switch) -> tuple[float, float]:
    """(the kernel's part, the agent's part) of a port-down reaction: fault call -> the
    agent's netlink receive, and that receive -> its map write. The kernel's part is the
    link's own teardown (dev_close waits for an RCU grace period before netlink hears of
    it, and frames flow until then): 0.4-2 ms on a quiet machine, 0.4-43 ms with a core
    kept busy. It is the emulated link's, not the fabric's, so only the agent's part is
    bounded; the loss window shows what the traffic saw."""
    ev = [e for e in faults.events(lab, t_ns) if e["event"] == "port_down" and e["switch"] == switch]
    return (ev[0]["t_rx_ns"] - t_ns) / 1e6, (ev[0]["t_map_ns"] - ev[0]["t_rx_ns"]) / 1e6


@TIMING
@pytest.mark.parametrize("mode", ["ecmp", "flowlet", "spray-rr"])
def test_leaf_uplink_down_fast_failover(lab, fab, mode):
    kw = {"flowlet_timeout_us": 1250} if mode == "flowlet" else {}   # 50 ms wall at scale 1/40
    fab.set_mode(mode, role="leaf", **kw)
    stream, rx = _stream(lab, DST_A, 9001)
    try:
        usage = {}
        if mode == "ecmp":   # which uplink each flow uses (ECMP is per flow)
            for f in range(FLOWS):
                before = member_packets(fab, "leaf1", DST_A[1])
                for s in range(5):
                    stream.send_one(f, 10**9 + s)
                time.sleep(0.01)
                d = delta(member_packets(fab, "leaf1", DST_A[1]), before)
                usage[f] = max(d, key=d.get)
        mark = {}

        def cut():
            mark["t"] = faults.link_down(lab.name, "leaf1:up1", "spine1:down1")["t_ns"]

        sent = paced(stream.send_one, FLOWS, PPS, 0.7, [(0.3, cut)])
        rx.stop()
        # the link is still down: every flow's new packets leave by the live members
        after_cut = _members_used(fab, stream, 5)
    finally:
        stream.close()
    res = Result(sent, rx.got)
    kernel, agent = _reaction_ms(lab.name, mark["t"], "leaf1")
    window = res.loss_window_ms()
    print(f"{mode}: reaction {kernel:.2f} + {agent:.2f} ms, lost {len(res.lost)}/{len(sent)}, "
          f"window {window:.2f} ms")
    assert agent < 10
    assert window < 10, f"loss window {window:.1f} ms"
    assert res.lost_between(0, mark["t"]) == 0
    if mode == "ecmp":
        on_link = {f for f, m in usage.items() if m == "up1"}
        assert 0 < len(on_link) < FLOWS, usage
        assert res.lost_flows() <= on_link, "a flow that did not use the link lost packets"
    # after the cut the group sends nothing through up1, all through the others
    assert after_cut["up1"] == 0, after_cut
    assert sum(after_cut.values()) >= FLOWS * 5, after_cut


@TIMING
def test_spine_loses_leaf_notification(lab, fab):
    """spine1 loses both its links to leaf2: without notices, traffic leaf1 -> leaf2 via
    spine1 is lost for as long as the failure lasts; with them the other leaves avoid spine1
    for leaf2's prefix within 50 ms, and traffic to other leaves loses nothing."""
    results = {}
    for notify in (False, True):
        faults.notifications(lab.name, notify=notify)
        sa, ra = _stream(lab, DST_A, 9002)
        sb, rb = _stream(lab, DST_B, 9003)
        mark = {}

        def cut():
            faults.link_down(lab.name, "spine1:down3", "leaf2:up1")
            mark["t"] = faults.link_down(lab.name, "spine1:down4", "leaf2:up2")["t_ns"]

        def send(flow, seq):
            (sa if flow % 2 == 0 else sb).send_one(flow, seq)

        try:
            # Long enough that traffic keeps flowing well past the cut even if applying it
            # is slow on a busy machine (the check looks at >100 ms after it).
            sent = paced(send, FLOWS, PPS, 1.2, [(0.25, cut)])
            ra.stop(), rb.stop()
        finally:
            sa.close(), sb.close()
        a_flows = set(range(0, FLOWS, 2))
        b_flows = set(range(1, FLOWS, 2))
        res_a = Result([x for x in sent if x[1] in a_flows], ra.got)
        res_b = Result([x for x in sent if x[1] in b_flows], rb.got)
        results[notify] = (res_a, res_b, mark["t"])
        faults.clear(lab.name)
        time.sleep(0.05)
    off_a, off_b, t_off = results[False]
    on_a, on_b, t_on = results[True]
    late = 100_000_000
    lost_late_off = off_a.lost_between(t_off + late, t_off + 10**10)
    sent_late_off = off_a.sent_between(t_off + late, t_off + 10**10)
    print(f"notify off: {lost_late_off}/{sent_late_off} lost >100 ms after the cut; "
          f"notify on: window {on_a.loss_window_ms():.2f} ms, lost {len(on_a.lost)}")
    assert lost_late_off > 0.1 * sent_late_off, "without notices traffic via spine1 should be lost"
    assert on_a.lost_between(t_on + 50_000_000, t_on + 10**10) == 0
    assert on_a.loss_window_ms() < 50
    assert len(on_b.lost) == 0 and len(off_b.lost) == 0, "other destinations must not lose"
    st = faults.status(lab.name)["counters"]
    assert st["spine1"]["notify_sent"] >= 3 and st["leaf1"]["notify_received"] >= 1


@TIMING
def test_dataplane_notice_crosses_the_wire(lab, fab, tmp_path):
    """--arn-path dataplane (issue 27): spine1 loses both its links to leaf2. The first
    packets leaf1 sends to leaf2 through spine1 come back as notices made by spine1's XDP
    program; tcpdump on leaf1 (--arn-capture: the consumed notice goes up
    leaf1's stack) sees one, and leaf1's traffic to leaf2 leaves by neither link to spine1.
    No agent notice is involved (spine1 sends none: notify_sent stays 0)."""
    from scapy.layers.inet import UDP
    from scapy.utils import rdpcap

    from dataplane.agent.notices import T_WITHDRAW, Notice

    leaf1 = lab.node("leaf1")
    pcap = tmp_path / "notices.pcap"
    agent_sent = faults.status(lab.name)["counters"].get("spine1", {}).get("notify_sent", 0)
    faults.notifications(lab.name, notify=True, arn_path="dataplane", arn_capture=True)
    # every port of leaf1: the notice comes back by the link its packet took, one of the two
    # to spine1, and leaf1 then avoids both (a notice concerns the neighbour, not the link)
    cap = subprocess.Popen(["ip", "netns", "exec", leaf1.netns, "tcpdump", "-ni", "any", "-U",
                            "-w", str(pcap), "udp", "port", "4792"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)                      # tcpdump listening
        sa, ra = _stream(lab, DST_A, 9006)
        mark = {}

        def cut():
            client.request(lab.name, "reaction_stamps", clear=True)   # they measure this cut only
            faults.link_down(lab.name, "spine1:down3", "leaf2:up1")
            mark["t"] = faults.link_down(lab.name, "spine1:down4", "leaf2:up2")["t_ns"]

        try:
            sent = paced(sa.send_one, FLOWS, PPS, 1.0, [(0.25, cut)])
            ra.stop()
            # the failure lasts: leaf1's packets to leaf2 leave by its other uplinks
            moved = _members_used(fab, sa, 3)
        finally:
            sa.close()
    finally:
        cap.terminate()
        cap.wait(timeout=5)
        faults.notifications(lab.name, arn_path="agent", arn_capture=False)
    notices = [p for p in rdpcap(str(pcap)) if UDP in p and bytes(p[UDP].payload)[:4] == b"RARN"]
    assert notices, "no notice frame on leaf1's ports"
    msg = Notice.unpack(bytes(notices[0][UDP].payload))
    assert msg.type == T_WITHDRAW and msg.reporter == lab.node("spine1").switch_id
    assert ipaddress.IPv4Address(DST_A[1]) in ipaddress.IPv4Network(msg.prefix)
    to_spine1 = [i.name for i in leaf1.interfaces if i.peer_node == "spine1"]
    assert all(moved[u] == 0 for u in to_spine1) and sum(moved.values()) >= FLOWS * 3, moved
    res = Result(sent, ra.got)
    print(f"dataplane notices: {len(notices)} captured, loss window {res.loss_window_ms():.2f} ms, "
          f"lost {len(res.lost)}")
    assert res.lost_between(mark["t"] + 50_000_000, mark["t"] + 10**10) == 0
    st = faults.status(lab.name)["counters"]
    assert st.get("spine1", {}).get("notify_sent", 0) == agent_sent, "the agent sent a link-down notice"
    # the data plane's stamps: spine1 met the dead group and sent the notice, leaf1 excluded
    # and then steered its next packet to leaf2 away, in that order
    stamps = client.request(lab.name, "reaction_stamps")
    spine, leaf = stamps["spine1"], stamps["leaf1"]
    assert 0 < spine["dead_ns"] <= spine["notice_ns"] <= leaf["excl_ns"] <= leaf["avoid_ns"], stamps
    reaction = faultruns.reaction_from_stamps(stamps)
    assert reaction["reporter"] == "spine1" and "leaf1" in reaction["per_upstream_us"], reaction
    print(f"dataplane reaction: {reaction['reaction_us']:.0f} us (notice sent after {reaction['notice_us']:.0f} us)")


@TIMING
def test_degraded_spine_downlink_triggers_arn(lab, fab, tmp_path):
    fab.set_port_model(scale=1 / 4000)          # 400G -> 100 Mb/s: Python can congest it
    # real-fabric times: at scale 1/4000 a 300 ms hold and 20 ms between notices, wall-clock
    faults.notifications(lab.name, arn=True, hold_ms=0.075, interval_ms=0.005, arn_util=0.9,
                         arn_queue_bytes=8192)
    leaf1_ns = lab.node("leaf1").netns
    pcap = tmp_path / "arn.pcap"
    stream, rx = _stream(lab, DST_A, 9004, size=1000)
    spine, port, uplinks = _busiest_spine_port(lab, fab, stream)
    degraded = f"{spine}:{port}"
    cap = subprocess.Popen(["ip", "netns", "exec", leaf1_ns, "tcpdump", "-i", "any", "-U", "-w",
                            str(pcap), "udp", "port", "4792"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples = {}

    def sample(name):
        def f():
            c = fab.counters(spine)["switches"][spine]["ports"][port]
            samples[name] = (c["tx_packets"], c["queue_bytes"], time.monotonic_ns())
        return f

    try:
        time.sleep(0.5)                          # tcpdump ready
        base = faults.status(lab.name)["counters"]
        paced(stream.send_one, FLOWS, 4000, 0.9,
                     [(0.1, lambda: faults.degrade(lab.name, degraded, "10G")),
                      (0.15, sample("congested")), (0.25, sample("avoid1")), (0.35, sample("avoid2"))])
        rx.stop()
    finally:
        stream.close()
        time.sleep(0.2)
        cap.terminate()
        cap.wait()
    st = faults.status(lab.name)
    c = st["counters"]
    arn_sent = c[spine].get("arn_sent", 0) - base.get(spine, {}).get("arn_sent", 0)
    arn_rx = c["leaf1"].get("arn_received", 0) - base.get("leaf1", {}).get("arn_received", 0)
    out = subprocess.run(["tcpdump", "-nn", "-r", str(pcap)], capture_output=True, text=True).stdout
    captured = [ln for ln in out.splitlines() if ".4792" in ln]
    print(f"{degraded} degraded: ARN sent {arn_sent}, received by leaf1 {arn_rx}, captured in "
          f"leaf1 {len(captured)}; "
          f"samples {samples}")
    assert arn_sent >= 3 and arn_rx >= 1
    assert captured, "ARN packets must be visible on the wire"
    # while leaf1 avoids the spine for leaf2, the congested port's queue drains (what is
    # left is less than one of the stream's frames: a stray frame, not a backlog)
    assert samples["avoid2"][1] < 1000
    assert samples["avoid2"][0] - samples["avoid1"][0] < 20
    # the path returns after the hold time once the congestion is gone
    faults.restore(lab.name, degraded)
    time.sleep(0.45)
    st = faults.status(lab.name)
    assert not [e for e in st["exclusions"] if e["switch"] == "leaf1"]
    assert st["counters"]["leaf1"].get("expired", 0) >= 1
    stream, rx = _stream(lab, DST_A, 9005)
    before = member_packets(fab, "leaf1", DST_A[1])
    try:
        paced(stream.send_one, FLOWS, 4000, 0.1)
        rx.stop()
    finally:
        stream.close()
    d = delta(member_packets(fab, "leaf1", DST_A[1]), before)
    assert sum(d[u] for u in uplinks) > 0, f"the {spine} path not used again: {d}"


@TIMING
def test_switch_down_up_leaves_no_stale_state(lab, fab):
    # real-fabric times at the lab's scale 1/40: 1 s and 20 ms of wall-clock time
    fab.set_mode("flowlet", role="spine", flowlet_timeout_us=25_000)
    fab.set_mode("flowlet", role="leaf", flowlet_timeout_us=500)
    stream, rx = _stream(lab, DST_A, 9006)
    mark = {}

    def down():
        mark["down"] = faults.switch_down(lab.name, "spine1")["t_ns"]

    def up():
        r = faults.switch_up(lab.name, "spine1")
        mark["up"], mark["reset"] = r["t_ns"], r["reset"]["spine1"]

    try:
        sent = paced(stream.send_one, FLOWS, 8000, 0.9, [(0.25, down), (0.5, up)])
        rx.stop()
    finally:
        stream.close()
    res = Result(sent, rx.got)
    print(f"switch down/up: lost {len(res.lost)}, window {res.loss_window_ms():.2f} ms, reset {mark['reset']}; "
          f"lost after down {[(t - mark['down']) / 1e6 for _, _, t in res.lost][:5]} ... "
          f"{[(t - mark['up']) / 1e6 for _, _, t in res.lost][-5:]} (rel. to up)")
    # the 8 ports go down one after the other (a few ms each): the loss window is wider
    # than for one link, but bounded; coming back up loses nothing (hold/release)
    assert res.loss_window_ms() < 50
    assert res.lost_between(mark["up"], 10**19) == 0, "coming back up must not lose traffic"
    assert mark["reset"]["flowlets"] >= 1, "spine1's flowlets were forgotten"
    c = fab.counters("spine1")["switches"]["spine1"]
    # counters restarted at the reset: only traffic after switch-up is counted
    rx_total = sum(p["rx_packets"] for p in c["ports"].values())
    # (flowlets that moved to spine2 may stay there: their gaps are below the timeout)
    assert rx_total < len([s for s in sent if s[2] >= mark["up"]]) + 50
    assert faults.status(lab.name)["exclusions"] == []
    # and everything is delivered afterwards, through both spines
    fab.set_mode("ecmp", role="leaf")
    stream, rx = _stream(lab, DST_A, 9007)
    before = member_packets(fab, "leaf1", DST_A[1])
    try:
        sent = paced(stream.send_one, FLOWS, 8000, 0.2)
        rx.stop()
    finally:
        stream.close()
    assert len(Result(sent, rx.got).lost) == 0
    d = delta(member_packets(fab, "leaf1", DST_A[1]), before)
    assert d["up1"] + d["up2"] > 0 and d["up3"] + d["up4"] > 0, d
