"""The native send engine over a real veth pair between two namespaces: every frame of a
schedule arrives (an AF_PACKET capture at the far end), pacing never sends a packet before
its due time and holds a rate loosely, the duration cuts a run, and nothing is left behind
(the process is reaped, its sockets die with it). No tight timing is asserted: the machine
is shared."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest

from dataplane.kernel.netns import in_netns
from dataplane.nic import engine
from dataplane.traffic.workload import Flow, Message
from dataplane.wire import roce

from .conftest import sh

ETH_P_ALL = 0x0003
MAC_A, MAC_B = "02:00:00:00:0e:01", "02:00:00:00:0e:02"


def flow(flow_id, sizes, *, offsets=None, rate_bps=1e9, opcode="send", mtu=1024) -> Flow:
    offsets = offsets or [0] * len(sizes)
    return Flow(flow_id=flow_id, cls="mice", src_host="a", src_ifname="e0", src_ip="10.30.0.1",
                dst_host="b", dst_ifname="e1", dst_ip="10.30.0.2", src_port=50000 + flow_id,
                dst_port=roce.ROCE_PORT, src_qp=0x10 + flow_id, dst_qp=0x20 + flow_id, opcode=opcode,
                dscp=26, rate_bps=rate_bps, mtu=mtu,
                messages=tuple(Message(i, s, o) for i, (s, o) in enumerate(zip(sizes, offsets))))


@pytest.fixture
def pair(netns):
    a, b = netns("enga"), netns("engb")
    sh(["ip", "link", "add", "e0", "netns", a, "type", "veth", "peer", "name", "e1", "netns", b])
    for ns, ifname in ((a, "e0"), (b, "e1")):
        sh(["ip", "-n", ns, "link", "set", ifname, "addrgenmode", "none"])
        sh(["ip", "-n", ns, "link", "set", ifname, "up"])
    return a, b


class Capture:
    """An AF_PACKET socket on the far end, opened before the engine starts, read after."""

    def __init__(self, ns: str, ifname: str):
        with in_netns(ns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            self.sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)     # SO_RCVBUFFORCE
            self.sock.bind((ifname, ETH_P_ALL))

    def frames(self) -> list[roce.RocePacket]:
        self.sock.settimeout(0.3)
        out = []
        try:
            while True:
                p = roce.parse(self.sock.recv(16384), verify=True)
                if p is not None:
                    out.append(p)
        except (socket.timeout, BlockingIOError):
            pass
        self.sock.close()
        return out


def run(path, **kw) -> dict:
    with engine.SendEngine(path, **kw) as eng:
        eng.go(time.monotonic_ns() + 2_000_000)
        return eng.result(timeout=60)


def test_every_frame_arrives_in_order_with_a_good_icrc(pair, tmp_path):
    a, b = pair
    flows = [(flow(1, [10, 1024, 3000, 48, 2049] * 10, rate_bps=2e8), MAC_A, MAC_B),
             (flow(2, [4096] * 20, rate_bps=3e8, opcode="write"), MAC_A, MAC_B),
             (flow(3, [64] * 100, offsets=[i * 50_000 for i in range(100)], rate_bps=0), MAC_A, MAC_B)]
    n = engine.write_schedule(tmp_path / "s", {"a:e0": (a, "e0")}, {"a:e0": flows})
    cap = Capture(b, "e1")
    rep = run(tmp_path / "s")
    got = cap.frames()
    assert rep["packets"] == n == len(got) and rep["errors"] == 0
    assert rep["per_flow_packets"] == {f[0].flow_id: f[0].total_packets for f in flows}
    assert rep["engine"]["sockets"] == 1 and rep["lateness_ns"]["count"] == n
    assert all(p.icrc_ok and p.hdr is not None for p in got)
    for f, _s, _d in flows:
        seqs = [p.hdr.seq for p in got if p.hdr.flow_id == f.flow_id]
        assert seqs == list(range(f.total_packets)), f.flow_id
        psns = [p.psn for p in got if p.hdr.flow_id == f.flow_id]
        assert psns == [(engine.default_psn0(f.flow_id) + s) & roce.PSN_MASK for s in seqs]


def test_pacing_never_sends_early_and_holds_the_rate_loosely(pair, tmp_path):
    a, b = pair
    pps, count = 20_000, 2_000
    frame = roce.frame_len(1024)
    f = flow(1, [1024] * count, rate_bps=frame * 8 * pps)
    engine.write_schedule(tmp_path / "s", {"p": (a, "e0")}, {"p": [(f, MAC_A, MAC_B)]})
    cap = Capture(b, "e1")
    with engine.SendEngine(tmp_path / "s") as eng:
        start = eng.go(time.monotonic_ns() + 2_000_000)
        rep = eng.result(timeout=60)
    got = cap.frames()
    assert rep["packets"] == count == len(got)
    interval = int(frame * 8e9 / f.rate_bps)
    # GCRA: packet k is never due before start + k * interval (catching up only bursts)
    assert all(p.hdr.ts_ns >= start + p.hdr.seq * interval for p in got)
    expected_s = (count - 1) * interval / 1e9
    assert expected_s <= rep["elapsed_s"] < expected_s * 2 + 1.0
    assert rep["lateness_ns"]["count"] == count and rep["lateness_ns"]["max"] >= rep["lateness_ns"]["p50"]


def test_the_duration_cuts_the_run(pair, tmp_path):
    a, _b = pair
    f = flow(1, [200] * 100_000, rate_bps=roce.frame_len(200) * 8 * 2_000)    # 50 s at 2 k/s
    engine.write_schedule(tmp_path / "s", {"p": (a, "e0")}, {"p": [(f, MAC_A, MAC_B)]}, duration_s=0.2)
    rep = run(tmp_path / "s")
    assert rep["engine"]["cut_by_duration"] is True
    assert 50 <= rep["packets"] <= 401 and rep["elapsed_s"] < 2.0


def _engines() -> set[int]:
    out = subprocess.run(["pgrep", "-f", engine.NAME], capture_output=True, text=True).stdout
    return {int(x) for x in out.split()}


def test_nothing_is_left_behind(pair, tmp_path):
    a, _b = pair
    f = flow(1, [1024] * 100_000, rate_bps=roce.frame_len(1024) * 8 * 1_000)
    engine.write_schedule(tmp_path / "s", {"p": (a, "e0")}, {"p": [(f, MAC_A, MAC_B)]})
    # closed before go: killed and reaped
    eng = engine.SendEngine(tmp_path / "s")
    pid = eng.pid
    assert pid in _engines()
    eng.close()
    assert eng.proc.returncode is not None and pid not in _engines()
    # an exception inside the block while it sends
    with pytest.raises(KeyError):
        with engine.SendEngine(tmp_path / "s") as eng:
            eng.go()
            pid = eng.pid
            raise KeyError("boom")
    assert eng.proc.returncode is not None and not os.path.exists(f"/proc/{pid}")
    # SIGTERM while sending: it stops and still reports
    with engine.SendEngine(tmp_path / "s") as eng:
        eng.go()
        time.sleep(0.1)
        eng.stop()
        rep = eng.result(timeout=10)
    assert rep["engine"]["stopped"] is True and 0 < rep["packets"] < 100_000
    assert eng.proc.returncode == 0
    # stdin closed / SIGTERM before go: exit 0, nothing sent
    for how in ("stdin", "term"):
        with engine.SendEngine(tmp_path / "s") as eng:
            if how == "stdin":
                eng.proc.stdin.close()
            else:
                eng.proc.send_signal(signal.SIGTERM)
            assert eng.proc.wait(timeout=10) == 0
    assert not _engines() & {eng.pid}
    # the sockets died with the processes: no packet socket is left in the sender's namespace
    with in_netns(a):
        with open("/proc/thread-self/net/packet") as fh:
            assert fh.read().splitlines()[1:] == []


def test_one_engine_sends_for_ports_in_two_namespaces(netns, tmp_path):
    """Each port's socket is made inside its own namespace (setns there and back)."""
    a1, a2, b = netns("engs1"), netns("engs2"), netns("engr")
    for ns, tx, rx in ((a1, "t1", "r1"), (a2, "t2", "r2")):
        sh(["ip", "link", "add", tx, "netns", ns, "type", "veth", "peer", "name", rx, "netns", b])
        for n, ifname in ((ns, tx), (b, rx)):
            sh(["ip", "-n", n, "link", "set", ifname, "addrgenmode", "none"])
            sh(["ip", "-n", n, "link", "set", ifname, "up"])
    ports = {"h1:t1": (a1, "t1"), "h2:t2": (f"/var/run/netns/{a2}", "t2")}
    flows = {"h1:t1": [(flow(1, [2000] * 30, rate_bps=5e8), MAC_A, MAC_B)],
             "h2:t2": [(flow(2, [100] * 40, rate_bps=1e8, opcode="write"), MAC_A, MAC_B),
                       (flow(3, [5000] * 5, rate_bps=0), MAC_A, MAC_B)]}
    n = engine.write_schedule(tmp_path / "s", ports, flows)
    caps = {"r1": Capture(b, "r1"), "r2": Capture(b, "r2")}
    rep = run(tmp_path / "s", fifo=False)
    got = {k: c.frames() for k, c in caps.items()}
    assert rep["packets"] == n and rep["engine"]["sockets"] == 2 and rep["engine"]["fifo"] is False
    assert {p.hdr.flow_id for p in got["r1"]} == {1} and {p.hdr.flow_id for p in got["r2"]} == {2, 3}
    assert len(got["r1"]) + len(got["r2"]) == n
    assert rep["per_flow_packets"] == {1: 60, 2: 40, 3: 25}


def test_go_without_a_time_starts_now_and_a_bad_line_is_one_clear_error(pair, tmp_path):
    a, _b = pair
    engine.write_schedule(tmp_path / "s", {"p": (a, "e0")}, {"p": [(flow(1, [100] * 10), MAC_A, MAC_B)]})
    with engine.SendEngine(tmp_path / "s") as eng:
        eng.proc.stdin.write(b"go\n")
        eng.proc.stdin.flush()
        assert eng.result(timeout=30)["packets"] == 10
    with engine.SendEngine(tmp_path / "s") as eng:
        eng.proc.stdin.write(b"start 5\n")
        eng.proc.stdin.flush()
        with pytest.raises(engine.EngineError, match=r"exit 2\): railab-engine: stdin: expected 'go <start_ns>'"):
            eng.result(timeout=30)
