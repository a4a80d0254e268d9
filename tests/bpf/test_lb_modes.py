"""Load-balancing modes, traffic matrix and the emulated egress port, run with
BPF_PROG_TEST_RUN on crafted frames (fast and deterministic; the live-lab versions
are in tests/lab/test_lb_*.py).

The egress port model is driven either by real frames (repeat > 1 runs the program
back to back, faster than any emulated port drains) or, where a test needs a
known load, by writing the port's queue state directly (poke_queue).
"""

from __future__ import annotations

import collections
import ctypes as ct
import time

import pytest
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from dataplane.xdp import abi
from dataplane.xdp.bpfio import BPF_F_LOCK
from dataplane.xdp.progtest import prog_test_run
from dataplane.xdp.switch import wcmp_slots

from .. import frames
from .conftest import run_frame, switch_bench

TC_ACT_OK, TC_ACT_REDIRECT = 0, 7      # linux/pkt_cls.h

SW = 3
IN = 201
EG = [202, 203, 204, 205]
ALL, SLOT, PORT_MAC, NH_MAC = frames.port_plan(IN, EG, first_slot=20, port_mac="02:00:00:03:00",
                                               nh_mac="02:00:00:04:00", base=200)
HOST_MAC = "02:00:00:00:bb:01"
G = 40                      # the group under test: 10.40.0.0/16, 4 members
G2 = 41                     # two members (EG[0], EG[1]): 10.41.0.0/16


@pytest.fixture(scope="module")
def lab(dp, module_netns):
    ports = {ifx: (SW, SLOT[ifx], PORT_MAC[ifx]) for ifx in ALL}
    with switch_bench(dp, module_netns, "lb", {SW: 0xabcd}, ports, groups=[G, G2]) as ns:
        dp.set_group(G, [(e, NH_MAC[e]) for e in EG])
        dp.set_group(G2, [(e, NH_MAC[e]) for e in EG[:2]])
        dp.add_route(SW, "10.40.0.0/16", G)
        dp.add_route(SW, "10.41.0.0/16", G2)
        yield ns
        for ifx in ALL:
            dp.set_port_model(ifx, speed_bps=0)


@pytest.fixture
def mode(dp, lab):
    """Set the group's mode (and parameters) for one test; back to ECMP afterwards."""
    def set_(m, group=G, **kw):
        dp.set_group_lb(group, mode=m, **kw)
    yield set_
    for g in (G, G2):
        dp.set_group_lb(g, mode="ecmp", clear_weights=True, flowlet_timeout_us=100, busy_util=0)
    for ifx in EG:
        dp.set_port_model(ifx, speed_bps=0)


udp = frames.udp_from(HOST_MAC, PORT_MAC[IN], dst="10.40.0.1")
egress_of = frames.egress_lookup(NH_MAC)


def roce(opcode, dst="10.40.0.1", **kw):
    return frames.roce(dst, smac=HOST_MAC, dmac=PORT_MAC[IN], opcode=opcode, **kw)


def run(dp, ns, frame, repeat=1):
    return run_frame(dp, ns, frame, IN, repeat)


def poke_queue(dp, ifindex, *, backlog_ns=0, util=0.0):
    """Give an emulated port a known backlog and utilisation (as if it had been busy)."""
    slot = ct.c_uint32(SLOT[ifindex])
    q = abi.PortQueue()
    assert dp.maps.lookup("port_queue", slot, q)
    now = time.monotonic_ns()
    q.t_free = now + backlog_ns
    q.util = int(util * abi.UTIL_ONE)
    q.win_start = now
    q.win_busy_ns = 0
    dp.maps.update("port_queue", slot, q, flags=BPF_F_LOCK)


def model_all(dp, speed_bps=10_000_000_000, buffer_bytes=10**11, **kw):
    for ifx in EG:
        dp.set_port_model(ifx, speed_bps=speed_bps, buffer_bytes=buffer_bytes, **kw)


def chi2_uniform(counts: list[int]) -> float:
    n, k = sum(counts), len(counts)
    return sum((c - n / k) ** 2 / (n / k) for c in counts)


CHI2_P001 = {1: 10.83, 2: 13.82, 3: 16.27}   # chi-square critical values, p = 0.001


