"""The XDP pipeline, run with BPF_PROG_TEST_RUN on scapy-crafted frames.

ctx->ingress_ifindex must be a device in the calling thread's netns, so the
module creates a namespace holding veth devices with the fixed ifindexes the
tests program as switch ports, and runs every frame inside it (dataplane.kernel.netns).
"""

from __future__ import annotations

import collections

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from dataplane.kernel.netns import in_netns
from dataplane.xdp import progtest

from .. import frames
from .conftest import run_frame, switch_bench

SW = 1            # switch under test
SW2 = 2           # a second switch: routing tables are per switch
IN = 101          # ingress port of SW
EG = [102, 103, 104, 105]   # egress ports of SW
IN2 = 111         # ingress port of SW2
UNKNOWN = 199     # a device that is not a switch port
ALL = [IN, *EG, IN2, UNKNOWN]

HOST_MAC = "02:00:00:00:aa:01"
PORT_MAC = frames.macs("02:00:00:01:00", ALL, 100)
NH_MAC = frames.macs("02:00:00:02:00", EG, 100)

G_ECMP, G_ONE, G_EMPTY, G_LBN, G_SPRAY = 10, 11, 12, 13, 14


@pytest.fixture(scope="module")
def lab(dp, module_netns):
    ports = {ifx: (SW, slot, PORT_MAC[ifx]) for slot, ifx in enumerate([IN, *EG], start=1)}
    ports[IN2] = (SW2, 11, PORT_MAC[IN2])
    groups = [G_ECMP, G_ONE, G_EMPTY, G_LBN, G_SPRAY]
    with switch_bench(dp, module_netns, "pt", {SW: 0x1234, SW2: 0x9999}, ports, others=[UNKNOWN],
                      groups=groups) as ns:
        dp.add_address(SW, IN, "10.0.0.1")
        dp.set_group(G_ECMP, [(e, NH_MAC[e]) for e in EG])
        dp.set_group(G_ONE, [(EG[0], NH_MAC[EG[0]])])
        dp.set_group(G_EMPTY, [])
        dp.set_group(G_LBN, [(e, NH_MAC[e]) for e in EG], mode="lbn")
        dp.set_group(G_SPRAY, [(e, NH_MAC[e]) for e in EG], mode="spray_random")
        for n, gid in enumerate(groups, start=1):
            dp.add_route(SW, f"10.{n}.0.0/16", gid)
        yield ns


def run(dp, ns, frame, ifindex=IN):
    return run_frame(dp, ns, frame, ifindex)


udp = frames.udp_from(HOST_MAC, PORT_MAC[IN])
egress_of = frames.egress_lookup(NH_MAC)


def roce(dst, qp, psn=7, **kw):
    return frames.roce(dst, smac=HOST_MAC, dmac=PORT_MAC[IN], qp=qp, psn=psn, **kw)


def drops(dp, ifindex=IN):
    return dp.port_counters(ifindex)["drops"]


# ---------------------------------------------------------------- forwarding
def test_forward_rewrites_macs_ttl_and_checksum(dp, lab):
    before_in, before_out = dp.port_counters(IN), dp.port_counters(EG[0])
    before_m = dp.member_counters(G_ONE)[0]["packets"]
    before_v = dp.verdict_counters()["redirect"]["packets"]
    frame = udp("10.2.3.4", ttl=64)
    res = run(dp, lab, frame)
    assert res.verdict == "redirect"
    out = Ether(res.data)
    assert out.dst == NH_MAC[EG[0]] and out.src == PORT_MAC[EG[0]]
    assert out[IP].ttl == 63
    chk = out[IP].chksum
    del out[IP].chksum
    assert IP(bytes(out[IP]))[IP].chksum == chk, "incremental IP checksum is wrong"
    assert bytes(out[IP].payload) == bytes(frame[IP].payload)
    after_in, after_out = dp.port_counters(IN), dp.port_counters(EG[0])
    assert after_in["rx_packets"] == before_in["rx_packets"] + 1
    assert after_in["rx_bytes"] == before_in["rx_bytes"] + len(frame)
    assert after_out["tx_packets"] == before_out["tx_packets"] + 1
    assert dp.member_counters(G_ONE)[0]["packets"] == before_m + 1
    assert dp.verdict_counters()["redirect"]["packets"] == before_v + 1


@pytest.mark.parametrize("ttl,ident,tos", [(2, 0, 0), (255, 0xffff, 0xff), (64, 0x1234, 0),
                                           (17, 0xfeff, 0x10), (200, 0x00ff, 0xb8)])
