"""The data path's fast path: the per-CPU route cache (route_cache, validated by
switch_cfg.route_gen) and the port_index array in front of the `ports` hash -- a change
made through SwitchDataplane takes effect on the very next packet, never a stale cached
result -- and the lock-free emulated queue under two CPUs at once.

BPF_PROG_TEST_RUN runs on the calling CPU, and every test first sends the same frame
twice so that the cache entry of that CPU is warm before the change."""

from __future__ import annotations

import ctypes as ct
import ipaddress
import os
import threading
import time

import pytest
from scapy.layers.l2 import Ether

from dataplane.kernel.netns import in_netns
from dataplane.xdp import abi, progtest

from .. import frames
from .conftest import run_frame, switch_bench

# ids of their own (the dp fixture is shared with the other modules of tests/bpf)
SW, SW2 = 9, 10
IN = 501
EG = [502, 503, 504, 505]
IN2 = 511
BIG = 9300          # >= the default port_index_slots (2 * 4096 + 1024): `ports` hash only
ALL = [IN, *EG, IN2, BIG]
SLOT = {ifx: 80 + i for i, ifx in enumerate(ALL)}
HOST_MAC = "02:00:00:00:cc:03"
PORT_MAC = {ifx: f"02:00:00:09:{ifx >> 8:02x}:{ifx & 0xff:02x}" for ifx in ALL}
NH_MAC = {ifx: f"02:00:00:0a:00:{ifx - 500:02x}" for ifx in EG}
G_A, G_B, G_ALL = 90, 91, 92        # member EG[0] / member EG[1] / all four
PREFIX = "10.50.0.0/16"


@pytest.fixture(scope="module")
def lab(dp, module_netns):
    ports = {ifx: (SW2 if ifx == IN2 else SW, SLOT[ifx], PORT_MAC[ifx]) for ifx in ALL}
    with switch_bench(dp, module_netns, "rc", {SW: 0x77, SW2: 0x78}, ports, groups=[G_A, G_B, G_ALL]) as ns:
        dp.set_group(G_A, [(EG[0], NH_MAC[EG[0]])])
        dp.set_group(G_B, [(EG[1], NH_MAC[EG[1]])])
        dp.set_group(G_ALL, [(e, NH_MAC[e]) for e in EG])
        yield ns


@pytest.fixture
def routes(dp, lab):
    dp.add_route(SW, PREFIX, G_ALL)
    yield
    for sw in (SW, SW2):
        for prefix in list(dp.routes(sw)):
            dp.del_route(sw, prefix)
    for ifx in EG + [IN, BIG]:
        dp.set_port_state(ifx, True)


udp = frames.udp_from(HOST_MAC, PORT_MAC[IN], dst="10.50.1.1")
egress_of = frames.egress_lookup(NH_MAC)


def run(dp, ns, frame, ifindex=IN):
    return run_frame(dp, ns, frame, ifindex)


def egress(dp, ns, frame, ifindex=IN):
    """Egress port of the frame (after a warm-up run of the same frame), or the verdict."""
    run(dp, ns, frame, ifindex)
    res = run(dp, ns, frame, ifindex)
    return egress_of(res) if res.verdict == "redirect" else res.verdict


def test_route_change_takes_effect_at_once(dp, lab, routes):
    dp.add_route(SW, PREFIX, G_A)
    assert egress(dp, lab, udp()) == EG[0]
    dp.add_route(SW, PREFIX, G_B)                 # same prefix, new group
    assert egress(dp, lab, udp()) == EG[1]
    dp.add_route(SW, "10.50.1.0/24", G_A)         # a longer prefix appears
    assert egress(dp, lab, udp()) == EG[0]
    assert egress(dp, lab, udp("10.50.2.1")) == EG[1]
    dp.del_route(SW, "10.50.1.0/24")              # ... and goes
    assert egress(dp, lab, udp()) == EG[1]
    before = dp.port_counters(IN)["drops"]["no_route"]
    dp.del_route(SW, PREFIX)
    assert egress(dp, lab, udp()) == "drop"
    assert dp.port_counters(IN)["drops"]["no_route"] == before + 2
    dp.add_route(SW, PREFIX, G_A)                 # a cached "no route" is not stale either
    assert egress(dp, lab, udp()) == EG[0]