# ---------------------------------------------------------------- spraying
def test_spray_rr_is_exact_round_robin(dp, lab, mode):
    mode("spray-rr")
    seq = [egress_of(run(dp, lab, udp())) for _ in range(40)]
    # one shared counter: consecutive packets take consecutive members
    idx = [EG.index(e) for e in seq]
    assert all((b - a) % 4 == 1 for a, b in zip(idx, idx[1:])), idx
    before = [m["packets"] for m in dp.member_counters(G)]
    res = run(dp, lab, udp(ttl=255), repeat=200)
    assert res.verdict == "redirect"
    got = [m["packets"] - b for m, b in zip(dp.member_counters(G), before)]
    assert got == [50, 50, 50, 50]


def test_spray_random_is_uniform(dp, lab, mode):
    mode("spray-random")
    before = [m["packets"] for m in dp.member_counters(G)]
    for _ in range(20):
        assert run(dp, lab, udp(ttl=255), repeat=200).verdict == "redirect"
    got = [m["packets"] - b for m, b in zip(dp.member_counters(G), before)]
    assert sum(got) == 4000
    assert chi2_uniform(got) < CHI2_P001[3], got


# ---------------------------------------------------------------- WCMP
def test_wcmp_slot_expansion():
    assert collections.Counter(wcmp_slots([1, 3])) == {0: 16, 1: 48}
    assert collections.Counter(wcmp_slots([1, 1, 1])) == {0: 21, 1: 21, 2: 21}
    assert collections.Counter(wcmp_slots([400e9, 100e9])) == {0: 51, 1: 13}
    assert collections.Counter(wcmp_slots([0, 2])) == {1: 64}
    with pytest.raises(ValueError):
        wcmp_slots([0, 0])


def test_wcmp_1_to_3(dp, lab, mode):
    mode("wcmp", group=G2, weights=[1, 3])
    got = collections.Counter(egress_of(run(dp, lab, udp("10.41.0.1", src=f"10.9.{i // 250}.{i % 250 + 1}",
                                                         sport=10000 + i)))
                              for i in range(2000))
    share = got[EG[0]] / 2000
    assert 0.22 <= share <= 0.28, dict(got)
    # flows stay put
    assert len({egress_of(run(dp, lab, udp("10.41.0.1", sport=777))) for _ in range(10)}) == 1


# ---------------------------------------------------------------- traffic matrix
def test_traffic_matrix_overrides_mode(dp, lab, mode):
    mode("spray-rr")
    flow = dict(src="10.9.0.2", dst="10.40.0.1", sport=1000, dport=2000, proto="udp")
    dp.tm_add(SW, **flow, egress_ifindex=EG[2], dmac=NH_MAC[EG[2]])
    try:
        assert {egress_of(run(dp, lab, udp())) for _ in range(20)} == {EG[2]}
        other = {egress_of(run(dp, lab, udp(sport=1001))) for _ in range(8)}
        assert other == set(EG), "other flows keep the group's mode"
        entry = dp.tm_list(SW)[0]
        assert entry["packets"] == 20 and entry["egress_ifindex"] == EG[2]
        assert dp.switch_config(SW)["traffic_matrix"]
    finally:
        assert dp.tm_del(SW, **flow)
    assert not dp.switch_config(SW)["traffic_matrix"]
    assert len({egress_of(run(dp, lab, udp())) for _ in range(8)}) == 4


# ---------------------------------------------------------------- flowlet
def test_flowlet_gap_moves_flow_to_least_loaded(dp, lab, mode):
    # 200 ms: the 30 back-to-back frames below stay one flowlet even on a busy machine
    mode("flowlet", group=G2, flowlet_timeout_us=200_000)
    model_all(dp, window_us=1_000_000)     # the poked utilisation stays current across the gap
    first = egress_of(run(dp, lab, udp("10.41.0.1", sport=4242)))
    other = EG[1] if first == EG[0] else EG[0]
    poke_queue(dp, first, backlog_ns=2_000_000_000, util=1.0)   # current member congested
    poke_queue(dp, other)
    for _ in range(30):   # back to back: same flowlet, never moves despite the load
        assert egress_of(run(dp, lab, udp("10.41.0.1", sport=4242))) == first
    time.sleep(0.25)      # gap > 200 ms: a new flowlet, to the least-loaded member
    assert egress_of(run(dp, lab, udp("10.41.0.1", sport=4242))) == other
    assert dp.flowlet_stats(G2)["flowlets"] >= 2