def test_ttl_checksum_edge_cases(dp, lab, ttl, ident, tos):
    frame = Ether(src=HOST_MAC, dst=PORT_MAC[IN]) / IP(src="10.255.255.255", dst="10.2.0.1", ttl=ttl,
                                                       id=ident, tos=tos) / UDP() / Raw(b"a")
    out = Ether(run(dp, lab, frame).data)
    chk = out[IP].chksum
    del out[IP].chksum
    assert IP(bytes(out[IP]))[IP].chksum == chk and out[IP].ttl == ttl - 1


@pytest.mark.parametrize("ttl", [0, 1])
def test_ttl_expired_dropped_and_counted(dp, lab, ttl):
    before = drops(dp)["ttl_expired"]
    assert run(dp, lab, udp("10.2.0.9", ttl=ttl)).verdict == "drop"
    assert drops(dp)["ttl_expired"] == before + 1


def test_no_route_dropped_and_counted(dp, lab):
    before, before_g = drops(dp)["no_route"], dp.drop_counters()["no_route"]
    assert run(dp, lab, udp("192.168.77.1")).verdict == "drop"
    assert drops(dp)["no_route"] == before + 1
    assert dp.drop_counters()["no_route"] == before_g + 1


def test_routing_tables_are_per_switch(dp, lab):
    assert dp.lookup_route(SW, "10.2.0.1") == G_ONE
    assert dp.lookup_route(SW2, "10.2.0.1") is None
    before = drops(dp, IN2)["no_route"]
    assert run(dp, lab, udp("10.2.0.1", dmac=PORT_MAC[IN2]), ifindex=IN2).verdict == "drop"
    assert drops(dp, IN2)["no_route"] == before + 1


def test_longest_prefix_wins_and_del_route(dp, lab):
    dp.add_route(SW, "10.1.5.0/24", G_ONE)
    try:
        assert dp.lookup_route(SW, "10.1.5.9") == G_ONE
        assert dp.lookup_route(SW, "10.1.6.9") == G_ECMP
        assert egress_of(run(dp, lab, udp("10.1.5.9"))) == EG[0]
    finally:
        assert dp.del_route(SW, "10.1.5.0/24")
    assert dp.lookup_route(SW, "10.1.5.9") == G_ECMP
    assert not dp.del_route(SW, "10.1.5.0/24")


def test_empty_group_is_no_member(dp, lab):
    before = drops(dp)["no_member"]
    assert run(dp, lab, udp("10.3.0.1")).verdict == "drop"
    assert drops(dp)["no_member"] == before + 1


def test_local_address_passes_to_kernel(dp, lab):
    frame = Ether(src=HOST_MAC, dst=PORT_MAC[IN]) / IP(src="10.9.0.2", dst="10.0.0.1") / ICMP()
    assert run(dp, lab, frame).verdict == "pass"


def test_ipv6_dropped_as_not_ipv4(dp, lab):
    before = drops(dp)["not_ipv4"]
    frame = Ether(src=HOST_MAC, dst="33:33:ff:00:00:01") / IPv6(dst="ff02::1:ff00:1") / ICMP()
    assert run(dp, lab, frame).verdict == "drop"
    lldp = Ether(src=HOST_MAC, dst="01:80:c2:00:00:0e", type=0x88cc) / Raw(b"\x02\x07" + b"\0" * 40)
    assert run(dp, lab, lldp).verdict == "drop"
    assert drops(dp)["not_ipv4"] == before + 2


def test_parse_errors(dp, lab):
    before = drops(dp)["parse_error"]
    ip_bytes = bytes(udp("10.2.0.1"))
    assert run(dp, lab, ip_bytes[:14 + 12]).verdict == "drop"          # truncated IPv4
    assert run(dp, lab, ip_bytes[:14 + 20 + 4]).verdict == "drop"      # truncated UDP
    short_bth = bytes(roce("10.2.0.1", qp=5))[:14 + 20 + 8 + 6]        # truncated BTH
    assert run(dp, lab, short_bth).verdict == "drop"
    bad_ihl = bytearray(ip_bytes)
    bad_ihl[14] = 0x44                                                 # IHL 4 < 5
    assert run(dp, lab, bytes(bad_ihl)).verdict == "drop"
    assert drops(dp)["parse_error"] == before + 4


def test_ipv4_in_broadcast_frame_not_routed(dp, lab):
    before = drops(dp)["not_unicast"]
    assert run(dp, lab, udp("10.2.0.1", dmac="ff:ff:ff:ff:ff:ff")).verdict == "drop"
    assert drops(dp)["not_unicast"] == before + 1


def test_unknown_ingress_port(dp, lab):
    before = dp.drop_counters()["unknown_port"]
    assert run(dp, lab, udp("10.2.0.1"), ifindex=UNKNOWN).verdict == "drop"
    assert dp.drop_counters()["unknown_port"] == before + 1


def test_port_down(dp, lab):
    dp.set_port_state(IN, False)
    try:
        before = drops(dp)["port_down"]
        assert run(dp, lab, udp("10.2.0.1")).verdict == "drop"
        assert drops(dp)["port_down"] == before + 1
    finally:
        dp.set_port_state(IN, True)
    assert run(dp, lab, udp("10.2.0.1")).verdict == "redirect"


