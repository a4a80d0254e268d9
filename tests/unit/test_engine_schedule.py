"""The native send engine without sockets: its schedule file, and the frames it builds
(--dump: a virtual clock that jumps to each due time) against the Python sender's,
byte for byte and in the same order, under the same virtual clock."""
from __future__ import annotations

import subprocess
import types

import pytest
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from dataplane.nic import engine
from dataplane.traffic import sender
from dataplane.traffic.workload import Flow, Message
from dataplane.wire import roce

START = 5_000_000_000
MAC_A, MAC_B, MAC_C = "02:00:00:00:0a:01", "02:00:00:00:0b:01", "02:00:00:00:0c:01"


def flow(flow_id: int, sizes, *, offsets=None, rate_bps=1e9, opcode="send", mtu=1024,
         dscp=26, src_ip="10.1.0.1", dst_ip="10.2.0.1") -> Flow:
    offsets = offsets or [0] * len(sizes)
    msgs = tuple(Message(msg_id=100 * flow_id + i, size=s, start_ns=o)
                 for i, (s, o) in enumerate(zip(sizes, offsets)))
    return Flow(flow_id=flow_id, cls="mice", src_host="a", src_ifname="eth0", src_ip=src_ip,
                dst_host="b", dst_ifname="eth0", dst_ip=dst_ip, src_port=49152 + flow_id,
                dst_port=roce.ROCE_PORT, src_qp=0x100 + flow_id, dst_qp=0x200 + flow_id,
                opcode=opcode, dscp=dscp, rate_bps=rate_bps, mtu=mtu, messages=msgs)


@pytest.fixture(scope="module")
def binary():
    return engine.engine_binary()


class _FakeClock:
    """send_flows' clock, virtual: sleeping jumps exactly to the time it waits for
    (spin_ns=0 makes _wait_until always sleep), sending takes no time."""

    def __init__(self, t: int):
        self.t = t

    def monotonic_ns(self) -> int:
        return self.t

    def monotonic(self) -> float:
        return self.t / 1e9

    def sleep(self, s: float) -> None:
        self.t += round(s * 1e9) + sender.WAKE_EARLY_NS


class _FakeSock:
    def __init__(self):
        self.frames: list[bytes] = []

    def send(self, buf) -> int:
        self.frames.append(bytes(buf))
        return len(buf)


def python_frames(monkeypatch, items, *, duration_s=None, burst=8, burst_ns=20_000_000) -> list[bytes]:
    """What send_flows sends for one port's (flow, src_mac, dst_mac[, psn0]) under the
    virtual clock, started at START."""
    framers = []
    for item in items:
        f, smac, dmac = item[:3]
        fr = sender.FlowFramer(f, smac, dmac, psn0=item[3] if len(item) > 3 else None)
        it = fr.packets()
        first = next(it, None)
        framers.append(None if first is None else (fr, it, first))
    prepared = sender.PreparedFlows([i[0] for i in items], framers)
    clock = _FakeClock(START)
    monkeypatch.setattr(sender, "time", types.SimpleNamespace(
        monotonic_ns=clock.monotonic_ns, monotonic=clock.monotonic, sleep=clock.sleep))
    sock = _FakeSock()
    rep = sender.send_flows(sock, prepared, duration_s=duration_s, burst=burst, burst_ns=burst_ns,
                            spin_ns=0, start_ns=START)
    monkeypatch.undo()
    assert rep.errors == 0 and clock.t >= START
    return sock.frames


def engine_frames(tmp_path, ports, flows, **kw):
    path = tmp_path / "s.sched"
    n = engine.write_schedule(path, ports, flows, **kw)
    rep = engine.dump_frames(path, tmp_path / "s.dump", start_ns=START)
    return n, rep, engine.read_dump(tmp_path / "s.dump")


MIXED = {
    "a:eth0": [
        # small (grows to the railab header), exactly the header, mtu multiples, a last
        # chunk shorter than the header (the one before it gives up bytes), odd sizes (pad)
        (flow(1, [10, 48, 1024, 2048, 1044, 3001, 49], offsets=[0, 0, 1000, 5000, 5000, 9000, 20000],
              rate_bps=2e9), MAC_A, MAC_B),
        (flow(2, [10, 48, 1024, 2048, 1044, 3001, 4097], rate_bps=5e8, opcode="write"), MAC_A, MAC_C),
        (flow(3, [64] * 20, offsets=[i * 3000 for i in range(20)], rate_bps=0, mtu=256), MAC_A, MAC_B),
        (flow(4, [300, 5000], rate_bps=1e9, opcode="write", mtu=256, dscp=0), MAC_A, MAC_C),
    ],
    "a:eth1": [
        (flow(5, [9000, 100], rate_bps=3e9, mtu=4096, dscp=63, src_ip="10.1.1.1"), MAC_C, MAC_A),
        # PSN wraps at 2^24 inside a message
        (flow(6, [1024 * 6], rate_bps=1e9, opcode="write"), MAC_C, MAC_B, roce.PSN_MASK - 2),
        (flow(7, []), MAC_C, MAC_B),
    ],
}
PORTS = {"a:eth0": ("nsA", "eth0"), "a:eth1": (None, "eth1")}