def test_flowlet_idle_fabric_keeps_flow(dp, lab, mode):
    mode("flowlet", group=G2, flowlet_timeout_us=500_000)
    model_all(dp)
    seen = {egress_of(run(dp, lab, udp("10.41.0.1", sport=5151))) for _ in range(50)}
    assert len(seen) == 1


def test_flowlet_restore_undoes_what_frames_did_since_the_snapshot(dp, lab, mode):
    # the agent's path trace runs frames through the program and then restores the
    # flowlet table: the flow that was there keeps its entry as it was, the traced one
    # leaves none, so its first real frame is placed by the load it meets then
    mode("flowlet", group=G, flowlet_timeout_us=500_000)
    model_all(dp)
    run(dp, lab, udp(sport=7100))
    saved = dp.flowlet_snapshot()
    for _ in range(3):
        run(dp, lab, udp(sport=7100))          # the existing entry's clock moves on
    run(dp, lab, udp(sport=7101))              # a new flow: a new entry
    assert dp.flowlet_snapshot() != saved and len(dp.flowlet_snapshot()) == len(saved) + 1
    assert dp.flowlet_restore(saved) == 2
    assert dp.flowlet_snapshot() == saved


def test_flowlet_choices_repeat_after_a_mode_set(dp, lab, mode):
    # an idle fabric ties every member: the scan starts where the flow's hash says, so 40
    # flows spread over the members, and forgetting the flowlets (as the agent does when
    # it sets a mode) gives every flow the same member again: a run can be repeated
    def choices():
        mode("flowlet", group=G, flowlet_timeout_us=500_000)
        model_all(dp, window_us=10_000_000)   # no window closes: every placement still counts
        dp.forget_flowlets([G])
        return [egress_of(run(dp, lab, udp(sport=7000 + i, size=1000))) for i in range(40)]

    first = choices()
    assert set(first) == set(EG), "idle members tie: first flowlets spread over all of them"
    assert choices() == first


def idle_members_expected_by_hashing(flows: int, members: int) -> float:
    """Balls into bins: members that none of `flows` uniform, independent picks hit."""
    return members * (1 - 1 / members) ** flows


def test_flowlets_starting_at_once_spread_no_worse_than_hashing(dp, lab, mode):
    """As many flowlets as members start inside one utilisation window, so the meter reads
    every member idle for all of them. DLB counts a flowlet just placed on a member as load
    until the meter catches up; without that they all read the same idle members and pile
    up. Over many flow sets (seeds), the members left idle must be far fewer than hashing
    leaves (balls into bins), and never more than ECMP leaves on the same flows."""
    trials, n = 60, len(EG)
    idle = {"flowlet": [], "ecmp": []}
    for trial in range(trials):
        sports = [20000 + trial * n + i for i in range(n)]
        for m in idle:
            mode(m, group=G, flowlet_timeout_us=3_000_000)
            model_all(dp, window_us=10_000_000)     # a fresh, idle meter on every member
            dp.forget_flowlets([G])
            used = {egress_of(run(dp, lab, udp(sport=sp, size=1000))) for sp in sports}
            idle[m].append(n - len(used))
    hashing = idle_members_expected_by_hashing(n, n)
    mean = {m: sum(v) / trials for m, v in idle.items()}
    print(f"idle members per {n} flowlets on {n} members, mean over {trials} flow sets: "
          f"flowlet {mean['flowlet']:.2f}, ecmp {mean['ecmp']:.2f}, balls into bins {hashing:.2f}")
    assert mean["flowlet"] <= hashing / 2, mean
    assert sum(idle["flowlet"]) <= sum(idle["ecmp"]), idle


def test_flowlet_busy_member_uses_short_timeout(dp, lab, mode):
    mode("flowlet", group=G2, flowlet_timeout_us=1_000_000, busy_util=0.5, busy_timeout_us=5_000)
    model_all(dp, window_us=100_000)   # utilisation stays current across the 10 ms sleeps
    first = egress_of(run(dp, lab, udp("10.41.0.1", sport=6161)))
    other = EG[1] if first == EG[0] else EG[0]
    poke_queue(dp, first, backlog_ns=10_000_000_000, util=0.9)   # busy: gap 5 ms applies
    poke_queue(dp, other)
    time.sleep(0.01)     # 10 ms: under the idle timeout (1 s), over the busy one (5 ms)
    assert egress_of(run(dp, lab, udp("10.41.0.1", sport=6161))) == other
    poke_queue(dp, other, backlog_ns=10_000_000_000, util=0.2)   # loaded but not "busy"
    poke_queue(dp, first)
    time.sleep(0.01)
    assert egress_of(run(dp, lab, udp("10.41.0.1", sport=6161))) == other


