"""Live traffic: h1 -- sw -- h2 in three namespaces, the switch forwarding with XDP only."""

from __future__ import annotations

import os
import time

import pytest

from dataplane.xdp import progtest
from dataplane.xdp.bpfio import DataplaneError, attach_xdp, attached_xdp, detach_xdp

from .conftest import add_veths, link_index, link_mac, sh

SWID = 7
P1, P2 = 42001, 42002          # lab-unique switch-port ifindexes
SLOT1, SLOT2 = 100, 101
G1, G2 = 70, 71


@pytest.fixture
def topo(dp, netns):
    h1, sw, h2 = netns("h1"), netns("sw"), netns("h2")
    sh(["ip", "-n", sw, "link", "add", "name", "p1", "index", str(P1), "type", "veth",
        "peer", "name", "eth0", "netns", h1])
    sh(["ip", "-n", sw, "link", "add", "name", "p2", "index", str(P2), "type", "veth",
        "peer", "name", "eth0", "netns", h2])
    sh(["ip", "netns", "exec", sw, "sysctl", "-qw", "net.ipv4.ip_forward=0"])
    for ns, dev in ((sw, "p1"), (sw, "p2"), (h1, "eth0"), (h2, "eth0")):
        sh(["ip", "-n", ns, "link", "set", dev, "up"])
    for ns, net in ((h1, "10.9.1"), (h2, "10.9.2")):
        sh(["ip", "-n", ns, "addr", "add", f"{net}.2/24", "dev", "eth0"])
        sh(["ip", "-n", ns, "route", "add", "default", "via", f"{net}.1"])
        # PLATFORM: redirect into a veth needs GRO (or XDP) on the peer; TCP needs tx csum off
        sh(["ip", "netns", "exec", ns, "ethtool", "-K", "eth0", "gro", "on", "tx", "off"])
    dp.set_switch(SWID, hash_seed=0x77)
    dp.set_port(P1, switch_id=SWID, slot=SLOT1, mac=link_mac(sw, "p1"))
    dp.set_port(P2, switch_id=SWID, slot=SLOT2, mac=link_mac(sw, "p2"))
    dp.add_address(SWID, P1, "10.9.1.1")
    dp.add_address(SWID, P2, "10.9.2.1")
    dp.set_group(G1, [(P1, link_mac(h1, "eth0"))])
    dp.set_group(G2, [(P2, link_mac(h2, "eth0"))])
    dp.add_route(SWID, "10.9.1.0/24", G1)
    dp.add_route(SWID, "10.9.2.0/24", G2)
    try:
        yield h1, sw, h2
    finally:
        for p in (P1, P2):
            dp.del_port(p)
        dp.del_route(SWID, "10.9.1.0/24")
        dp.del_route(SWID, "10.9.2.0/24")


def test_ping_through_xdp_switch(dp, topo):
    h1, sw, h2 = topo
    assert sh(["ip", "netns", "exec", sw, "sysctl", "-n", "net.ipv4.ip_forward"]).stdout.strip() == "0"
    for p in (P1, P2):
        assert attach_xdp(sw, p, dp.prog_fd) == "drv"
        assert attached_xdp(sw, p)[0] == "drv"
    before1, before2 = dp.port_counters(P1), dp.port_counters(P2)
    before_redirect = dp.verdict_counters()["redirect"]["packets"]
    p = sh(["ip", "netns", "exec", h1, "ping", "-c", "3", "-i", "0.2", "-W", "2", "10.9.2.2"], check=False)
    c1, c2 = dp.port_counters(P1), dp.port_counters(P2)
    assert p.returncode == 0, (p.stdout + p.stderr, c1, c2, dp.verdict_counters(),
                               sh(["ip", "-n", h1, "neigh"]).stdout, sh(["ip", "-n", h2, "neigh"]).stdout,
                               sh(["ip", "-n", h2, "-s", "link"]).stdout)
    c1, c2 = dp.port_counters(P1), dp.port_counters(P2)
    assert c1["rx_packets"] - before1["rx_packets"] >= 4          # ARP + 3 echo requests
    assert c2["tx_packets"] - before2["tx_packets"] >= 3
    assert c2["rx_packets"] - before2["rx_packets"] >= 3          # echo replies (+ h2's ARP)
    assert c1["tx_packets"] - before1["tx_packets"] >= 4          # ARP reply + 3 echo replies
    assert dp.member_counters(G2)[0]["packets"] >= 3
    assert dp.member_counters(G1)[0]["packets"] >= 3
    assert dp.verdict_counters()["redirect"]["packets"] - before_redirect >= 6
    assert sh(["ip", "-n", h1, "neigh", "show", "10.9.1.1"]).stdout.split()[4] == link_mac(sw, "p1")

    # without the XDP program nothing forwards (kernel forwarding is off)
    for p in (P1, P2):
        detach_xdp(sw, p)
        assert attached_xdp(sw, p) == (None, 0)
    detach_xdp(sw, P1)     # detaching twice is a no-op
    p = sh(["ip", "netns", "exec", h1, "ping", "-c", "1", "-W", "1", "10.9.2.2"], check=False)
    assert p.returncode != 0


