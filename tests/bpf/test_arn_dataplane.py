"""ARN / FGLB notices made and consumed in the data plane (issue 27), with BPF_PROG_TEST_RUN
on crafted frames: a packet into a dead group becomes a notice back out of its ingress
port; a notice arriving at an upstream switch moves that destination's traffic off the
port it came in on, and nothing else; malformed notices are counted and dropped.

Two switches of the session's data plane: S (reporter: its group towards leaf X is dead)
and N (upstream: routes 10.90/16 and 10.91/16 over three uplinks, one of them to S)."""

from __future__ import annotations

import collections
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from dataplane.agent import notices
from dataplane.xdp import abi

from .. import frames
from .conftest import run_frame, switch_bench

SW_S, SW_N = 11, 12
S_IN, S_IN2, S_HOST = 601, 605, 604      # S: two fabric ingress ports, one host port
S_EG = [602, 603]                         # S: its group towards leaf X (made dead)
N_IN = 611                                # N: host-facing ingress
N_UP = [612, 613, 614]                    # N: uplinks; 613 is the link to S
TO_S = N_UP[1]
S_PORTS = [S_IN, *S_EG, S_HOST, S_IN2]
N_PORTS = [N_IN, *N_UP]
PORT_MAC = {**frames.macs("02:00:00:0b:00", S_PORTS, 600), **frames.macs("02:00:00:0c:00", N_PORTS, 600)}
NH_MAC = {**frames.macs("02:00:00:0d:00", S_EG, 600), **frames.macs("02:00:00:0e:00", N_UP, 600)}
UP_MAC = "02:00:00:0f:00:01"              # N's end of the link into S_IN
HOST_MAC = "02:00:00:00:cc:03"
GS, GN = 90, 91
S_ADDR, N_ADDR = "10.255.0.1", "10.255.0.2"   # the two ends of the S-N link
HOLD_MS = 60_000                          # long enough for every check of a test
INTERVAL_MS = 200                         # the rate limit

udp_to_s = frames.udp_from(UP_MAC, PORT_MAC[S_IN])
udp_to_n = frames.udp_from(HOST_MAC, PORT_MAC[N_IN])
egress_of = frames.egress_lookup(NH_MAC)


@pytest.fixture(scope="module")
def lab(dp, module_netns):
    ports = {ifx: (SW_S, 120 + i, PORT_MAC[ifx]) for i, ifx in enumerate(S_PORTS)}
    ports.update({ifx: (SW_N, 130 + i, PORT_MAC[ifx]) for i, ifx in enumerate(N_PORTS)})
    with switch_bench(dp, module_netns, "arn", {SW_S: 0x51, SW_N: 0x52}, ports, groups=[GS, GN]) as ns:
        dp.set_group(GS, [(e, NH_MAC[e]) for e in S_EG])
        dp.set_group(GN, [(e, NH_MAC[e]) for e in N_UP])
        dp.add_route(SW_S, "10.90.0.0/16", GS)
        dp.add_route(SW_N, "10.90.0.0/16", GN)
        dp.add_route(SW_N, "10.91.0.0/16", GN)
        dp.add_address(SW_N, TO_S, N_ADDR)
        for ifx in (S_IN, S_IN2):
            dp.set_notice_port(ifx, fabric=True, src=S_ADDR, dst=N_ADDR)
        for ifx in N_UP:
            dp.set_notice_port(ifx, fabric=True)
        try:
            yield ns
        finally:
            dp.set_notices(generate=False, consume=False, hold_ms=1)
            dp.clear_exclusions()
            for ifx in [*S_PORTS, *N_PORTS]:
                dp.set_notice_port(ifx, fabric=False)


@pytest.fixture
def arn(dp, lab):
    """Notices on (hold HOLD_MS, rate limit INTERVAL_MS), S's group dead; afterwards
    everything as it was."""
    dp.clear_exclusions()
    dp.set_notices(generate=True, consume=True, hold_ms=HOLD_MS, interval_ns=INTERVAL_MS * 1_000_000)
    for ifx in S_EG:
        dp.set_port_state(ifx, False)
    yield dp
    for ifx in S_EG:
        dp.set_port_state(ifx, True)
    dp.set_notices(generate=False, consume=False, hold_ms=1)
    dp.clear_exclusions()


def count(dp) -> dict:
    return dp.notice_counters()


def delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def notice(typ=notices.T_WITHDRAW, prefix="10.90.0.0/16", hold_ms=HOLD_MS, *, port=TO_S,
           dst=N_ADDR, flows=None, payload=None):
    """A notice as S would send it into N's port `port` (the agent's own packer)."""
    body = payload if payload is not None else notices.Notice(
        typ, notices.R_LINK_DOWN, 1, SW_S, 0, prefix, hold_ms, 0, S_IN, flows or []).pack()
    return (Ether(src=PORT_MAC[S_IN], dst=PORT_MAC[port]) / IP(src=S_ADDR, dst=dst, ttl=1)
            / UDP(sport=notices.ARN_PORT, dport=notices.ARN_PORT) / Raw(body))


SPORTS = range(3000, 3120)


def choices(dp, ns, dst="10.90.7.7") -> dict[int, int]:
    return {sp: egress_of(run_frame(dp, ns, udp_to_n(dst, sport=sp), N_IN)) for sp in SPORTS}


# ---------------------------------------------------------------- generation
def test_packet_into_dead_group_becomes_a_notice(arn, lab):
    dp = arn
    before, drops0 = count(dp), dp.port_counters(S_IN)
    verdicts0 = dp.verdict_counters()["tx"]["packets"]
    res = run_frame(dp, lab, udp_to_s("10.90.3.4", size=200), S_IN)
    assert res.verdict == "tx"
    assert len(res.data) == abi.ARN_FRAME_LEN
    out = Ether(res.data)
    assert out.dst == UP_MAC and out.src == PORT_MAC[S_IN] and out.type == 0x0800
    ip = out[IP]
    assert (ip.src, ip.dst, ip.ttl, ip.proto, ip.len, ip.flags) == (S_ADDR, N_ADDR, 1, 17, 68, "DF")
    assert ip.tos == abi.ARN_TOS
    chk = ip.chksum
    del ip.chksum
    assert IP(bytes(ip)).chksum == chk, "IPv4 header checksum"
    u = out[UDP]
    assert (u.sport, u.dport, u.len, u.chksum) == (4792, 4792, 48, 0)   # 0: no UDP checksum (IPv4)
    msg = notices.Notice.unpack(bytes(u.payload))
    assert (msg.type, msg.reason, msg.reporter, msg.prefix, msg.hold_ms, msg.port, msg.nexthop) == \
        (notices.T_WITHDRAW, notices.R_LINK_DOWN, SW_S, "10.90.0.0/16", HOLD_MS, S_IN, 0)
    assert bytes(u.payload)[7] == abi.ARN_NF_XDP
    after = dp.port_counters(S_IN)
    assert after["drops"]["members_down"] == drops0["drops"]["members_down"] + 1
    assert after["tx_packets"] == drops0["tx_packets"] + 1
    assert delta(before, count(dp)) == {"sent": 1}
    assert dp.verdict_counters()["tx"]["packets"] == verdicts0 + 1


def test_a_learned_host_route_names_the_prefix_it_forwards_like(arn, lab):
    """A /32 learned inside S's prefix, through the same group, makes a notice naming the
    prefix: the upstream then avoids S for every host there, not one host at a time (each
    host's traffic losing a packet to find out). A /32 of another group names itself."""
    dp = arn
    dp.add_route(SW_S, "10.90.3.4/32", GS)
    try:
        res = run_frame(dp, lab, udp_to_s("10.90.3.4", size=200), S_IN)
        assert res.verdict == "tx"
        assert notices.Notice.unpack(bytes(Ether(res.data)[UDP].payload)).prefix == "10.90.0.0/16"
    finally:
        dp.del_route(SW_S, "10.90.3.4/32")
    dp.add_route(SW_S, "10.92.0.9/32", GS)                 # no covering route of the group
    try:
        res = run_frame(dp, lab, udp_to_s("10.92.0.9", size=200), S_IN)
        assert notices.Notice.unpack(bytes(Ether(res.data)[UDP].payload)).prefix == "10.92.0.9/32"
    finally:
        dp.del_route(SW_S, "10.92.0.9/32")


def test_rate_limit_per_prefix_and_port(arn, lab):
    dp = arn
    first = run_frame(dp, lab, udp_to_s("10.90.0.9"), S_IN)
    assert first.verdict == "tx"
    seq = notices.Notice.unpack(bytes(Ether(first.data)[UDP].payload)).seq
    before, down0 = count(dp), dp.port_counters(S_IN)["drops"]["members_down"]
    for sp in range(5):   # within the interval: dropped as before, no notice
        assert run_frame(dp, lab, udp_to_s("10.90.1.1", sport=sp), S_IN).verdict == "drop"
    assert delta(before, count(dp)) == {"suppressed": 5}
    assert dp.port_counters(S_IN)["drops"]["members_down"] == down0 + 5
    # another upstream port has a rate limit of its own
    other = run_frame(dp, lab, udp_to_s("10.90.1.1", dmac=PORT_MAC[S_IN2]), S_IN2)
    assert other.verdict == "tx" and Ether(other.data)[UDP].payload
    time.sleep(INTERVAL_MS / 1000 + 0.02)
    again = run_frame(dp, lab, udp_to_s("10.90.1.1"), S_IN)
    assert again.verdict == "tx"
    assert notices.Notice.unpack(bytes(Ether(again.data)[UDP].payload)).seq > seq