# ---------------------------------------------------------------- SprayLink
DATA_OPS = [0x00, 0x01, 0x02, 0x04, 0x06, 0x07, 0x08, 0x0a, 0x24]   # RC/UC SEND, WRITE
PROTO_OPS = [0x11, 0x81, 0x0c, 0x10, 0x64]                          # ACK, CNP, READ req/resp, UD


def test_spraylink_sprays_data_keeps_protocol_per_flow(dp, lab, mode):
    mode("spraylink")
    model_all(dp)
    data = collections.Counter(egress_of(run(dp, lab, roce(op))) for op in DATA_OPS for _ in range(12))
    assert len(data) == 4, "idle members tie: data packets spread over all of them"
    for op in PROTO_OPS:
        assert len({egress_of(run(dp, lab, roce(op, psn=i))) for i in range(12)}) == 1, hex(op)
    assert len({egress_of(run(dp, lab, roce(op))) for op in PROTO_OPS}) == 1, "one flow, one member"
    assert len({egress_of(run(dp, lab, udp(sport=9))) for _ in range(12)}) == 1


def test_spraylink_data_follows_least_queue(dp, lab, mode):
    mode("spraylink")
    model_all(dp)
    for i, ifx in enumerate(EG):
        poke_queue(dp, ifx, backlog_ns=(i + 1) * 1_000_000_000 if ifx != EG[2] else 0)
    assert {egress_of(run(dp, lab, roce(0x0a, psn=i))) for i in range(20)} == {EG[2]}


