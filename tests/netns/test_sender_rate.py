"""Paced sender on a real veth between two fresh network namespaces (root only).

Rates are checked against the receiving interface's kernel counters (rx_packets of the
veth peer, read with `ip -n <ns> -s -j link`). Documented range: 1k-100k pps of
1002-byte RoCEv2 frames with one send() per frame, up to 150k pps with sendmmsg batches,
within +-5 % (unpaced, one sender reaches ~350k pps with send(), ~440k with sendmmsg).
"""
from __future__ import annotations

import json
import secrets
import subprocess
import threading
import time

import pytest

from dataplane.traffic import receiver as rxmod, sender
from dataplane.traffic.workload import generate, load_dict
from dataplane.wire import roce

# Root is required: tests/conftest.py skips without it (naming what is missing) and
# refuses to run in CI without it. Timing on a shared machine: re-measure up to twice.
pytestmark = pytest.mark.root
TIMING = pytest.mark.flaky(reruns=2)    # on the tests that bound a rate


def _ip(*a):
    subprocess.run(["ip", *a], check=True, capture_output=True, text=True)


@pytest.fixture
def vpair():
    tag = secrets.token_hex(3)
    tx_ns, rx_ns = f"rlsa{tag}", f"rlsb{tag}"
    tx_if, rx_if = f"rlst{tag}", f"rlsr{tag}"
    try:
        _ip("netns", "add", tx_ns)
        _ip("netns", "add", rx_ns)
        _ip("link", "add", tx_if, "netns", tx_ns, "type", "veth",
            "peer", "name", rx_if, "netns", rx_ns)
        for ns, ifn, addr in ((tx_ns, tx_if, "10.77.0.1/24"), (rx_ns, rx_if, "10.77.0.2/24")):
            _ip("-n", ns, "link", "set", ifn, "addrgenmode", "none")  # no IPv6 chatter
            _ip("-n", ns, "addr", "add", addr, "dev", ifn)
            _ip("-n", ns, "link", "set", ifn, "up")
        yield {"tx_ns": tx_ns, "tx_if": tx_if, "rx_ns": rx_ns, "rx_if": rx_if}
    finally:
        for ns in (tx_ns, rx_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        assert not {tx_ns, rx_ns} & set(
            subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())


def rx_packets(ns, ifn):
    out = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", ifn],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]["stats64"]["rx"]["packets"]


def peer_mac(ns, ifn):
    out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", "dev", ifn],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]["address"]


@TIMING
@pytest.mark.parametrize("pps,batch", [(1_000, 1), (5_000, 1), (20_000, 1), (50_000, 1),
                                       (100_000, 1), (50_000, 8), (150_000, 16)])
def test_paced_rate_within_5_percent(vpair, pps, batch):
    sock = sender.open_tx_socket(vpair["tx_if"], vpair["tx_ns"])
    try:
        st = sender.StreamTemplate(src_mac=sender.socket_mac(sock),
                                   dst_mac=peer_mac(vpair["rx_ns"], vpair["rx_if"]),
                                   frame_bytes=1002)
        assert st.length == 1002
        r0 = rx_packets(vpair["rx_ns"], vpair["rx_if"])
        rep = sender.send_stream(sock, st, pps=pps, duration_s=2.0, batch=batch)
        time.sleep(0.05)
        r1 = rx_packets(vpair["rx_ns"], vpair["rx_if"])
    finally:
        sock.close()
    got = r1 - r0
    rate = got / rep.elapsed_s
    assert rep.errors == 0
    assert got == rep.packets                       # every frame reached the peer
    assert abs(rate - pps) <= 0.05 * pps, \
        f"target {pps} pps, receiver counted {rate:.0f} (sender waited " \
        f"{rep.runq_wait_s:.3f} s of {rep.elapsed_s:.3f} s for a CPU)"
    assert abs(rep.pps - pps) <= 0.05 * pps


@TIMING
def test_unpaced_beats_highest_tested_rate(vpair):
    sock = sender.open_tx_socket(vpair["tx_if"], vpair["tx_ns"])
    try:
        st = sender.StreamTemplate(src_mac=sender.socket_mac(sock), dst_mac="02:00:00:00:00:02")
        r0 = rx_packets(vpair["rx_ns"], vpair["rx_if"])
        rep = sender.send_stream(sock, st, pps=None, duration_s=1.0)
        r1 = rx_packets(vpair["rx_ns"], vpair["rx_if"])
    finally:
        sock.close()
    assert (r1 - r0) / rep.elapsed_s > 105_000


def test_flows_wait_for_the_common_start(vpair):
    # the runner names one start time for every host: nothing leaves before it
    hosts = [{"name": "a", "nics": [{"ifname": vpair["tx_if"], "ip": "10.77.0.1"}]},
             {"name": "b", "nics": [{"ifname": vpair["rx_if"], "ip": "10.77.0.2"}]}]
    wl = load_dict({"seed": 3, "duration": "200ms", "rate": "20Mbps", "mix": {"elephant": 1.0, "mice": 0, "protocol": 0},
                    "pattern": {"type": "flows", "flows": [{"src": "a:0", "dst": "b:0"}]}}, "start.yaml")
    flows = generate(wl, hosts)
    sock = sender.open_tx_socket(vpair["tx_if"], vpair["tx_ns"])
    reports = []
    try:
        r0 = rx_packets(vpair["rx_ns"], vpair["rx_if"])
        start = time.monotonic_ns() + 600_000_000
        th = threading.Thread(target=lambda: reports.append(sender.send_flows(
            sock, flows, dst_mac=peer_mac(vpair["rx_ns"], vpair["rx_if"]), duration_s=0.2, start_ns=start)))
        th.start()
        time.sleep(max(start - time.monotonic_ns() - 300_000_000, 0) / 1e9)
        before_start = rx_packets(vpair["rx_ns"], vpair["rx_if"]) - r0
        th.join()
        finished = time.monotonic_ns()
        sent = rx_packets(vpair["rx_ns"], vpair["rx_if"]) - r0
    finally:
        sock.close()
    assert before_start == 0
    assert 0 < reports[0].packets <= sent     # (the kernel may add a frame of its own)
    assert finished >= start + 150_000_000      # it ran its 200 ms from the start, not from the call


def _capture_in(ns, ifn, stop, responder=None):
    """Capture thread in netns `ns` until stop() (a threading.Event.is_set)."""
    with sender.netns(ns):
        sock = rxmod.open_socket(ifn)
    rec = rxmod.Receiver()
    th = threading.Thread(target=rxmod.capture, args=(sock, 60.0, rec, responder),
                          kwargs={"stop": stop}, daemon=True)
    th.start()
    return sock, rec, th


@TIMING
def test_workload_flows_end_to_end(vpair):
    hosts = [{"name": "a", "nics": [{"ifname": vpair["tx_if"], "ip": "10.77.0.1"}]},
             {"name": "b", "nics": [{"ifname": vpair["rx_if"], "ip": "10.77.0.2"}]}]
    wl = load_dict({"seed": 3, "duration": "400ms", "rate": "40Mbps",
                    "classes": {"elephant": {"size": {"uniform": {"min": "8KiB",
                                                                  "max": "64KiB"}}}},
                    "pattern": {"type": "flows", "flows": [{"src": "a:0", "dst": "b:0"}]}},
                   "e2e.yaml")
    flows = generate(wl, hosts)
    assert [f.cls for f in flows] == ["elephant", "mice", "protocol"]
    done, back_done = threading.Event(), threading.Event()
    # sender side: count the ACKs coming back
    back, back_rx, bth = _capture_in(vpair["tx_ns"], vpair["tx_if"], back_done.is_set)
    sock_r, rec, th = _capture_in(vpair["rx_ns"], vpair["rx_if"], done.is_set,
                                  rxmod.Responder())
    time.sleep(0.1)
    tx = sender.open_tx_socket(vpair["tx_if"], vpair["tx_ns"])
    try:
        rep = sender.send_flows(tx, flows, dst_mac=peer_mac(vpair["rx_ns"], vpair["rx_if"]))
    finally:
        tx.close()
        time.sleep(0.2)
        done.set()
        th.join()            # receiver drained and answered everything ...
        back_done.set()      # ... before the sender side stops listening
        bth.join()
    sock_r.close()
    back.close()
    assert rep.errors == 0
    assert rep.per_flow_packets == {f.flow_id: f.total_packets for f in flows}
    st = rec.finish(rep.per_flow_packets)
    for f in flows:
        s = st[f.flow_id]
        assert s.packets == f.total_packets and s.lost == 0 and s.duplicates == 0, (s.to_dict(), rec.other, rep.to_dict())
        assert s.out_of_order == 0 and s.ce == 0
        assert s.messages_completed == len(f.messages) and s.msgs_incomplete == 0
        assert s.payload_bytes == f.total_bytes
        lat = s.latency_summary()
        assert 0 < lat["min"] and lat["p50"] < 5_000_000     # kernel rx stamps: us, not ms
        assert all(c > 0 for c in s.completions_ns.values())
        # one coalesced ACK per message, addressed to the sender's QP
        assert back_rx.acks_by_qp.get(f.src_qp) == len(f.messages)
    assert back_rx.cnps_by_qp == {}                 # no CE -> no CNP
    # achieved offered rate close to the configured 40 Mbit/s over the sending time
    assert rep.bytes == sum(f.wire_bytes for f in flows)
    # offered load ~ 40 Mbit/s x 400 ms (+ messages that start before the end run over)
    assert rep.bytes * 8 / 0.4 == pytest.approx(40e6, rel=0.25)


def test_cnp_only_for_ce_end_to_end(vpair):
    mac = peer_mac(vpair["rx_ns"], vpair["rx_if"])
    done, back_done = threading.Event(), threading.Event()
    back, back_rx, bth = _capture_in(vpair["tx_ns"], vpair["tx_if"], back_done.is_set)
    sock_r, rec, th = _capture_in(vpair["rx_ns"], vpair["rx_if"], done.is_set,
                                  rxmod.Responder(ack=False))
    time.sleep(0.1)
    tx = sender.open_tx_socket(vpair["tx_if"], vpair["tx_ns"])
    src = sender.socket_mac(tx)
    tpl = {ecn: roce.FrameTemplate(src_mac=src, dst_mac=mac, src_ip="10.77.0.1",
                                   dst_ip="10.77.0.2", sport=50000, dqpn=0x300,
                                   opcode=roce.Opcode.SEND_ONLY, payload_len=128, ecn=ecn)
           for ecn in (roce.ECN_ECT0, roce.ECN_CE)}
    ce = {3, 4, 11, 17, 18}
    try:
        for seq in range(20):
            t = tpl[roce.ECN_CE if seq in ce else roce.ECN_ECT0]
            now = roce.now_ns()
            tx.send(t.fill(seq, False, 9, 0x1234, seq, seq, 0, 1, 128, now, now))
            time.sleep(0.001)
    finally:
        tx.close()
        time.sleep(0.2)
        done.set()
        th.join()
        back_done.set()
        bth.join()
    sock_r.close()
    back.close()
    s = rec.finish({9: 20})[9]
    assert s.packets == 20 and s.ce == 5 and s.lost == 0
    assert back_rx.cnps_by_qp == {0x1234: 5}
    assert back_rx.acks_by_qp == {}


def test_receiver_socket_counts_what_it_could_not_hold(vpair):
    """A receiver that falls behind loses frames in its socket, not in the fabric:
    socket_drops says how many (and starts from zero again after each read)."""
    from dataplane.kernel.netns import in_netns
    with in_netns(vpair["rx_ns"]):
        sock = rxmod.open_socket(vpair["rx_if"], rcvbuf=4096)   # room for a few frames only
    try:
        assert rxmod.socket_drops(sock) == 0
        tx_sock = sender.open_tx_socket(vpair["tx_if"], vpair["tx_ns"])
        frame = b"\xff" * 6 + b"\x02" * 6 + b"\x08\x00" + bytes(986)
        try:
            for _ in range(200):
                tx_sock.send(frame)
        finally:
            tx_sock.close()
        assert _wait_for_drops(sock) > 100
        assert rxmod.socket_drops(sock) == 0
    finally:
        sock.close()


def _wait_for_drops(sock, timeout_s: float = 5.0) -> int:
    deadline = time.monotonic() + timeout_s
    total = 0
    while time.monotonic() < deadline:
        total += rxmod.socket_drops(sock)
        if total > 100:
            break
        time.sleep(0.02)
    return total
