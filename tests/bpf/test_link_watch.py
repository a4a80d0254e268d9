"""The link watch (bpf/switch.c rl_link_up, issue 27): with it on, the data path stops
sending into a fabric link the kernel has taken down before the agent hears of it, from
the port's connected route in the switch's FIB. BPF_PROG_TEST_RUN on crafted frames in a
namespace whose veths really go down; the agent's side (set_port_state) is never told.

One switch W: a fabric ingress port, a group of two fabric uplinks towards 10.95/16, each
uplink with a /31 address whose other half is the neighbour's (the watched case), and a
third group member through a port with a /32 address (not watchable: taken as up)."""

from __future__ import annotations

import pytest

from dataplane.runtime.netns import set_sysctls
from dataplane.xdp import abi

from .. import frames
from .conftest import run_frame, sh, switch_bench

SW = 21
W_IN = 701                               # fabric ingress (from the upstream)
W_UP = [702, 703]                        # the group's watched links
PORTS = [W_IN, *W_UP]
PORT_MAC = frames.macs("02:00:00:15:00", PORTS, 700)
NH_MAC = frames.macs("02:00:00:16:00", W_UP, 700)
UP_MAC = "02:00:00:17:00:01"
GW = 95
ADDR = {W_IN: ("10.254.1.1/31", "10.254.1.0"), 702: ("10.254.2.1/31", "10.254.2.0"),
        703: ("10.254.3.1/31", "10.254.3.0")}
SPORTS = range(4000, 4064)

udp_in = frames.udp_from(UP_MAC, PORT_MAC[W_IN])
egress_of = frames.egress_lookup(NH_MAC)


def link(ns: str, ifx: int, state: str) -> None:
    sh(["ip", "-n", ns, "link", "set", f"p{ifx}", state])


@pytest.fixture(scope="module")
def lab(dp, module_netns):
    ports = {ifx: (SW, 140 + i, PORT_MAC[ifx]) for i, ifx in enumerate(PORTS)}
    with switch_bench(dp, module_netns, "watch", {SW: 0x61}, ports, groups=[GW]) as ns:
        set_sysctls(ns, {"net/ipv4/conf/lo/forwarding": "1",
                         "net/ipv4/conf/all/ignore_routes_with_linkdown": "1"})
        for ifx, (address, _far) in ADDR.items():
            sh(["ip", "-n", ns, "address", "add", address, "dev", f"p{ifx}"])
            sh(["ip", "-n", ns, "link", "set", f"q{ifx}", "up"])
            link(ns, ifx, "up")
        dp.set_group(GW, [(e, NH_MAC[e]) for e in W_UP])
        dp.add_route(SW, "10.95.0.0/16", GW)
        for ifx, (address, far) in ADDR.items():
            dp.set_notice_port(ifx, fabric=True, src=address, dst=far)
        try:
            yield ns
        finally:
            dp.set_notices(generate=False, consume=False, hold_ms=1)
            dp.clear_exclusions()
            for ifx in PORTS:
                dp.set_notice_port(ifx, fabric=False)


@pytest.fixture
def watch(dp, lab):
    dp.set_notices(generate=True, consume=True, hold_ms=0, interval_ns=10**9, watch=True)
    yield dp
    for ifx in W_UP:
        link(lab, ifx, "up")
    dp.set_notices(generate=False, consume=False, hold_ms=1)
    dp.clear_exclusions()


def choices(dp, ns) -> dict[int, int]:
    return {sp: egress_of(run_frame(dp, ns, udp_in("10.95.7.7", sport=sp), W_IN)) for sp in SPORTS}


def test_only_a_fabric_port_with_a_connected_neighbour_is_watched(dp, lab):
    assert dp.notice_port(702)["watched"]
    dp.set_notice_port(702, fabric=True, src="10.254.2.1/32", dst="10.254.2.0")
    try:
        assert not dp.notice_port(702)["watched"], "a /32 has no connected route"
        dp.set_notice_port(702, fabric=True, src="10.254.2.1/31", dst="10.254.9.0")
        assert not dp.notice_port(702)["watched"], "the neighbour is not on the port's segment"
    finally:
        dp.set_notice_port(702, fabric=True, src=ADDR[702][0], dst=ADDR[702][1])


def test_a_downed_link_is_left_before_the_agent_hears(watch, lab):
    dp = watch
    before = choices(dp, lab)
    assert set(before.values()) == set(W_UP), "both links carry flows while up"
    found0 = dp.notice_counters()["watch_found_down"]
    link(lab, 702, "down")
    after = choices(dp, lab)
    assert set(after.values()) == {703}
    assert all(after[sp] == before[sp] for sp in SPORTS if before[sp] == 703), "a flow on the live link moved"
    assert dp.notice_counters()["watch_found_down"] - found0 == sum(1 for e in before.values() if e == 702)
    assert dp.notice_counters()["watch_blind"] == 0
    link(lab, 702, "up")
    assert choices(dp, lab) == before, "flows return when the link comes back"


def test_carrier_loss_counts_as_down(watch, lab):
    """The far end goes down (a neighbour's switch-down): this port keeps its address
    and route, but without carrier the FIB skips it."""
    dp = watch
    sh(["ip", "-n", lab, "link", "set", "q702", "down"])
    try:
        assert set(choices(dp, lab).values()) == {703}
    finally:
        sh(["ip", "-n", lab, "link", "set", "q702", "up"])
    assert set(choices(dp, lab).values()) == set(W_UP)


def test_every_link_down_makes_the_packet_a_notice(watch, lab):
    dp = watch
    for ifx in W_UP:
        link(lab, ifx, "down")
    drops0 = dp.port_counters(W_IN)["drops"]["members_down"]
    res = run_frame(dp, lab, udp_in("10.95.3.4", size=200), W_IN)
    assert res.verdict == "tx" and len(res.data) == abi.ARN_FRAME_LEN, "a WITHDRAW back upstream"
    assert dp.port_counters(W_IN)["drops"]["members_down"] == drops0 + 1


def test_without_the_watch_the_program_sends_into_the_dead_link(dp, lab):
    """The agent path: until the agent's netlink, the dead link keeps its flows (what the
    watch is for); also shows the watch's answer comes from the kernel, not a stale map."""
    dp.set_notices(generate=True, consume=True, hold_ms=0, interval_ns=10**9, watch=False)
    try:
        before = choices(dp, lab)
        link(lab, 702, "down")
        assert choices(dp, lab) == before
    finally:
        link(lab, 702, "up")
        dp.set_notices(generate=False, consume=False, hold_ms=1)
