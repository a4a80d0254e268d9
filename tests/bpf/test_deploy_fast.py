"""The pieces that make deploy fast: the XDP object cache, netlink batches, in-process
sysctls and offloads. Each is checked against what the kernel then holds."""
from __future__ import annotations

import ctypes as ct
import json
import os
import shutil

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from dataplane.kernel import ethtool, rtnl
from dataplane.kernel.netns import in_netns
from dataplane.runtime.netns import set_sysctls
from dataplane.xdp import abi, bpfcache, progtest
from dataplane.xdp.switch import BPF_DIR, SwitchDataplane

from .conftest import sh

SMALL = dict(max_ports=64, max_routes=256)   # its own cache key (cflags) for these tests


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_BPF_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _forward(dp: SwitchDataplane, netns: str) -> tuple[str, bytes]:
    """One frame through a one-switch setup on dp: (verdict, frame out)."""
    dp.set_switch(3, hash_seed=5)
    dp.set_port(301, switch_id=3, slot=1, mac="02:00:00:00:03:01")
    dp.set_port(302, switch_id=3, slot=2, mac="02:00:00:00:03:02")
    dp.set_group(9, [(302, "02:00:00:00:09:09")])
    dp.add_route(3, "10.77.0.0/16", 9)
    dp.set_port_model(302, speed_bps=10**9, buffer_bytes=10**6)     # a BPF_F_LOCK write
    frame = bytes(Ether(src="02:00:00:00:aa:01", dst="02:00:00:00:03:01") /
                  IP(src="10.1.0.2", dst="10.77.0.9", ttl=9) / UDP(sport=1, dport=2) / Raw(b"x" * 20))
    with in_netns(netns):
        result = progtest.prog_test_run(dp.prog_fd, frame, ingress_ifindex=301)
    return result.verdict, result.data


def test_cached_object_forwards_like_the_compiled_one(cache, netns):
    ns = netns("cache")
    sh(["ip", "-n", ns, "link", "add", "name", "p301", "index", "301", "type", "veth",
        "peer", "name", "p302", "index", "302"])
    cold = SwitchDataplane(**SMALL)
    try:
        assert cold.bpf_cache == "cold"
        entries = list(cache.glob("*.json"))
        assert len(entries) == 1
        compiled = _forward(cold, ns)
    finally:
        cold.close()
    warm = SwitchDataplane(**SMALL)
    try:
        assert warm.bpf_cache == "warm"
        assert _forward(warm, ns) == compiled
        assert compiled[0] == "redirect" and compiled[1][:6] == bytes.fromhex("020000000909")
        # the spin-locked port model value was written (its map was made with its BTF)
        queue = abi.PortQueue()
        assert warm.maps.lookup("port_queue", ct.c_uint32(2), queue) and queue.ps_per_byte > 0
    finally:
        warm.close()


def test_damaged_cache_entry_is_compiled_again(cache):
    first = SwitchDataplane(**SMALL)
    first.close()
    (entry,) = cache.glob("*.json")
    record = json.loads(entry.read_text())
    record["programs"]["xdp_switch"]["insns"] = record["programs"]["xdp_switch"]["insns"][:64]
    entry.write_text(json.dumps(record))
    again = SwitchDataplane(**SMALL)
    try:
        assert again.bpf_cache == "cold"     # the verifier refused the cut program
    finally:
        again.close()
    assert json.loads(entry.read_text())["programs"]["xdp_switch"]["insns"] != \
        record["programs"]["xdp_switch"]["insns"]


def test_cache_key_follows_source_flags_and_kernel(tmp_path):
    flags = ["-DMAX_PORTS=64"]
    copy = tmp_path / "bpf"
    shutil.copytree(BPF_DIR, copy)
    key = bpfcache.cache_key(copy, flags)
    assert bpfcache.cache_key(copy, flags) == key
    assert bpfcache.cache_key(copy, ["-DMAX_PORTS=128"]) != key
    header = sorted(copy.glob("*.h"))[0]
    header.write_text(header.read_text() + "\n/* changed */\n")
    assert bpfcache.cache_key(copy, flags) != key
    changed = bpfcache.cache_key(copy, flags)
    assert bpfcache.cache_key(copy, flags, kernel="0.0-other") != changed
    assert bpfcache.cache_key(copy, flags, bcc_version="0.0") != changed


def test_cache_off_compiles(monkeypatch):
    monkeypatch.setenv("RAILAB_BPF_CACHE", "off")
    dp = SwitchDataplane(**SMALL)
    try:
        assert dp.bpf_cache == "off"
    finally:
        dp.close()