# ---------------------------------------------------------------- ARP
@pytest.mark.parametrize("arp_reply,verdict", [("redirect", "redirect"), ("tx", "tx")])
def test_arp_request_for_owned_address_is_answered(dp, lab, arp_reply, verdict):
    before_tx = dp.port_counters(IN)["tx_packets"]
    req = Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=HOST_MAC, psrc="10.0.0.2",
                                                             hwdst="00:00:00:00:00:00", pdst="10.0.0.1")
    dp.set_port(IN, switch_id=SW, slot=1, mac=PORT_MAC[IN], arp_reply=arp_reply)
    try:
        res = run(dp, lab, req)
    finally:
        dp.set_port(IN, switch_id=SW, slot=1, mac=PORT_MAC[IN])
    assert res.verdict == verdict     # redirect: back out of the ingress port (see switch.c)
    rep = Ether(res.data)
    assert rep.dst == HOST_MAC and rep.src == PORT_MAC[IN]
    a = rep[ARP]
    assert (a.op, a.hwsrc, a.psrc, a.hwdst, a.pdst) == (2, PORT_MAC[IN], "10.0.0.1", HOST_MAC, "10.0.0.2")
    assert (a.hwtype, a.ptype, a.hwlen, a.plen) == (1, 0x0800, 6, 4)
    assert dp.port_counters(IN)["tx_packets"] == before_tx + 1


def test_arp_not_ours_passes(dp, lab):
    def req(pdst, psrc="10.0.0.2"):
        return Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=HOST_MAC, psrc=psrc, pdst=pdst)
    assert run(dp, lab, req("10.0.0.99")).verdict == "pass"                 # not owned
    assert run(dp, lab, req("10.0.0.1"), ifindex=EG[0]).verdict == "pass"   # owned, but on another port
    assert run(dp, lab, req("10.0.0.1", psrc="10.0.0.1")).verdict == "pass"  # gratuitous
    reply = Ether(src=HOST_MAC, dst=PORT_MAC[IN]) / ARP(op=2, hwsrc=HOST_MAC, psrc="10.0.0.2",
                                                        pdst="10.0.0.1", hwdst=PORT_MAC[IN])
    assert run(dp, lab, reply).verdict == "pass"


def test_proxy_arp(dp, lab):
    req = Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=HOST_MAC, psrc="10.0.0.2",
                                                             pdst="10.2.0.7")
    assert run(dp, lab, req).verdict == "pass"
    dp.set_port(IN, switch_id=SW, slot=1, mac=PORT_MAC[IN], proxy_arp=True)
    try:
        res = run(dp, lab, req)
        assert res.verdict == "redirect" and Ether(res.data)[ARP].psrc == "10.2.0.7"
        no_route = req.copy()
        no_route[ARP].pdst = "172.16.0.1"
        assert run(dp, lab, no_route).verdict == "pass"
    finally:
        dp.set_port(IN, switch_id=SW, slot=1, mac=PORT_MAC[IN])


# ---------------------------------------------------------------- ECMP
def test_flow_always_hashes_to_same_member(dp, lab):
    for sport in (1, 5555, 65535):
        seen = {egress_of(run(dp, lab, udp("10.1.0.1", sport=sport, payload=bytes([i]) * 20)))
                for i in range(20)}
        assert len(seen) == 1


def _spread(dp, ns, n=1000, seed_tag=0):
    counts = collections.Counter()
    for i in range(n):
        frame = udp(f"10.1.{i % 7}.{1 + i % 200}", src=f"10.9.{i // 250}.{i % 250 + 1}",
                    sport=10000 + i, dport=4000 + (i * 7) % 13)
        counts[egress_of(run(dp, ns, frame))] += 1
    return counts


def test_1000_flows_spread_within_10_percent(dp, lab):
    before = [m["packets"] for m in dp.member_counters(G_ECMP)]
    counts = _spread(dp, lab)
    assert set(counts) == set(EG)
    for e in EG:
        assert 225 <= counts[e] <= 275, dict(counts)
    after = [m["packets"] for m in dp.member_counters(G_ECMP)]
    assert [a - b for a, b in zip(after, before)] == [counts[e] for e in EG]


def test_spread_is_uniform_for_several_seeds(dp, lab):
    try:
        for seed in (1, 2, 0xdeadbeef, 77777):
            dp.set_switch(SW, hash_seed=seed)
            counts = _spread(dp, lab, n=400)
            chi2 = sum((counts[e] - 100) ** 2 / 100 for e in EG)
            assert chi2 < 16.27, (seed, dict(counts))   # p = 0.001, 3 degrees of freedom
    finally:
        dp.set_switch(SW, hash_seed=0x1234)