def _by_port(records, nports):
    out = [[] for _ in range(nports)]
    for port, _fi, _due, _ts, frame in records:
        out[port].append(frame)
    return out


def test_schedule_round_trip(tmp_path):
    path = tmp_path / "s.sched"
    n = engine.write_schedule(path, PORTS, MIXED, duration_s=1.5, burst=4, burst_ns=123)
    assert n == sum(f[0].total_packets for items in MIXED.values() for f in items)
    s = engine.read_schedule(path)
    assert path.read_bytes()[:8] == b"RLENGSCH" and s["version"] == 2 and s["transport"] is None
    assert s["ports"] == [("nsA", "eth0"), ("", "eth1")]
    assert (s["burst"], s["burst_ns"], s["duration_ns"]) == (4, 123, 1_500_000_000)
    got = {f["flow_id"]: f for f in s["flows"]}
    for key, items in MIXED.items():
        for item in items:
            f = item[0]
            g = got[f.flow_id]
            assert g["port"] == list(PORTS).index(key)
            assert (g["src_mac"], g["dst_mac"]) == (item[1], item[2])
            assert (g["src_ip"], g["dst_ip"], g["src_port"]) == (f.src_ip, f.dst_ip, f.src_port)
            assert (g["opcode"], g["dscp"], g["ecn"], g["mtu"]) == (f.opcode, f.dscp, roce.ECN_ECT0, f.mtu)
            assert (g["dst_qp"], g["src_qp"], g["rate_bps"]) == (f.dst_qp, f.src_qp, f.rate_bps)
            assert g["psn0"] == (item[3] if len(item) > 3 else engine.default_psn0(f.flow_id))
            assert g["messages"] == [(m.msg_id, m.size, m.start_ns) for m in f.messages]
    assert sorted(f["fb_slot"] for f in s["flows"]) == list(range(len(s["flows"])))


def test_a_closed_loop_schedule_carries_its_transport(tmp_path):
    path = tmp_path / "s.sched"
    rel = engine.Reliable("selective-repeat", window=32, rto_ns=5_000_000,
                          line_bps={"a:eth0": 2e7, "a:eth1": 8e7}, burst_packets=1,
                          dcqcn={"g": 1 / 256, "alpha_period_ns": 10, "rate_period_ns": 20,
                                 "byte_counter": 1 << 20, "fast_recovery": 5, "rai_fraction": 1e-3,
                                 "rhai_fraction": 1e-2, "min_rate_fraction": 1e-3},
                          limit_ns=7, sample_ns=9)
    engine.write_schedule(path, PORTS, MIXED, reliable=rel)
    t = engine.read_schedule(path)["transport"]
    assert t == {"kind": "selective-repeat", "window": 32, "rto_ns": 5_000_000, "burst_packets": 1,
                 "dcqcn": True, "limit_ns": 7, "sample_ns": 9, "line_bps": [2e7, 8e7]}


def test_a_closed_loop_schedule_needs_the_nics_feedback(tmp_path, binary):
    path = tmp_path / "s.sched"
    engine.write_schedule(path, PORTS, MIXED,
                          reliable=engine.Reliable("go-back-n", 16, 1000, {"a:eth0": 1e7, "a:eth1": 1e7}))
    proc = _run(binary, path, "--dump", tmp_path / "d")
    assert proc.returncode == 2 and "no --dump" in proc.stderr
    proc = _run(binary, path)
    assert proc.returncode == 2 and "--feedback-fd" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_a_pfc_schedule_carries_its_plan(tmp_path):
    path = tmp_path / "s.sched"
    plan = engine.PausePlan.from_host_plan({"priorities": {"26": 3, "48": 6}, "scale": 1e-3,
                                            "watchdog_s": 200e-6, "restore_s": 1e-3},
                                           {"a:eth1": 4})
    assert (plan.watchdog_ns, plan.restore_ns) == (200_000_000, 1_000_000_000)     # 1,000x
    engine.write_schedule(path, PORTS, MIXED, pfc=plan)
    s = engine.read_schedule(path)
    assert s["pfc"] == {"watchdog_ns": 200_000_000, "restore_ns": 1_000_000_000,
                        "priorities": {26: 3, 48: 6}, "slots": [None, 4]}
    assert engine.port_reports({"pfc": {"1": {"paused_waits": 2}}}, list(PORTS)) == \
        {"a:eth1": {"paused_waits": 2}}
    with pytest.raises(ValueError, match="priority 9"):
        engine.PausePlan({26: 9}, {}).section(list(PORTS))


