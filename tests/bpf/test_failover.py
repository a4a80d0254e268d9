"""Local fast failover, route avoid masks and ARP learning in the data plane, with
BPF_PROG_TEST_RUN on crafted frames (the live-lab versions are tests/lab/test_faults*.py).

Invariant under test: a group picks from its full member list as without failures and
re-picks only when that pick is down, so flows on live members never move and the flows
of a dead member spread over the live ones."""

from __future__ import annotations

import collections

import pytest
from scapy.layers.l2 import ARP, Ether

from dataplane.xdp import abi

from .. import frames
from .conftest import run_frame, switch_bench

# ids of their own (the dp fixture is shared with the other modules of tests/bpf)
SW = 5
IN = 401
EG = [402, 403, 404, 405]
ALL, SLOT, PORT_MAC, NH_MAC = frames.port_plan(IN, EG, first_slot=60, port_mac="02:00:00:05:00",
                                               nh_mac="02:00:00:06:00", base=400)
HOST_MAC = "02:00:00:00:bb:02"
G = 60


@pytest.fixture(scope="module")
def lab(dp, module_netns):
    ports = {ifx: (SW, SLOT[ifx], PORT_MAC[ifx]) for ifx in ALL}
    with switch_bench(dp, module_netns, "fo", {SW: 0x1234}, ports, groups=[G]) as ns:
        dp.set_group(G, [(e, NH_MAC[e]) for e in EG])
        dp.add_route(SW, "10.40.0.0/16", G)
        yield ns


@pytest.fixture
def mode(dp, lab):
    def set_(m, group=G, **kw):
        dp.set_group_lb(group, mode=m, **kw)
    yield set_
    dp.set_group_lb(G, mode="ecmp", clear_weights=True, flowlet_timeout_us=100, busy_util=0)


udp = frames.udp_from(HOST_MAC, PORT_MAC[IN], dst="10.40.0.1")
egress_of = frames.egress_lookup(NH_MAC)


def run(dp, ns, frame):
    return run_frame(dp, ns, frame, IN)


FLOWS = range(2000, 2400)
MODES = ["ecmp", "lbn", "spray-rr", "spray-random", "flowlet", "wcmp"]


def _flow_map(dp, ns, flows=FLOWS):
    return {sp: egress_of(run(dp, ns, udp(sport=sp))) for sp in flows}


@pytest.fixture
def restore_ports(dp, lab):
    yield
    for ifx in EG:
        dp.set_port_state(ifx, True)
    dp.set_route_avoid(SW, "10.40.0.0/16", 0)


def test_ecmp_down_member_moves_only_its_flows(dp, lab, mode, restore_ports):
    before = _flow_map(dp, lab)
    victim = EG[1]
    changed = dp.set_port_state(victim, False)
    assert G in changed
    assert dp.group_down_mask(G) == 1 << 1
    after = _flow_map(dp, lab)
    for sp in FLOWS:
        if before[sp] != victim:
            assert after[sp] == before[sp], "a flow on a live member moved"
        else:
            assert after[sp] != victim
    moved = collections.Counter(after[sp] for sp in FLOWS if before[sp] == victim)
    assert set(moved) == set(EG) - {victim} and min(moved.values()) >= 10, moved
    dp.set_port_state(victim, True)
    assert _flow_map(dp, lab) == before, "port back up: every flow returns"


@pytest.mark.parametrize("m", MODES)
def test_no_mode_uses_a_down_member(dp, lab, mode, restore_ports, m):
    kw = {"weights": [1, 2, 3, 4]} if m == "wcmp" else {}
    mode(m, **kw)
    dp.set_port_state(EG[0], False)
    dp.set_port_state(EG[3], False)
    used = collections.Counter(egress_of(run(dp, lab, udp(sport=sp))) for sp in range(3000, 3200))
    assert set(used) <= {EG[1], EG[2]}, used
    if m not in ("lbn",):
        assert set(used) == {EG[1], EG[2]}, used


def test_all_members_down_drops_members_down(dp, lab, mode, restore_ports):
    for ifx in EG:
        dp.set_port_state(ifx, False)
    res = run(dp, lab, udp())
    assert res.verdict == "drop"
    assert dp.drop_counters()["members_down"] >= 1


def test_route_avoid_mask_is_advisory(dp, lab, mode, restore_ports):
    dp.set_route_avoid(SW, "10.40.0.0/16", 0b0011)
    used = {egress_of(run(dp, lab, udp(sport=sp))) for sp in range(3000, 3100)}
    assert used == {EG[2], EG[3]}
    # avoiding would leave nothing alive: the avoid mask is ignored, down ports are not
    dp.set_port_state(EG[2], False)
    dp.set_port_state(EG[3], False)
    used = {egress_of(run(dp, lab, udp(sport=sp))) for sp in range(3000, 3100)}
    assert used == {EG[0], EG[1]}