def test_netlink_batch_builds_what_ip_would(netns):
    a, b = netns("nla"), netns("nlb")
    fds = [os.open(f"/run/netns/{n}", os.O_RDONLY) for n in (a, b)]
    try:
        rtnl.run_in(None, [rtnl.veth("x1", 4101, "02:00:00:00:41:01", fds[0],
                                     "y1", 4102, "02:00:00:00:41:02", fds[1]),
                           rtnl.veth("x2", 4103, "02:00:00:00:41:03", fds[0],
                                     "y2", 4104, "02:00:00:00:41:04", fds[1])])
    finally:
        for fd in fds:
            os.close(fd)
    link = json.loads(sh(["ip", "-j", "-n", b, "link", "show", "dev", "y2"]).stdout)[0]
    assert (link["ifindex"], link["address"]) == (4104, "02:00:00:00:41:04")
    rtnl.run_in(a, [rtnl.link_up(4101), rtnl.link_up(4103),
                    rtnl.address(4101, "10.5.0.2/24", rtnl.IFA_F_NOPREFIXROUTE),
                    rtnl.route("0.0.0.0/0", [("10.5.0.1", 4101), ("10.5.0.1", 4103)], table=1234),
                    rtnl.route("10.6.0.0/16", [("10.5.0.1", 4101)]),
                    rtnl.rule("10.5.0.2", 1234, 150)])
    table = sh(["ip", "-n", a, "route", "show", "table", "1234"]).stdout
    assert "default" in table and table.count("nexthop via 10.5.0.1") == 2 and table.count("onlink") == 2
    main = sh(["ip", "-n", a, "route", "show"]).stdout
    assert "10.6.0.0/16 via 10.5.0.1 dev x1 onlink" in main
    assert "10.5.0.0/24" not in main                      # no prefix route
    assert "from 10.5.0.2 lookup 1234" in sh(["ip", "-n", a, "rule"]).stdout
    with pytest.raises(rtnl.NetlinkError) as refused:
        rtnl.run_in(a, [rtnl.address(4101, "10.5.0.2/24", label="x1 address again")])
    assert str(refused.value).startswith("x1 address again: File exists")
    errors = rtnl.run_in(a, [rtnl.link_up(4999), rtnl.link_up(4103)], keep_going=True)
    assert [e.label for e in errors] == ["link 4999 up"]


def test_sysctls_and_offloads_land_in_the_namespace(netns):
    ns = netns("sysctl")
    sh(["ip", "-n", ns, "link", "add", "name", "h0", "type", "veth", "peer", "name", "h1"])
    root_forward = open("/proc/sys/net/ipv4/ip_forward").read()
    set_sysctls(ns, {"net/ipv4/ip_forward": "1", "net/ipv4/conf/h0/rp_filter": "2"})
    assert sh(["ip", "netns", "exec", ns, "sysctl", "-n", "net.ipv4.ip_forward"]).stdout.strip() == "1"
    assert sh(["ip", "netns", "exec", ns, "sysctl", "-n", "net.ipv4.conf.h0.rp_filter"]).stdout.strip() == "2"
    assert open("/proc/sys/net/ipv4/ip_forward").read() == root_forward
    sh(["ip", "netns", "exec", ns, "ethtool", "-K", "h0", "gro", "off", "tx", "on"])
    ethtool.host_port_offloads(ns, ["h0"])
    assert ethtool.offloads(ns, "h0") == {"gro": True, "tx_checksum": False}
    features = sh(["ip", "netns", "exec", ns, "ethtool", "-k", "h0"]).stdout
    assert "generic-receive-offload: on" in features and "tx-checksumming: off" in features
    with pytest.raises(OSError, match="ethtool nosuch"):
        ethtool.host_port_offloads(ns, ["nosuch"])


def test_links_come_up_with_their_carrier_as_they_are_made():
    """netns.create brings each batch's veth ends up right after making them, from a socket
    in each end's namespace: every end is up with its carrier before the configure step
    (node by node, a 16,384-GPU lab's link watcher held the rtnl lock for minutes)."""
    from dataplane.runtime import labspec, netns   # deferred: only this test builds a lab
    from dataplane.topology.generate import generate

    spec = labspec.build(generate("dual-plane", name="upnow", servers=2, rails=2, spines=2))
    try:
        netns.create(spec)
        for node in spec.nodes:
            links = json.loads(sh(["ip", "-j", "-n", node.netns, "link", "show"]).stdout)
            ports = [link for link in links if link["ifname"] != "lo"]
            assert len(ports) == len(node.interfaces)
            assert all({"UP", "LOWER_UP"} <= set(link["flags"]) for link in ports), (node.name, ports)
    finally:
        netns.delete_namespaces([n.netns for n in spec.nodes])