def test_no_notice_to_a_host_port_or_when_off(arn, lab):
    dp = arn
    before = count(dp)
    assert run_frame(dp, lab, udp_to_s("10.90.0.1", dmac=PORT_MAC[S_HOST]), S_HOST).verdict == "drop"
    dp.set_notices(generate=False, consume=True, hold_ms=HOLD_MS, interval_ns=INTERVAL_MS * 1_000_000)
    dp.clear_exclusions()   # and the rate limit
    assert run_frame(dp, lab, udp_to_s("10.90.0.1"), S_IN).verdict == "drop"
    assert delta(before, count(dp)) == {}


# ---------------------------------------------------------------- consumption
def test_notice_moves_only_that_prefix_off_its_port(arn, lab):
    dp = arn
    before90, before91 = choices(dp, lab), choices(dp, lab, "10.91.7.7")
    assert TO_S in before90.values()
    made = run_frame(dp, lab, udp_to_s("10.90.3.4"), S_IN)   # S's own notice, fed into N
    c0 = count(dp)
    res = run_frame(dp, lab, made.data, TO_S)
    assert res.verdict == "drop"
    assert delta(c0, count(dp)) == {"withdraw_received": 1}
    after90 = choices(dp, lab)
    assert TO_S not in after90.values()
    assert all(after90[sp] == before90[sp] for sp in SPORTS if before90[sp] != TO_S), "a flow off S moved"
    assert choices(dp, lab, "10.91.7.7") == before91, "another prefix's choice changed"
    [ex] = dp.exclusions(SW_N)
    assert ex["prefix"] == "10.90.0.0/16" and ex["ifindexes"] == [TO_S] and ex["active"]
    # RESTORE: back to the choices of before
    assert run_frame(dp, lab, notice(notices.T_RESTORE), TO_S).verdict == "drop"
    assert choices(dp, lab) == before90
    assert dp.exclusions(SW_N) == []


def test_a_notice_on_one_of_parallel_links_moves_traffic_off_all_of_them(arn, lab):
    """Two of N's uplinks lead to S (peer_switch): a notice from S on one excludes both,
    and a RESTORE on either lifts both; the third uplink keeps the traffic."""
    dp = arn
    twin = N_UP[2]
    for ifx in (TO_S, twin):
        dp.set_notice_port(ifx, fabric=True, peer_switch=SW_S)
    try:
        assert {TO_S, twin} <= set(choices(dp, lab).values())
        assert run_frame(dp, lab, notice(), TO_S).verdict == "drop"
        [ex] = dp.exclusions(SW_N)
        assert sorted(ex["ifindexes"]) == sorted([TO_S, twin])
        assert set(choices(dp, lab).values()) == {N_UP[0]}
        assert run_frame(dp, lab, notice(notices.T_RESTORE, port=twin), twin).verdict == "drop"
        assert dp.exclusions(SW_N) == []
        assert {TO_S, twin} <= set(choices(dp, lab).values())
    finally:
        for ifx in (TO_S, twin):
            dp.set_notice_port(ifx, fabric=True)


def test_exclusion_expires_after_hold(arn, lab):
    dp = arn
    before = choices(dp, lab)
    hold_s = 1.5
    assert run_frame(dp, lab, notice(hold_ms=int(hold_s * 1000)), TO_S).verdict == "drop"
    t0 = time.monotonic()
    during = choices(dp, lab)
    assert time.monotonic() - t0 < hold_s, "too slow to look within the hold"
    assert TO_S not in during.values()
    time.sleep(max(0.0, hold_s + 0.05 - (time.monotonic() - t0)))
    assert choices(dp, lab) == before
    assert not dp.exclusions(SW_N)[0]["active"]


def test_hold_zero_lasts_until_restore(arn, lab):
    dp = arn
    run_frame(dp, lab, notice(hold_ms=0), TO_S)
    time.sleep(0.03)
    assert TO_S not in choices(dp, lab).values()
    run_frame(dp, lab, notice(notices.T_RESTORE, hold_ms=0), TO_S)
    assert TO_S in choices(dp, lab).values()