def test_tm_entry_on_down_port_falls_back_to_route(dp, lab, mode, restore_ports):
    flow = dict(src="10.9.0.2", dst="10.40.0.1", sport=1000, dport=2000, proto="udp")
    dp.tm_add(SW, **flow, egress_ifindex=EG[2], dmac=NH_MAC[EG[2]])
    try:
        assert egress_of(run(dp, lab, udp())) == EG[2]
        dp.set_port_state(EG[2], False)
        assert egress_of(run(dp, lab, udp())) != EG[2]
    finally:
        dp.tm_del(SW, **flow)


def test_arp_learning(dp, lab, mode):
    dp.forget_learned(SW)
    gen0 = dp.learn_generation()
    garp = Ether(src="02:00:00:00:cc:01", dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=1, hwsrc="02:00:00:00:cc:01", psrc="10.40.9.9", pdst="10.40.9.9")
    run(dp, lab, garp)
    assert not [h for h in dp.learned_hosts() if h["switch_id"] == SW], "learning is off by default"
    dp.set_port_learn(IN, True)
    try:
        res = run(dp, lab, garp)
        assert res.verdict == "pass"
        hosts = [h for h in dp.learned_hosts() if h["switch_id"] == SW]
        assert hosts == [{"switch_id": SW, "ip": "10.40.9.9", "ifindex": IN,
                          "mac": "02:00:00:00:cc:01", "last_ns": hosts[0]["last_ns"]}]
        gen1 = dp.learn_generation()
        assert gen1 == gen0 + 1
        run(dp, lab, garp)                       # same host again: no new generation
        assert dp.learn_generation() == gen1
    finally:
        dp.set_port_learn(IN, False)
        dp.forget_learned(SW)


def test_reset_switch_state(dp, lab, mode):
    mode("flowlet", flowlet_timeout_us=1_000_000)
    for sp in range(10):
        run(dp, lab, udp(sport=sp))
    assert dp.flowlet_stats(G)["flows"] >= 10
    dp.set_route_avoid(SW, "10.40.0.0/16", 1)
    out = dp.reset_switch_state(SW)
    assert out["flowlets"] >= 10 and out["avoid_cleared"] == 1
    assert dp.flowlet_stats(G)["flows"] == 0
    assert dp.port_counters(IN)["rx_packets"] == 0
    assert dp.route_avoid(SW) == {}
    assert abi.PORT_F_LEARN == 8 and PORT_MAC[IN]


def test_a_new_host_route_starts_with_its_covering_routes_avoid_mask(dp, lab, mode):
    """A /32 learned while its prefix is being avoided is written avoiding the same
    members, not first without (frames would slip through until it is re-applied)."""
    dp.set_route_avoid(SW, "10.40.0.0/16", 0b1)
    try:
        dp.add_route(SW, "10.40.0.7/32", G)
        assert dp.route_avoid(SW).get((SW, "10.40.0.7/32")) == 0b1
        dp.set_group(G + 1, [(EG[2], NH_MAC[EG[2]]), (EG[3], NH_MAC[EG[3]])])
        dp.add_route(SW, "10.40.0.8/32", G + 1)          # another group: its own members
        assert (SW, "10.40.0.8/32") not in dp.route_avoid(SW)
    finally:
        dp.del_route(SW, "10.40.0.7/32")
        dp.del_route(SW, "10.40.0.8/32")
        dp.del_group(G + 1)
        dp.set_route_avoid(SW, "10.40.0.0/16", 0)


def test_ports_changed_together_open_before_any_group_uses_them(dp, lab, restore_ports, monkeypatch):
    """set_port_states: the ports coming up accept traffic (their port entries written)
    before any group sends into one of them, and the groups leave the ports going down
    before those drop what arrives: the two ends of a repaired link, set together, never
    have one sending into the other's still-closed port."""
    dp.set_port_states([(EG[0], False), (EG[1], False)])
    writes = []
    update = dp.maps.update
    monkeypatch.setattr(dp.maps, "update", lambda name, key, value: writes.append(
        (name, key.value if name in ("port_index", "ports") else None)) or update(name, key, value))
    changed = dp.set_port_states([(EG[0], True), (IN, False), (EG[1], True), (EG[2], True)])
    assert changed == {EG[0]: [G], IN: [], EG[1]: [G]}, "EG[2] was up already: no change"
    first_group = [name for name, _ in writes].index("groups")
    assert {ifx for _, ifx in writes[:first_group]} == {EG[0], EG[1]}, "both ends opened first"
    assert {ifx for _, ifx in writes[first_group:]} - {None} == {IN}, "the closing port last"
    assert dp.port_is_up(EG[0]) and dp.port_is_up(EG[1]) and not dp.port_is_up(IN)
    dp.set_port_state(IN, True)
    assert _flow_map(dp, lab, range(2000, 2040))