def test_seed_changes_mapping(dp, lab):
    flows = [udp("10.1.0.1", sport=20000 + i) for i in range(200)]
    try:
        maps = []
        for seed in (0x1111, 0x2222):
            dp.set_switch(SW, hash_seed=seed)
            maps.append([egress_of(run(dp, lab, f)) for f in flows])
    finally:
        dp.set_switch(SW, hash_seed=0x1234)
    differ = sum(a != b for a, b in zip(*maps))
    assert differ > 100, differ     # independent mappings differ on ~75%


def test_roce_dest_qp_in_hash_fields(dp, lab):
    qps = range(100, 164)
    same = {egress_of(run(dp, lab, roce("10.1.0.9", qp))) for qp in qps}
    assert len(same) == 1, "5-tuple hash must ignore the QP"
    dp.set_group(G_ECMP, [(e, NH_MAC[e]) for e in EG], hash_fields=["src_ip", "dst_ip", "proto",
                                                                      "src_port", "dst_port", "bth_dqp"])
    try:
        per_qp = [egress_of(run(dp, lab, roce("10.1.0.9", qp))) for qp in qps]
        assert len(set(per_qp)) == 4
        assert per_qp == [egress_of(run(dp, lab, roce("10.1.0.9", qp, psn=99))) for qp in qps]
        # non-RoCE traffic in the same group still hashes on the 5-tuple only
        assert len({egress_of(run(dp, lab, udp("10.1.0.9", sport=7, payload=bytes([i]) * 8)))
                    for i in range(10)}) == 1
    finally:
        dp.set_group(G_ECMP, [(e, NH_MAC[e]) for e in EG])


def test_switch_default_hash_fields(dp, lab):
    try:
        dp.set_switch(SW, hash_seed=0x1234, hash_fields=["dst_ip"])
        assert len({egress_of(run(dp, lab, udp("10.1.0.9", src=f"10.9.0.{i}", sport=i)))
                    for i in range(1, 60)}) == 1
    finally:
        dp.set_switch(SW, hash_seed=0x1234)


def test_lbn_mode_uses_ingress_port_value(dp, lab):
    try:
        for lbn in range(6):
            dp.set_port(IN, switch_id=SW, slot=1, mac=PORT_MAC[IN], lbn=lbn)
            got = {egress_of(run(dp, lab, udp("10.4.0.1", sport=s))) for s in range(20)}
            assert got == {EG[lbn % 4]}
    finally:
        dp.set_port(IN, switch_id=SW, slot=1, mac=PORT_MAC[IN])


def test_spray_random_uses_all_members(dp, lab):
    got = collections.Counter(egress_of(run(dp, lab, udp("10.5.0.1"))) for _ in range(200))
    assert set(got) == set(EG) and min(got.values()) > 20


def test_set_group_validates(dp, lab):
    from dataplane.xdp.switch import DataplaneError
    with pytest.raises(DataplaneError):
        dp.set_group(20, [(4242, "02:00:00:00:00:01")])            # not a port
    with pytest.raises(DataplaneError):
        dp.set_group(dp.max_groups, [])
    with pytest.raises(DataplaneError):
        dp.set_port(9999, switch_id=SW, slot=1, mac=PORT_MAC[IN])  # slot 1 belongs to IN


def test_tcp_ports_hashed(dp, lab):
    got = {egress_of(run(dp, lab, Ether(src=HOST_MAC, dst=PORT_MAC[IN]) / IP(src="10.9.0.2", dst="10.1.0.1")
                         / TCP(sport=s, dport=80))) for s in range(1000, 1040)}
    assert len(got) == 4


def test_prog_run_repeat_reruns_on_modified_frame(dp, lab):
    """Pitfall for benchmarks: with repeat=N the program runs N times on the same,
    already rewritten buffer, so TTL drops by N (and the last verdict is returned)."""
    with in_netns(lab):
        res = progtest.prog_test_run(dp.prog_fd, bytes(udp("10.1.0.1", ttl=64)), ingress_ifindex=IN,
                                     repeat=10)
    assert res.verdict == "redirect" and Ether(res.data)[IP].ttl == 54


def test_prog_run_speed(dp, lab, record_property):
    frame = bytes(udp("10.1.0.1", ttl=255))
    samples = []
    with in_netns(lab):
        for _ in range(40):
            res = progtest.prog_test_run(dp.prog_fd, frame, ingress_ifindex=IN, repeat=250)
            assert res.verdict == "redirect"
            samples.append(res.duration_ns)
    samples.sort()
    record_property("ns_per_packet_median", samples[len(samples) // 2])
    print(f"\nxdp_switch ECMP forward: median {samples[len(samples) // 2]} ns/packet, "
          f"min {samples[0]} (PROG_TEST_RUN, 40 x repeat=250)")
