"""The switch program against hostile frames (dataplane.bench.hostile), through
BPF_PROG_TEST_RUN, with hypothesis choosing and shrinking the frames.

Properties, each checked on every one of 2,500 frames:
- the program runs on every frame and never aborts; it forwards only what the model's
  routes and groups allow, rewritten as a router must (hostile.judge);
- every frame lands in exactly one verdict counter, and a drop in exactly one drop
  reason (a PFC frame the port accepts is the one drop with no reason);
- frames that are dropped or passed leave the flowlet table and the PFC state alone,
  but for PFC frames, which may change only the PFC state.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dataplane.kernel.netns import in_netns
from dataplane.bench import hostile
from dataplane.xdp import progtest

FRAMES = 2500
# derandomized: CI sees the same frames each run, and a failure names its frame
SETTINGS = settings(max_examples=FRAMES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

ops = st.lists(st.tuples(st.sampled_from(hostile.MUTATIONS), st.integers(0, 1 << 16), st.integers(0, 1 << 32)),
               max_size=4)


def _hostile(base: int, mutations) -> bytes:
    # the corpus is built on first use, not at import: collecting the suite stays fast
    return hostile.mutate(hostile.corpus()[base], mutations)


# named functions, not lambdas: hypothesis describes lambdas by parsing their source,
# which cost 10 ms a frame here
frames = st.builds(_hostile, st.integers(0, len(hostile.KINDS) * len(hostile.DESTINATIONS) * hostile.CORPUS_VARIANTS - 1),
                   ops).filter(hostile.deliverable)


@pytest.fixture(scope="module")
def switch(dp, module_netns):
    ns = module_netns("fuzz")
    sw = hostile.FuzzSwitch(dp, ns)
    sw.program()
    try:
        with in_netns(ns):
            yield sw
    finally:
        sw.unprogram()


def _state(dp):
    flowlets = sorted((bytes(k), bytes(v)) for k, v in dp.maps.items("flowlets"))
    pfc = bytes(dp.pfc_port(hostile.INGRESS))
    return flowlets, pfc


@SETTINGS
@given(frame=frames)
def test_hostile_frames(switch, frame):
    """Every property on every frame (one run of the program per frame)."""
    dp = switch.dp
    verdicts, reasons = dp.verdict_counters(), dp.drop_counters()
    rx = dp.port_counters(hostile.INGRESS)["rx_packets"]
    flowlets, pfc = _state(dp)
    result = switch.run(frame)
    # forwarded only where routes and groups allow, rewritten as a router must
    assert hostile.judge(frame, result.verdict, result.data) == [], frame.hex()
    # one verdict counter; one drop reason (none for a PFC frame the port took)
    grew = {v: c["packets"] - verdicts[v]["packets"] for v, c in dp.verdict_counters().items()}
    assert grew == {v: int(v == result.verdict) for v in grew}, frame.hex()
    dropped_for = {r: n - reasons[r] for r, n in dp.drop_counters().items() if n != reasons[r]}
    pfc_frame = frame[12:14] == b"\x88\x08"
    if result.verdict == "drop":
        assert list(dropped_for.values()) in ([1], [] if pfc_frame else [1]), (dropped_for, frame.hex())
    else:
        assert dropped_for == {}, frame.hex()
    assert dp.port_counters(hostile.INGRESS)["rx_packets"] == rx + 1
    # a frame not forwarded leaves the flowlet table alone, and the PFC state unless it is PFC
    if result.verdict != "redirect":
        after_flowlets, after_pfc = _state(dp)
        assert after_flowlets == flowlets, frame.hex()
        assert after_pfc == pfc or pfc_frame, frame.hex()


def test_the_judge_catches_a_frame_sent_where_no_route_allows():
    """The property can fail: a forwarded frame rewritten towards a next hop outside its
    route's group, an unroutable frame forwarded, a bad rewrite."""
    frame = hostile.base_frame("udp", hostile.DESTINATIONS.index("10.4.0.1"), 3)
    ttl = frame[22]
    good = bytearray(frame)
    good[0:6] = bytes.fromhex(hostile.NH_MAC[hostile.EGRESS[0]].replace(":", ""))
    good[6:12] = bytes.fromhex(hostile.PORT_MAC[hostile.EGRESS[0]].replace(":", ""))
    if ttl > 1:
        good[22] = ttl - 1
        good[24:26] = b"\0\0"
        csum = sum(int.from_bytes(good[i:i + 2], "big") for i in range(14, 34, 2))
        while csum >> 16:
            csum = (csum & 0xFFFF) + (csum >> 16)
        good[24:26] = (~csum & 0xFFFF).to_bytes(2, "big")
        assert hostile.judge(frame, "redirect", bytes(good)) == []
    wrong_hop = bytearray(good)
    wrong_hop[0:6] = bytes.fromhex(hostile.NH_MAC[hostile.EGRESS[1]].replace(":", ""))
    assert hostile.judge(frame, "redirect", bytes(wrong_hop))
    unrouted = hostile.base_frame("udp", hostile.DESTINATIONS.index("10.9.9.9"), 3)
    assert hostile.judge(unrouted, "redirect", unrouted)
    changed = bytearray(good)
    changed[-1] ^= 0xFF
    assert hostile.judge(frame, "redirect", bytes(changed))
    assert hostile.judge(frame, "tx", frame) and hostile.judge(frame, "aborted", frame)


def test_the_fuzz_bench_reports_its_campaign():
    import json, subprocess, sys   # why: only this test runs the command line
    done = subprocess.run([sys.executable, "-m", "dataplane.cli.main", "bench", "fuzz", "--frames", "3000",
                           "--seed", "7", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["frames"] == 3000 and sum(result["verdicts"].values()) == 3000
    assert result["violations"] == 0 and result["examples"] == []
    assert set(result["verdicts"]) <= {"drop", "pass", "redirect"} and result["verdicts"]["redirect"] > 0
    assert result["pfc_frames_accepted"] <= result["pfc_frames"]
    assert sum(result["drop_reasons"].values()) + result["pfc_frames_accepted"] == result["verdicts"]["drop"]


@pytest.fixture(scope="module")
def nic():
    from dataplane.nic.responder import NicResponder   # why: the NIC's tests only
    with NicResponder(max_qps=64) as responder:
        yield responder


def _data_frame(index: int, mutations) -> bytes:
    return hostile.mutate(hostile.corpus_of("railab-data")[index], mutations)


# half of them railab's data frames: the NIC parses deeply only those
nic_frames = st.one_of(frames, st.builds(_data_frame, st.integers(0, len(hostile.DESTINATIONS) * hostile.CORPUS_VARIANTS - 1),
                                         ops).filter(hostile.deliverable))


@SETTINGS
@given(frame=nic_frames, consume=st.booleans(), open_loop=st.booleans())
def test_hostile_frames_at_the_nic(nic, frame, consume, open_loop):
    """The kernel NIC's responder: answers only data frames, only with a well-formed ACK or
    CNP to their sender, drops only what it was told to consume, never aborts."""
    nic.configure(mode="respond", consume=consume, open_loop=open_loop, cnp_interval_us=1.0)
    result = progtest.prog_test_run(nic.prog_fd, frame)
    assert hostile.judge_nic(frame, result.verdict, result.data, consume=consume) == [], frame.hex()