def test_covering_group_agrees_with_the_kernels_lookup(dp, lab, routes):
    """covering_group (the agent's test whether a learned /32 would change anything) gives
    the group the LPM gives every address of a prefix, and None where routes split it."""
    version = dp.wide_routes_version
    dp.add_route(SW, "10.50.4.0/22", G_A)
    dp.add_route(SW, "10.50.6.0/24", G_B)             # splits the /22
    dp.add_route(SW, "10.50.9.7/32", G_B)             # a host route splits nothing
    assert dp.wide_routes_version == version + 2
    for prefix, expected in (("10.50.5.0/24", G_A), ("10.50.6.0/24", G_B), ("10.50.6.128/25", G_B),
                             ("10.50.4.0/22", None), ("10.50.9.0/24", G_ALL), ("10.51.0.0/24", None),
                             ("10.50.0.0/16", None)):
        assert dp.covering_group(SW, prefix) == expected, prefix
        if expected is not None:
            net = ipaddress.IPv4Network(prefix)
            assert {dp.lookup_route(SW, str(net[i])) for i in (0, net.num_addresses - 1)} == {expected}
    assert dp.covering_group(SW2, "10.50.5.0/24") is None
    dp.del_route(SW, "10.50.6.0/24")
    assert dp.covering_group(SW, "10.50.4.0/22") == G_A and dp.wide_routes_version == version + 3


def test_avoid_mask_change_takes_effect_at_once(dp, lab, routes):
    first = egress(dp, lab, udp())
    i = EG.index(first)
    dp.set_route_avoid(SW, PREFIX, 1 << i)
    moved = egress(dp, lab, udp())
    assert moved != first and moved in EG
    dp.set_route_avoid(SW, PREFIX, 0)
    assert egress(dp, lab, udp()) == first


def test_port_down_takes_effect_at_once(dp, lab, routes):
    first = egress(dp, lab, udp())
    dp.set_port_state(first, False)               # egress member down: its flows move
    assert egress(dp, lab, udp()) not in (first, "drop")
    dp.set_port_state(first, True)
    assert egress(dp, lab, udp()) == first
    dp.set_port_state(IN, False)                  # ingress down: port_index copy follows
    assert egress(dp, lab, udp()) == "drop"
    assert dp.port_counters(IN)["drops"]["port_down"] >= 2
    dp.set_port_state(IN, True)
    assert egress(dp, lab, udp()) == first


def test_local_address_change_takes_effect_at_once(dp, lab, routes):
    dst = "10.50.7.7"
    assert egress(dp, lab, udp(dst)) in EG
    dp.add_address(SW, IN, dst)
    try:
        assert egress(dp, lab, udp(dst)) == "pass"
        assert egress(dp, lab, udp("10.50.7.8")) in EG
    finally:
        dp.del_address(SW, IN, dst)
    assert egress(dp, lab, udp(dst)) in EG


def test_cache_is_per_switch(dp, lab, routes):
    dp.add_route(SW, PREFIX, G_A)
    dp.add_route(SW2, PREFIX, G_B)
    for _ in range(3):      # same dst, alternating switches: each keeps its own route
        assert egress(dp, lab, udp()) == EG[0]
        assert egress(dp, lab, udp(dmac=PORT_MAC[IN2]), ifindex=IN2) == EG[1]
    dp.del_route(SW2, PREFIX)
    assert egress(dp, lab, udp(dmac=PORT_MAC[IN2]), ifindex=IN2) == "drop"
    assert egress(dp, lab, udp()) == EG[0]


def test_many_destinations_sharing_slots_stay_correct(dp, lab, routes):
    """More (switch, dst) pairs than fit without collisions in a few slots: every packet
    still gets its own route (an entry is used only for its exact switch and dst)."""
    dp.add_route(SW, "10.50.0.0/17", G_A)
    dp.add_route(SW, "10.50.128.0/17", G_B)
    dsts = [f"10.50.{b}.{c}" for b in (3, 130) for c in range(1, 120)]
    for _ in range(2):
        for dst in dsts:
            res = run(dp, lab, udp(dst))
            want = NH_MAC[EG[0] if dst.startswith("10.50.3.") else EG[1]]
            assert Ether(res.data).dst == want, dst


def test_cache_hit_needs_the_generation(dp, lab, routes):
    """White box: with the route removed from the LPM behind SwitchDataplane's back the
    warm entry still answers (so the cache is used), until route_gen moves."""
    assert egress(dp, lab, udp()) in EG
    net = ipaddress.IPv4Network(PREFIX)
    key = dp._route_key(SW, net)
    assert dp.maps.delete("routes", key)
    assert run(dp, lab, udp()).verdict == "redirect"        # cached
    dp._routes_changed(SW)
    assert run(dp, lab, udp()).verdict == "drop"            # no stale entry
    dp.del_route(SW, PREFIX)      # the map entry went above; this forgets the rest