def test_notice_covers_more_specific_routes_of_the_group(arn, lab):
    dp = arn
    dp.add_route(SW_N, "10.90.7.7/32", GN)   # as a learned host route
    try:
        run_frame(dp, lab, notice(), TO_S)
        assert TO_S not in choices(dp, lab).values()
    finally:
        dp.del_route(SW_N, "10.90.7.7/32")


def test_avoid_is_advisory(arn, lab):
    dp = arn
    for ifx in N_UP:
        assert run_frame(dp, lab, notice(port=ifx), ifx).verdict == "drop"
    used = collections.Counter(choices(dp, lab).values())
    assert set(used) == set(N_UP), used   # all avoided: the avoid mask is ignored


def test_notice_to_the_switch_itself_is_consumed_not_passed(arn, lab):
    dp = arn
    c0 = count(dp)
    assert run_frame(dp, lab, notice(dst=N_ADDR), TO_S).verdict == "drop"
    assert delta(c0, count(dp)) == {"withdraw_received": 1}


def test_pass_consumed_sends_the_notice_up_after_recording_it(arn, lab):
    dp = arn
    dp.set_notices(generate=True, consume=True, hold_ms=HOLD_MS, interval_ns=INTERVAL_MS * 1_000_000,
                   pass_consumed=True)
    c0 = count(dp)
    assert run_frame(dp, lab, notice(), TO_S).verdict == "pass"
    assert delta(c0, count(dp)) == {"withdraw_received": 1}
    assert TO_S not in choices(dp, lab).values()


def test_consume_off_or_flow_list_goes_to_the_agent(arn, lab):
    dp = arn
    c0 = count(dp)
    flows = [("10.9.0.2", "10.90.7.7", 1, 2, 17)]
    assert run_frame(dp, lab, notice(flows=flows), TO_S).verdict == "pass"   # N_ADDR is N's
    dp.set_notices(generate=True, consume=False, hold_ms=HOLD_MS, interval_ns=INTERVAL_MS * 1_000_000)
    assert run_frame(dp, lab, notice(), TO_S).verdict == "pass"
    assert delta(c0, count(dp)) == {}
    assert dp.exclusions(SW_N) == []


def test_notice_for_a_prefix_without_route_or_member_is_ignored(arn, lab):
    dp = arn
    c0 = count(dp)
    assert run_frame(dp, lab, notice(prefix="192.168.0.0/16"), TO_S).verdict == "drop"
    assert delta(c0, count(dp)) == {"ignored": 1}


# ---------------------------------------------------------------- malformed notices
def _good() -> bytes:
    return bytes(notice())


def _with(offset: int, value: int) -> bytes:
    """The good notice with one header byte changed (IP/UDP lengths and checksums stay valid)."""
    b = bytearray(_good())
    b[14 + 20 + 8 + offset] = value
    return bytes(b)


def _cut(n: int) -> bytes:
    """The notice's UDP payload cut to n bytes, IP and UDP lengths and checksums made to fit."""
    payload = bytes(notice()[Raw])[:n]
    return bytes(notice(payload=payload))


MUTANTS = ([("magic", _with(i, 0x00)) for i in range(4)]
           + [(f"version {v}", _with(4, v)) for v in (0, 2, 255)]
           + [(f"type {t}", _with(5, t)) for t in (0, 3, 255)]
           + [(f"plen {p}", _with(24, p)) for p in (33, 64, 255)]
           + [(f"payload cut to {n}", _cut(n)) for n in range(0, abi.ARN_HDR_LEN)])


def test_malformed_notices_are_counted_dropped_and_change_nothing(arn, lab):
    dp = arn
    before90, before91 = choices(dp, lab), choices(dp, lab, "10.91.7.7")
    for name, frame in MUTANTS:
        c0 = count(dp)
        res = run_frame(dp, lab, frame, TO_S)
        assert res.verdict == "drop", name
        assert delta(c0, count(dp)) == {"malformed": 1}, name
    # the frame itself cut at every byte (lengths left lying): a parse error or a malformed notice
    good = _good()
    for n in range(14, len(good)):
        c0, p0 = count(dp), dp.port_counters(TO_S)["drops"]["parse_error"]
        res = run_frame(dp, lab, good[:n], TO_S)
        assert res.verdict == "drop", n
        counted = sum(delta(c0, count(dp)).values()) + dp.port_counters(TO_S)["drops"]["parse_error"] - p0
        assert counted == 1, n
    assert dp.exclusions(SW_N) == []
    assert choices(dp, lab) == before90 and choices(dp, lab, "10.91.7.7") == before91