def test_arp_xdp_tx_needs_peer_xdp_program(dp, topo):
    """arp_reply='tx': XDP_TX on veth reaches the peer only if the peer runs XDP;
    with pass_prog_fd on the host NICs it works."""
    h1, sw, h2 = topo
    for p, name in ((P1, "p1"), (P2, "p2")):
        dp.set_port(p, switch_id=SWID, slot=SLOT1 if p == P1 else SLOT2, mac=link_mac(sw, name),
                    arp_reply="tx")
        attach_xdp(sw, p, dp.prog_fd)
    for ns in (h1, h2):
        attach_xdp(ns, link_index(ns, "eth0"), dp.pass_prog_fd)
    before = dp.verdict_counters()["tx"]["packets"]
    p = sh(["ip", "netns", "exec", h1, "ping", "-c", "2", "-i", "0.2", "-W", "2", "10.9.2.2"], check=False)
    assert p.returncode == 0, p.stdout
    assert dp.verdict_counters()["tx"]["packets"] - before >= 2


def test_tcp_through_xdp_switch(dp, topo):
    """TCP needs tx checksum offload off on the hosts (PLATFORM); a short transfer with nc-free python."""
    h1, sw, h2 = topo
    for p in (P1, P2):
        attach_xdp(sw, p, dp.prog_fd)
    import subprocess
    import sys
    server = subprocess.Popen(["ip", "netns", "exec", h2, sys.executable, "-c",
                               "import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                               "s.bind(('10.9.2.2',5201));s.listen(1);s.settimeout(10);c,_=s.accept();n=0\n"
                               "while True:\n d=c.recv(65536)\n if not d: break\n n+=len(d)\n"
                               "print(n)"], stdout=subprocess.PIPE, text=True)
    try:
        client = sh(["ip", "netns", "exec", h1, sys.executable, "-c",
                     "import socket,time\nfor i in range(50):\n try:\n  c=socket.create_connection(('10.9.2.2',5201),timeout=2);break\n"
                     " except OSError: time.sleep(0.1)\nc.sendall(b'z'*1000000);c.close()"], check=False, timeout=20)
        assert client.returncode == 0, client.stderr
        out, _ = server.communicate(timeout=15)
        assert out.strip() == "1000000"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_attach_generic_mode_and_replace(dp, topo):
    _, sw, _ = topo
    assert attach_xdp(sw, P1, dp.prog_fd, mode="generic") == "generic"
    assert attached_xdp(sw, P1)[0] == "generic"
    detach_xdp(sw, P1)
    assert attached_xdp(sw, P1) == (None, 0)
    attach_xdp(sw, P1, dp.prog_fd)
    attach_xdp(sw, P1, dp.prog_fd)     # replacing is allowed
    detach_xdp(sw, P1)


def test_attach_unknown_ifindex_raises(dp, topo):
    _, sw, _ = topo
    with pytest.raises(DataplaneError):
        attach_xdp(sw, 59999, dp.prog_fd)


def test_pin_and_reopen(dp, pin_dir):
    dp.pin(pin_dir)
    names = set(os.listdir(pin_dir))
    assert {"xdp_switch", "ports", "routes", "port_stats"} <= names
    fd = progtest.obj_get(os.path.join(pin_dir, "xdp_switch"))
    os.close(fd)
    with pytest.raises(DataplaneError):
        dp.pin(pin_dir)            # refuses to overwrite


def test_pfc_classes_hold_release_and_a_new_speed_keeps_what_is_queued(module_netns):
    """The PFC shaper of a port (dataplane.kernel.realqueue): frames of the lossless class wait
    while it is held, a new port speed changes the classes without losing or releasing
    them (the pause still holds: lossless_held says so), and the release sends them at once."""
    import socket

    from dataplane.kernel.netns import in_netns
    from dataplane.kernel.realqueue import LOSSLESS_CLASS, NamespaceQueues

    ns = module_netns("pfcq")
    add_veths(ns, [301])
    sh(["ip", "-n", ns, "link", "set", "p301", "up"])
    sh(["ip", "-n", ns, "link", "set", "q301", "up"])
    with NamespaceQueues(ns) as queues:
        params = queues.shape(301, 1_000_000, 65536, classes=True)
        queues.hold(301, params, True)
        with in_netns(ns):
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            s.bind(("p301", 0))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, LOSSLESS_CLASS)
        frame = bytes.fromhex("ffffffffffff020000000001") + b"\x08\x00" + bytes(986)
        for _ in range(6):
            s.send(frame)
        s.close()

        def backlog() -> int:
            return queues.stats()[301]["backlog_packets"]

        assert backlog() >= 5                              # held: one frame may go as it starts
        held = backlog()
        params = queues.shape(301, 2_000_000, 65536, classes=True)   # a new speed (degrade)
        time.sleep(0.05)              # released, the 2 Mb/s class would send 12 frames by now
        assert backlog() == held, "a speed change dropped or released the held frames"
        assert queues.lossless_held(301, params)
        queues.hold(301, params, False)
        # 5 frames take 20 ms at 2 Mb/s. Without the release's kick they waited for the
        # held tbf's next wake-up, up to seconds later; a second is the bound of a lost wake-up.
        deadline = time.monotonic() + 1
        while backlog() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert backlog() == 0, "the release did not make the qdisc send"
        assert queues.stats()[301]["drops"] == 0        # the kick's own drop is not counted
        kick_leaf = sh(["tc", "-n", ns, "-s", "qdisc", "show", "dev", "p301", "parent", "1:40"]).stdout
        assert "dropped 1," in kick_leaf, kick_leaf      # the kick went there, not on the wire