def test_port_beyond_port_index_uses_the_hash(dp, lab, routes):
    assert BIG >= dp.port_index_slots
    assert egress(dp, lab, udp(dmac=PORT_MAC[BIG]), ifindex=BIG) in EG
    dp.set_port_state(BIG, False)
    assert egress(dp, lab, udp(dmac=PORT_MAC[BIG]), ifindex=BIG) == "drop"
    assert dp.port_counters(BIG)["drops"]["port_down"] == 2


def test_deleted_port_is_unknown(dp, lab, routes):
    info = abi.PortInfo()
    assert dp.maps.lookup("port_index", ct.c_uint32(EG[3]), info) and info.flags & abi.PORT_F_VALID
    before = dp.drop_counters()["unknown_port"]
    dp.del_port(EG[3])
    assert dp.maps.lookup("port_index", ct.c_uint32(EG[3]), info) and info.flags == 0
    try:
        assert egress(dp, lab, udp(dmac=PORT_MAC[EG[3]]), ifindex=EG[3]) == "drop"
        assert dp.drop_counters()["unknown_port"] == before + 2
    finally:
        dp.set_port(EG[3], switch_id=SW, slot=SLOT[EG[3]], mac=PORT_MAC[EG[3]])
        dp.set_group(G_ALL, [(e, NH_MAC[e]) for e in EG])
    assert dp.maps.lookup("port_index", ct.c_uint32(EG[3]), info) and info.flags & abi.PORT_F_VALID


def test_traffic_matrix_change_takes_effect_at_once(dp, lab, routes):
    """route_cache remembers whether a dst has `tm` entries (RC_F_TM): adding or removing
    one must not leave that answer stale."""
    dp.add_route(SW, PREFIX, G_A)
    flow = dict(src="10.9.0.2", dst="10.50.1.1", sport=1000, dport=2000, proto="udp")
    assert egress(dp, lab, udp()) == EG[0]
    dp.tm_add(SW, **flow, egress_ifindex=EG[2], dmac=NH_MAC[EG[2]])
    try:
        assert egress(dp, lab, udp()) == EG[2]
        assert egress(dp, lab, udp(sport=1001)) == EG[0]          # other flow, same dst
        flow2 = dict(flow, sport=1001)
        dp.tm_add(SW, **flow2, egress_ifindex=EG[3], dmac=NH_MAC[EG[3]])
        assert egress(dp, lab, udp(sport=1001)) == EG[3]
        dp.tm_del(SW, **flow2)                                    # dst still has one entry
        assert egress(dp, lab, udp(sport=1001)) == EG[0]
        assert egress(dp, lab, udp()) == EG[2]
    finally:
        dp.tm_del(SW, **flow)
    assert egress(dp, lab, udp()) == EG[0]
    assert dp.tm_list(SW) == []


def test_lock_free_queue_on_two_cpus(dp, lab, routes):
    """Both CPUs transmit into one emulated port far faster than it drains: every frame is
    either sent or dropped queue_full, and the port never accepted more than its buffer
    plus what it could drain meanwhile (the queue's compare-and-swap loses no update)."""
    dp.add_route(SW, PREFIX, G_A)
    speed, buf, size = 1_000_000_000, 30_000, 1000
    dp.set_port_model(EG[0], speed_bps=speed, buffer_bytes=buf, ecn_bytes=None)
    frame = bytes(udp(ttl=255, size=size - 42))
    calls, repeat = 30, 200
    before = dp.port_counters(EG[0])
    errors = []

    def worker(cpu):
        try:
            os.sched_setaffinity(0, {cpu})
            with in_netns(lab):
                for _ in range(calls):
                    progtest.prog_test_run(dp.prog_fd, frame, ingress_ifindex=IN, repeat=repeat)
        except Exception as e:   # noqa: BLE001 -- reported below
            errors.append(e)

    cpus = sorted(os.sched_getaffinity(0))[:2]
    t0 = time.monotonic_ns()
    threads = [threading.Thread(target=worker, args=(c,)) for c in cpus]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic_ns() - t0
        assert not errors, errors
        after = dp.port_counters(EG[0])
        sent = after["tx_packets"] - before["tx_packets"]
        dropped = after["drops"]["queue_full"] - before["drops"]["queue_full"]
        assert sent + dropped == len(cpus) * calls * repeat
        assert dropped > 0
        tx_ns = size * 8e9 / speed
        slack = 4 * len(cpus)          # frames: approximate fallbacks after lost races
        assert sent <= buf / size + elapsed / tx_ns + slack, (sent, elapsed)
        assert dp.port_queue_state(EG[0])["queue_bytes"] <= buf
    finally:
        dp.set_port_model(EG[0], speed_bps=0)