def test_under_pfc_the_burst_credit_is_one_packet(tmp_path, monkeypatch, binary):
    """--dump has no NIC, so nothing is paused; the pacing is send_flows' with burst 1 and
    no burst_ns, as the Python hosts send under PFC, whatever the schedule's burst."""
    items = [(flow(12, [1024] * 20, offsets=[0] * 10 + [50_000] * 10, rate_bps=4e8), MAC_A, MAC_B)]
    ports = {"p": (None, "eth0")}
    _, rep, records = engine_frames(tmp_path, ports, {"p": items}, burst=8, burst_ns=20_000_000,
                                    pfc=engine.PausePlan({26: 3}, {"p": 0}))
    assert (rep["engine"]["burst"], rep["engine"]["burst_ns"]) == (1, 0)
    assert [r[4] for r in records] == python_frames(monkeypatch, items, burst=1, burst_ns=0)
    assert rep["pfc"] == {"0": {"pause_frames_received": 0, "xon_received": 0, "watchdog_trips": 0,
                                "paused_waits": 0, "watchdog_drops": 0, "paused_ns": {}}}


def test_a_pfc_schedule_with_pause_slots_needs_the_nics_pauses(tmp_path, binary):
    path = tmp_path / "s.sched"
    engine.write_schedule(path, PORTS, MIXED, pfc=engine.PausePlan({26: 3}, {"a:eth0": 0}))
    proc = _run(binary, path)
    assert proc.returncode == 2 and "--pause-fd" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_frames_byte_identical_to_the_python_sender(tmp_path, monkeypatch, binary):
    n, rep, records = engine_frames(tmp_path, PORTS, MIXED)
    assert rep["packets"] == n == len(records) and rep["errors"] == 0
    assert rep["engine"]["dump"] is True and rep["engine"]["sockets"] == 0
    per_port = _by_port(records, len(PORTS))
    for pi, key in enumerate(PORTS):
        want = python_frames(monkeypatch, MIXED[key])
        assert len(per_port[pi]) == len(want), key
        for k, (a, b) in enumerate(zip(per_port[pi], want)):
            assert a == b, f"{key}: frame {k} differs"
    assert rep["per_flow_packets"] == {str(f[0].flow_id): f[0].total_packets
                                       for items in MIXED.values() for f in items}
    # the virtual clock puts every frame at its due time
    assert all(due == ts for _p, _f, due, ts, _fr in records)
    assert rep["lateness_ns"]["max"] == 0 and rep["lateness_ns"]["count"] == n


def test_pacing_order_and_duration_cut_match_the_python_sender(tmp_path, monkeypatch, binary):
    """Two paced flows on one port and a short duration: the same frames (ts stamps in
    them) in the same order, cut at the same packet."""
    items = [(flow(10, [4096] * 30, rate_bps=8e8), MAC_A, MAC_B),
             (flow(11, [1000] * 40, offsets=[i * 7000 for i in range(40)], rate_bps=4e8), MAC_A, MAC_C)]
    ports = {"p": (None, "eth0")}
    _, rep, records = engine_frames(tmp_path, ports, {"p": items}, duration_s=100e-6, burst=2,
                                    burst_ns=0)
    want = python_frames(monkeypatch, items, duration_s=100e-6, burst=2, burst_ns=0)
    assert 0 < len(want) < sum(i[0].total_packets for i in items)
    assert [r[4] for r in records] == want
    assert rep["engine"]["cut_by_duration"] is True
    # paced: consecutive frames of a flow are at least their interval apart
    last = {}
    for _p, fi, _due, ts, frame in records:
        if fi == 0 and fi in last:
            assert ts - last[fi][0] >= int(last[fi][1] * 8e9 / 8e8)
        last[fi] = (ts, len(frame))