def test_notice_on_a_port_that_is_no_fabric_link(arn, lab):
    dp = arn
    c0 = count(dp)
    frame = notice(port=N_IN)
    assert run_frame(dp, lab, frame, N_IN).verdict == "drop"
    assert delta(c0, count(dp)) == {"not_fabric": 1}
    # ordinary UDP to port 4792 from a host is still forwarded
    plain = udp_to_n("10.90.7.7", sport=4792, dport=4792)
    assert run_frame(dp, lab, plain, N_IN).verdict == "redirect"
    assert dp.exclusions(SW_N) == []


def test_exclusion_survives_the_agents_route_changes(arn, lab):
    """The agent's writes reset the data path's generation (switch_cfg.arn_gen) with a new
    route_gen: the cache is refilled with the exclusion still in force, and a later notice
    still invalidates what was cached."""
    dp = arn
    before = choices(dp, lab)
    run_frame(dp, lab, notice(), TO_S)
    assert TO_S not in choices(dp, lab).values()
    dp.add_route(SW_N, "10.92.0.0/16", GN)          # route_gen + 1, arn_gen back to 0
    try:
        assert TO_S not in choices(dp, lab).values()
        run_frame(dp, lab, notice(notices.T_RESTORE), TO_S)   # arn_gen 1 again: a new pair
        assert choices(dp, lab) == before
    finally:
        dp.del_route(SW_N, "10.92.0.0/16")


# ---------------------------------------------------------------- reaction stamps
def stamps(dp, clear=False) -> dict:
    return dp.reaction_stamps([SW_S, SW_N], clear=clear)


def test_stamps_record_each_step_of_the_dataplane_reaction_once(arn, lab):
    """S stamps the first packet into its dead group and the notice it made; N the
    exclusion and the first packet its exclusion steered. Later packets move no stamp;
    traffic the exclusion does not touch stamps nothing."""
    dp = arn
    stamps(dp, clear=True)
    choices(dp, lab, "10.91.7.7")                 # no avoid mask there: no stamp
    assert stamps(dp) == {SW_S: dict.fromkeys(abi.ARN_STAMP_FIELDS, 0),
                          SW_N: dict.fromkeys(abi.ARN_STAMP_FIELDS, 0)}
    t0 = time.monotonic_ns()
    made = run_frame(dp, lab, udp_to_s("10.90.3.4"), S_IN)
    assert made.verdict == "tx"
    s = stamps(dp)[SW_S]
    assert t0 < s["dead_ns"] <= s["notice_ns"] <= time.monotonic_ns()
    assert s["excl_ns"] == s["avoid_ns"] == 0
    assert run_frame(dp, lab, made.data, TO_S).verdict == "drop"
    assert stamps(dp)[SW_N]["avoid_ns"] == 0      # installed, but no packet steered yet
    choices(dp, lab, "10.91.7.7")
    assert stamps(dp)[SW_N]["avoid_ns"] == 0      # the other prefix is not steered
    choices(dp, lab)
    n = stamps(dp)[SW_N]
    assert s["notice_ns"] <= n["excl_ns"] <= n["avoid_ns"] <= time.monotonic_ns()
    assert n["dead_ns"] == n["notice_ns"] == 0
    run_frame(dp, lab, udp_to_s("10.90.3.5"), S_IN)   # suppressed by the rate limit, dead again
    choices(dp, lab)
    assert stamps(dp, clear=True) == {SW_S: s, SW_N: n}, "a later packet moved a first stamp"
    assert stamps(dp)[SW_N]["avoid_ns"] == 0      # cleared
    choices(dp, lab)
    assert stamps(dp)[SW_N]["avoid_ns"] > n["avoid_ns"], "steered again after the clear"


def test_avoid_stamp_of_the_agents_avoid_mask(arn, lab):
    """The agent path's reaction is a route avoid mask the agent writes: the first packet
    it steers is stamped the same way; a mask that avoids every live member is ignored
    by the data path and stamps nothing."""
    dp = arn
    stamps(dp, clear=True)
    dp.set_route_avoid(SW_N, "10.91.0.0/16", 0b111)   # all three: advisory, ignored
    try:
        choices(dp, lab, "10.91.7.7")
        assert stamps(dp)[SW_N]["avoid_ns"] == 0
        t0 = time.monotonic_ns()
        dp.set_route_avoid(SW_N, "10.91.0.0/16", 0b010)
        run_frame(dp, lab, udp_to_n("10.91.7.7", sport=3000), N_IN)
        assert t0 < stamps(dp)[SW_N]["avoid_ns"] <= time.monotonic_ns()
        assert stamps(dp)[SW_N]["excl_ns"] == 0
    finally:
        dp.set_route_avoid(SW_N, "10.91.0.0/16", 0)