# ---------------------------------------------------------------- emulated port
def test_queue_tail_drop_and_ecn(dp, lab, mode):
    mode("spray-rr", group=G2)   # one flow, alternating over two emulated ports
    speed = 10_000               # 10 kb/s: a 1042-byte frame takes 0.83 s to drain, so the
    for ifx in EG[:2]:           # few ms this loop takes (even preempted) drain nothing
        dp.set_port_model(ifx, speed_bps=speed, buffer_bytes=20_000, ecn_bytes=5_000)
    before = {ifx: dp.port_counters(ifx) for ifx in EG[:2]}
    frame = udp("10.41.0.1", tos=0x02, size=1000)     # ECT(0)
    verdicts = collections.Counter(run(dp, lab, frame).verdict for _ in range(100))
    after = {ifx: dp.port_counters(ifx) for ifx in EG[:2]}
    sent = sum(after[i]["tx_packets"] - before[i]["tx_packets"] for i in EG[:2])
    full = sum(after[i]["drops"]["queue_full"] - before[i]["drops"]["queue_full"] for i in EG[:2])
    marked = sum(after[i]["ecn_marked"] - before[i]["ecn_marked"] for i in EG[:2])
    size = len(frame)
    assert verdicts == {"redirect": sent, "drop": full} and sent + full == 100
    assert sent == 2 * (20_000 // size), (sent, full)                        # each port's buffer
    # marked: frames that found more than 5,000 bytes queued (the first 5 of each port did not)
    assert marked == 2 * (20_000 // size - (5_000 // size + 1)), marked
    assert dp.drop_counters()["queue_full"] >= full
    state = dp.port_queue_state(EG[0])
    assert 15_000 < state["queue_bytes"] <= 20_000


def test_port_loads_reads_what_the_per_port_reads_do(dp, lab, mode):
    """port_loads (the live view's two batch lookups) gives each port's tx, rx, ECN marks,
    drops of all reasons and backlog as port_counters and port_queue_state read them."""
    mode("spray-rr", group=G2)
    for ifx in EG[:2]:           # 10 kb/s: the backlog drains ~1 byte per ms
        dp.set_port_model(ifx, speed_bps=10_000, buffer_bytes=8_000, ecn_bytes=3_000)
    for _ in range(30):          # fills both buffers: queue_full drops and ECN marks
        run(dp, lab, udp("10.41.0.1", tos=0x02, size=1000))
    ports = [IN, *EG]
    loads = dp.port_loads(ports)
    for ifx in ports:
        c = dp.port_counters(ifx)
        tx, rx, ecn, drops, backlog = loads[ifx]
        assert (tx, rx, ecn, drops) == (c["tx_bytes"], c["rx_bytes"], c["ecn_marked"], sum(c["drops"].values()))
        assert 0 <= backlog - dp.port_queue_state(ifx)["queue_bytes"] <= 100      # drained since
    assert all(loads[ifx][3] and loads[ifx][2] and loads[ifx][4] > 4_000 for ifx in EG[:2])
    assert loads[IN][1] >= 30 * 1000 and loads[EG[3]][4] == 0
    assert dp.port_loads([]) == {}
    # the counters reply's batch reads: the same numbers as the per-port and per-group reads
    batch = dp.ports_counters(ports)
    for ifx in ports:
        c = {**dp.port_counters(ifx), **dp.port_queue_state(ifx)}
        assert {k: v for k, v in batch[ifx].items() if k != "queue_bytes"} == \
            {k: v for k, v in c.items() if k != "queue_bytes"}
        assert 0 <= batch[ifx]["queue_bytes"] - c["queue_bytes"] <= 100          # drained since
    members = dp.groups_member_counters([G, G2])
    assert members == {G: dp.member_counters(G), G2: dp.member_counters(G2)}
    assert sum(m["packets"] for m in members[G2]) > 0


def test_ecn_mark_sets_ce_with_valid_checksum(dp, lab, mode):
    dp.set_port_model(EG[0], speed_bps=10_000, buffer_bytes=10**9, ecn_bytes=0)
    mode("ecmp", group=G2)
    dp.tm_add(SW, src="10.9.0.2", dst="10.41.0.1", sport=1, dport=2, proto="udp",
              egress_ifindex=EG[0], dmac=NH_MAC[EG[0]])
    try:
        run(dp, lab, udp("10.41.0.1", sport=1, dport=2))           # builds a backlog
        for tos in (0x01, 0x02, 0xb9, 0xfe):                       # ECT(1), ECT(0), DSCP + ECT
            out = Ether(run(dp, lab, udp("10.41.0.1", sport=1, dport=2, tos=tos)).data)
            assert out[IP].tos == tos | 3
            chk = out[IP].chksum
            del out[IP].chksum
            assert IP(bytes(out[IP]))[IP].chksum == chk, hex(tos)
        before = dp.port_counters(EG[0])["ecn_marked"]
        for tos in (0x00, 0xfc, 0x03):                             # not ECT, already CE
            out = Ether(run(dp, lab, udp("10.41.0.1", sport=1, dport=2, tos=tos)).data)
            assert out[IP].tos == tos
        assert dp.port_counters(EG[0])["ecn_marked"] == before
    finally:
        dp.tm_del(SW, src="10.9.0.2", dst="10.41.0.1", sport=1, dport=2, proto="udp")


@pytest.mark.flaky(reruns=2)   # a stall between poke and run drains the poked backlog
def test_red_marks_with_probability_rising_from_kmin_to_kmax(dp, lab, mode):
    """RED (DCQCN's ECN): no mark at Kmin or below, Pmax x (backlog - Kmin) / (Kmax - Kmin)
    on the ramp, every ECT frame above Kmax. The backlog is poked before every frame."""
    speed = 8_000_000                   # one byte = 1 us: Kmin 10 ms, Kmax 110 ms of backlog
    dp.set_port_model(EG[0], speed_bps=speed, buffer_bytes=10**6, ecn_bytes=10_000,
                      ecn_max_bytes=110_000, ecn_pmax=0.5)
    mode("ecmp", group=G2)
    dp.tm_add(SW, src="10.9.0.2", dst="10.41.0.1", sport=1, dport=2, proto="udp",
              egress_ifindex=EG[0], dmac=NH_MAC[EG[0]])
    frame = udp("10.41.0.1", sport=1, dport=2, tos=0x02)

    def marked(backlog_bytes: int, n: int) -> int:
        before = dp.port_counters(EG[0])["ecn_marked"]
        for _ in range(n):
            poke_queue(dp, EG[0], backlog_ns=backlog_bytes * 1000)
            assert run(dp, lab, frame).verdict == "redirect"
        return dp.port_counters(EG[0])["ecn_marked"] - before

    try:
        assert marked(5_000, 100) == 0                  # below Kmin (poke to run: < 5 ms)
        assert marked(200_000, 100) == 100              # above Kmax: every frame
        half = marked(60_000, 600)                      # midway: 0.5 x 0.5 = 25 %
        assert 100 <= half <= 200, half                 # 150 expected, std ~11
        quarter = marked(35_000, 600)                   # a quarter up: 12.5 %
        assert 30 <= quarter < half, quarter
        # one threshold (Kmax not above Kmin) is the step it always was
        dp.set_port_model(EG[0], speed_bps=speed, buffer_bytes=10**6, ecn_bytes=10_000)
        assert marked(30_000, 50) == 50 and marked(5_000, 50) == 0
    finally:
        dp.tm_del(SW, src="10.9.0.2", dst="10.41.0.1", sport=1, dport=2, proto="udp")


def test_no_model_means_no_queue(dp, lab, mode):
    before = dp.port_counters(EG[0])
    mode("ecmp")
    res = run(dp, lab, udp("10.41.0.1", ttl=255, size=1400), repeat=200)
    assert res.verdict == "redirect"
    assert dp.port_queue_state(EG[0]) == {"queue_bytes": 0, "utilization": 0.0}
    assert dp.port_counters(EG[0])["drops"]["queue_full"] == before["drops"]["queue_full"]


@pytest.mark.flaky(reruns=2)   # a loop starved for longer than the buffer drains offers less
def test_utilisation_tracks_offered_load(dp, lab, mode):
    """Frames offered at twice the port's speed in real time: utilisation -> 100%.
    On a busy machine this process loses the CPU for several ms at a time, so the loop
    never sleeps and each turn sends the frames that have come due since the last (a
    burst of at most 4, which the 5,000-byte buffer -- 40 ms at 1 Mb/s -- absorbs)."""
    dp.set_port_model(EG[0], speed_bps=1_000_000, buffer_bytes=5_000, window_us=20_000)
    poke_queue(dp, EG[0])     # idle to start with: earlier tests leave backlogs on this port
    dp.tm_add(SW, src="10.9.0.2", dst="10.41.0.1", sport=3, dport=4, proto="udp",
              egress_ifindex=EG[0], dmac=NH_MAC[EG[0]])
    try:
        frame = udp("10.41.0.1", sport=3, dport=4, size=1000, ttl=255)   # 8.3 ms at 1 Mb/s
        interval = len(frame) * 8 / 1_000_000 / 2                         # 2x the port's rate
        t0 = time.monotonic()
        sent, readings, next_read = 0, [], t0 + 0.2
        while (now := time.monotonic()) < t0 + 0.4:
            due = int((now - t0) / interval) + 1
            if due > sent:
                run(dp, lab, frame, repeat=min(due - sent, 4))
                sent = due
            if now >= next_read:       # the moving average, read through the second half
                readings.append(dp.port_queue_state(EG[0])["utilization"])
                next_read += 0.02
        # a starved turn leaves a window without accepted frames (the average dips): the
        # best reading of the second half shows where it goes
        assert max(readings) > 0.85, readings
        assert dp.port_counters(EG[0])["drops"]["queue_full"] > 0
    finally:
        dp.tm_del(SW, src="10.9.0.2", dst="10.41.0.1", sport=3, dport=4, proto="udp")


def test_a_port_back_from_idle_reads_its_first_busy_window_as_it_is(dp, lab, mode):
    """The window that closes after an idle stretch says the port was idle, whatever one
    frame's share of that stretch was (a share that shrinks with the idle's length, so
    with the time scale); the next window, busy, is the average as it is -- not a quarter
    of it on top of that share, which flowlet's least-loaded pick read as "nearly idle"
    and put a second elephant on the port."""
    window_ns = 100_000_000
    dp.set_port_model(EG[0], speed_bps=1_000_000, buffer_bytes=10**6, window_us=window_ns // 1000)
    dp.tm_add(SW, src="10.9.0.2", dst="10.41.0.1", sport=5, dport=6, proto="udp",
              egress_ifindex=EG[0], dmac=NH_MAC[EG[0]])
    slot = ct.c_uint32(SLOT[EG[0]])

    def window(opened_ns_ago: int, busy_ns: int) -> None:
        q = abi.PortQueue()
        assert dp.maps.lookup("port_queue", slot, q)
        now = time.monotonic_ns()
        q.t_free, q.win_start, q.win_busy_ns = now, now - opened_ns_ago, busy_ns
        dp.maps.update("port_queue", slot, q, flags=BPF_F_LOCK)

    try:
        frame = udp("10.41.0.1", sport=5, dport=6, size=1000, ttl=255)    # 8.3 ms at 1 Mb/s
        poke_queue(dp, EG[0])
        window(opened_ns_ago=5 * window_ns, busy_ns=0)     # idle for five windows
        run(dp, lab, frame)
        assert dp.port_queue_state(EG[0])["utilization"] == 0.0
        window(opened_ns_ago=window_ns, busy_ns=window_ns // 2)   # then a half-busy window
        run(dp, lab, frame)
        assert 0.5 < dp.port_queue_state(EG[0])["utilization"] < 0.7
    finally:
        dp.tm_del(SW, src="10.9.0.2", dst="10.41.0.1", sport=5, dport=6, proto="udp")


def test_real_queue_port_hands_the_decided_frame_to_tc(dp, lab, mode):
    """A port with a real queue: the frame leaves XDP with XDP_PASS, rewritten as for a
    redirect, with (magic, egress ifindex, the lab's key) after its Ethernet header for
    tc_handoff, which removes them."""
    mode("ecmp", group=G2)
    dp.tm_add(SW, src="10.9.0.2", dst="10.41.0.1", sport=1, dport=2, proto="udp",
              egress_ifindex=EG[0], dmac=NH_MAC[EG[0]])
    try:
        frame = udp("10.41.0.1", sport=1, dport=2, ttl=9)
        plain = run(dp, lab, frame)
        dp.set_port_model(EG[0], speed_bps=10**9, real_queue=True)
        before = dp.verdict_counters()["queued"]["packets"]
        handed = run(dp, lab, frame)
        assert dp.verdict_counters()["queued"]["packets"] == before + 1
        dp.reset_switch_state(SW)                 # a reset keeps the port's model, queue kind too
        assert run(dp, lab, frame).verdict == "pass"
    finally:
        dp.tm_del(SW, src="10.9.0.2", dst="10.41.0.1", sport=1, dport=2, proto="udp")
    assert plain.verdict == "redirect" and plain.meta == b""
    assert handed.verdict == "pass" and handed.meta == b""
    assert abi.handed_on(handed.data) == plain.data and Ether(plain.data)[IP].ttl == 8
    # the stack sees the frame's own Ethernet header (an IPv4 frame for the next hop) in front
    assert handed.data[:14] == plain.data[:14] and len(handed.data) == len(plain.data) + abi.HANDOFF_GAP
    handoff = abi.handoff_in(handed.data)
    key = ct.c_uint64()
    assert dp.maps.lookup("handoff_key", ct.c_uint32(0), key) and key.value
    assert (handoff.magic, handoff.ifindex, handoff.key) == (abi.HANDOFF_MAGIC, EG[0], key.value)
    with pytest.raises(ValueError, match="needs a port speed"):
        dp.set_port_model(EG[0], speed_bps=0, real_queue=True)


def test_tc_handoff_obeys_only_its_own_programs_handoffs(dp, lab, mode):
    """tc_handoff, run on the frame XDP handed up: it removes the handoff and redirects
    (TC_ACT_REDIRECT) the frame as a plain redirect would have sent it. The same frame with
    another key is not its own: it goes on to the stack (TC_ACT_OK), unchanged."""
    mode("ecmp", group=G2)
    dp.tm_add(SW, src="10.9.0.2", dst="10.41.0.1", sport=1, dport=2, proto="udp",
              egress_ifindex=EG[0], dmac=NH_MAC[EG[0]])
    frame = udp("10.41.0.1", sport=1, dport=2, ttl=9)
    try:
        plain = run(dp, lab, frame)
        dp.set_port_model(EG[0], speed_bps=10**9, real_queue=True)
        handed = run(dp, lab, frame)
    finally:
        dp.tm_del(SW, src="10.9.0.2", dst="10.41.0.1", sport=1, dport=2, proto="udp")
        dp.set_port_model(EG[0], speed_bps=10**9, real_queue=False)
    sent = prog_test_run(dp.handoff_prog_fd, handed.data)
    assert (sent.retval, sent.data) == (TC_ACT_REDIRECT, plain.data)
    forged = bytearray(handed.data)
    forged[14 + abi.HANDOFF_GAP - 1] ^= 0x80          # the key's top byte
    kept = prog_test_run(dp.handoff_prog_fd, bytes(forged))
    assert (kept.retval, kept.data) == (TC_ACT_OK, bytes(forged))
    assert prog_test_run(dp.handoff_prog_fd, plain.data).retval == TC_ACT_OK


def test_pfc_classes_and_a_paused_egress_holds_lossless_frames_in_the_ingress_account(dp, lab, mode):
    """PFC on, real queue: the handoff names the qdisc class (lossless, CNP, other); while
    the egress port's neighbour pauses the lossless priority, a lossless frame stays in its
    ingress account as held (PFC_HELD | egress slot) and skips the virtual queue."""
    mode("ecmp", group=G2)
    dp.tm_add(SW, src="10.9.0.2", dst="10.41.0.1", sport=1, dport=2, proto="udp",
              egress_ifindex=EG[0], dmac=NH_MAC[EG[0]])
    dp.set_port_model(EG[0], speed_bps=10**9, real_queue=True, buffer_bytes=1 << 20)
    dp.set_pfc(on=True, lossless_dscp=26, lossless_prio=3)
    for ifx in (IN, EG[0]):
        dp.set_pfc_port(ifx, limit_bytes=1 << 20, ns_per_quantum=1000)
    try:
        def handed(tos):
            res = run(dp, lab, udp("10.41.0.1", sport=1, dport=2, tos=tos))
            assert res.verdict == "pass"
            return abi.handoff_in(res.data).tc_class

        assert handed(26 << 2) == abi.PFC_TC_LOSSLESS
        assert handed(abi.PFC_CNP_DSCP << 2) == abi.PFC_TC_CNP
        assert handed(0) == abi.PFC_TC_OTHER
        # the neighbour behind EG[0] pauses priority 3 for 65,535 quanta (65 ms here)
        pause = (Ether(src=NH_MAC[EG[0]], dst="01:80:c2:00:00:01", type=0x8808)
                 / Raw(bytes([1, 1, 0, 1 << 3]) + bytes(6) + (65535).to_bytes(2, "big") + bytes(8 + 26)))
        run_frame(dp, lab, pause, EG[0])
        assert dp.pfc_paused(SLOT[EG[0]], time.monotonic_ns())
        q_before = abi.PortQueue()
        assert dp.maps.lookup("port_queue", ct.c_uint32(SLOT[EG[0]]), q_before)
        assert handed(26 << 2) == abi.PFC_TC_LOSSLESS
        q_after = abi.PortQueue()
        assert dp.maps.lookup("port_queue", ct.c_uint32(SLOT[EG[0]]), q_after)
        assert q_after.t_free == q_before.t_free          # not on the wire: no virtual queue time
        pp = dp.pfc_port(IN)
        # the agent's PFC thread reads every account in one batch: the same bytes
        batch = dp.pfc_ports([IN, EG[0]])
        assert bytes(batch[IN]) == bytes(pp) and pp.head > 0
        assert bytes(batch[EG[0]]) == bytes(dp.pfc_port(EG[0]))
        newest = pp.t_dep[(pp.head - 1) % abi.PFC_RING]
        assert newest == abi.PFC_HELD | SLOT[EG[0]]
        now = time.monotonic_ns()
        assert dp.pfc_occupancy_of(pp, now, lambda slot: True) >= pp.len[(pp.head - 1) % abi.PFC_RING]
        assert dp.pfc_occupancy_of(pp, now, lambda slot: False) < dp.pfc_occupancy_of(pp, now, lambda slot: True)
    finally:
        dp.set_pfc(on=False)
        for ifx in (IN, EG[0]):
            dp.set_pfc_port(ifx, limit_bytes=0, ns_per_quantum=1)
        dp.tm_del(SW, src="10.9.0.2", dst="10.41.0.1", sport=1, dport=2, proto="udp")