def test_frames_parse_with_scapy_and_their_icrc_is_right(tmp_path, binary):
    _, _, records = engine_frames(tmp_path, PORTS, MIXED)
    flows = {f[0].flow_id: f for items in MIXED.values() for f in items}
    for _port, _fi, _due, ts, frame in records:
        p = Ether(frame)
        bth = p[BTH]
        hdr = roce.RailabHeader.unpack_from(frame, 54 + (16 if roce.Opcode(bth.opcode).has_reth else 0))
        f, smac, dmac = flows[hdr.flow_id][:3]
        psn0 = flows[hdr.flow_id][3] if len(flows[hdr.flow_id]) > 3 else engine.default_psn0(f.flow_id)
        assert (p[Ether].src, p[Ether].dst) == (smac, dmac)
        assert (p[IP].src, p[IP].dst, p[IP].tos, p[IP].ttl, p[IP].flags) == \
            (f.src_ip, f.dst_ip, f.dscp << 2 | roce.ECN_ECT0, 64, "DF")
        assert (p[UDP].sport, p[UDP].dport) == (f.src_port, roce.ROCE_PORT)
        assert bth.dqpn == f.dst_qp and bth.psn == (psn0 + hdr.seq) & roce.PSN_MASK
        msg = next(m for m in f.messages if m.msg_id == hdr.msg_id)
        chunks = roce.segment_message(msg.size, f.mtu)
        ops = roce.message_opcodes(len(chunks), f.opcode)
        assert hdr.msg_pkts == len(chunks) and bth.opcode == ops[hdr.msg_idx]
        assert bth.ackreq == (hdr.msg_idx == len(chunks) - 1)
        assert hdr.msg_bytes == msg.size and hdr.ts_ns == ts and hdr.src_qp == f.src_qp
        q = roce.parse(frame, verify=True)
        assert q.icrc_ok and q.payload_len == chunks[hdr.msg_idx]
        if q.reth is not None:
            assert q.reth == (0, f.dst_qp, msg.size)
        rebuilt = Ether(frame)
        rebuilt[BTH].icrc = None            # scapy computes its own
        assert raw(rebuilt)[-4:] == frame[-4:]
        del p[IP].chksum
        assert raw(Ether(raw(p)))[14:34] == frame[14:34]     # IP checksum as scapy computes it


def test_psn_wraps_at_24_bits(tmp_path, binary):
    items = [(flow(6, [1024 * 6], opcode="write"), MAC_C, MAC_B, roce.PSN_MASK - 2)]
    _, _, records = engine_frames(tmp_path, {"p": (None, "eth0")}, {"p": items})
    psns = [roce.parse(r[4]).psn for r in records]
    assert psns == [roce.PSN_MASK - 2, roce.PSN_MASK - 1, roce.PSN_MASK, 0, 1, 2]
    seqs = [roce.parse(r[4]).hdr.seq for r in records]
    assert seqs == list(range(6))


def test_message_start_stamp_is_the_first_packets_send_time(tmp_path, binary):
    items = [(flow(1, [3000, 3000], rate_bps=1e8), MAC_A, MAC_B)]
    _, _, records = engine_frames(tmp_path, {"p": (None, "eth0")}, {"p": items})
    first = {}
    for *_x, ts, frame in records:
        h = roce.parse(frame).hdr
        first.setdefault(h.msg_id, ts)
        assert h.msg_start_ns == first[h.msg_id]
    assert len(first) == 2 and len(records) == 6


def _run(binary, *args):
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("mangle, says", [
    (lambda b: b"XXXXXXXX" + b[8:], "no RLENGSCH magic"),
    (lambda b: b[:8] + (3).to_bytes(4, "little") + b[12:], "version 3"),
    (lambda b: b[:100], "truncated"),
    (lambda b: b + b"\0", "bytes after the last flow"),
    (lambda b: b"", "truncated"),
])
def test_bad_schedules_give_one_clear_line(tmp_path, binary, mangle, says):
    good = tmp_path / "good.sched"
    engine.write_schedule(good, PORTS, MIXED)
    bad = tmp_path / "bad.sched"
    bad.write_bytes(mangle(good.read_bytes()))
    proc = _run(binary, bad, "--dump", tmp_path / "d")
    assert proc.returncode != 0 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and lines[0].startswith("railab-engine: ")
    with pytest.raises(engine.EngineError, match=says):
        engine.dump_frames(bad, tmp_path / "d")


def test_bad_flow_fields_and_missing_files(tmp_path, binary):
    path = tmp_path / "s.sched"
    engine.write_schedule(path, {"p": (None, "eth0")}, {"p": [(flow(1, [100]), MAC_A, MAC_B)]})
    data = bytearray(path.read_bytes())     # write_schedule refuses such an mtu: patch the file
    mtu_at = engine._HDR.size + engine._PORT.size + 48
    assert int.from_bytes(data[mtu_at:mtu_at + 4], "little") == 1024
    data[mtu_at:mtu_at + 4] = (64).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    proc = _run(binary, path, "--dump", tmp_path / "d")
    assert proc.returncode == 2 and "mtu 64" in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = _run(binary, tmp_path / "nope.sched")
    assert proc.returncode == 2 and "No such file" in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = _run(binary)
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_a_missing_namespace_fails_before_ready(tmp_path, binary):
    path = tmp_path / "s.sched"
    engine.write_schedule(path, {"p": ("railab-no-such-netns", "eth0")}, {"p": []})
    with pytest.raises(engine.EngineError, match="railab-no-such-netns"):
        engine.SendEngine(path)


def test_binary_is_cached_and_named(binary):
    assert binary.name.startswith(engine.NAME)
    assert engine.engine_binary() == binary
