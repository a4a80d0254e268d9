"""ARP-to-host-route learning: leaves learn hosts from their gratuitous ARPs on host-facing
ports, and each learned host becomes /32 routes across its plane (the programmer's
install_host_route). A part of the fabric monitor."""
from __future__ import annotations

import ipaddress
import logging
import socket
import struct
import time

from dataplane.kernel.netns import in_netns
from dataplane.xdp.inject import Injector

log = logging.getLogger("railab.arn")


class Learning:
    def __init__(self, monitor):
        self.m = monitor
        self.learn_gen = 0                  # the data plane's learn generation last read
        self.learned: dict[tuple[str, str], dict] = {}    # (leaf, host ip) -> its learned entry
        self.next_learn = 0                 # monotonic ns of the next poll

    def enable(self) -> None:
        with self.m.lock:
            for node in self.m.spec.switches:
                for iface in node.interfaces:
                    peer = self.m.spec.find_node(iface.peer_node)
                    if peer is not None and peer.role == "host":
                        self.m.dp.set_port_learn(iface.ifindex, True)

    def expected_hosts(self) -> set[tuple[str, str]]:
        """(leaf, host address) of every host port: what learning finds once all announced."""
        out = set()
        for host in self.m.spec.hosts:
            for nic in self.m.spec.host_nics.get(host.name, []):
                for port in nic.ports:
                    if not self.m.spec.is_local(host.interface(port).peer_node):
                        continue        # another machine's leaf learns it
                    out.add((host.interface(port).peer_node, nic.address.split("/")[0]))
        return out

    def wait_learned(self, timeout_s: float, quiet_s: float = 1.0) -> int:
        """Wait until every host port is learned (its /32 routes installed), announcing
        again the hosts still missing whenever learning makes no progress for quiet_s.
        Returns how many are missing at the end (0: the fabric knows every host)."""
        if not self.m.cfg["learn"]:
            return 0
        expected = self.expected_hosts()
        deadline = time.monotonic() + timeout_s
        progress_at, seen = time.monotonic(), -1
        while True:
            with self.m.lock:
                missing = expected - set(self.learned)
            if not missing or time.monotonic() > deadline:
                return len(missing)
            if len(missing) != seen:
                progress_at, seen = time.monotonic(), len(missing)
            elif time.monotonic() - progress_at > quiet_s:
                hosts = {h.name for h in self.m.spec.hosts for nic in self.m.spec.host_nics.get(h.name, [])
                         for port in nic.ports
                         if (h.interface(port).peer_node, nic.address.split("/")[0]) in missing}
                # from packet sockets: what an XDP frame did not deliver, the stack's may
                announce_hosts(self.m.spec, sorted(hosts), xdp=False)
                progress_at = time.monotonic()
            time.sleep(0.02)

    def poll(self) -> None:
        gen = self.m.dp.learn_generation()
        if gen == self.learn_gen:
            return
        self.learn_gen = gen
        with self.m.lock:
            for h in self.m.dp.learned_hosts():
                node = self.m.spec.find_switch(h["switch_id"])
                owner = self.m.spec.find_port(h["ifindex"])
                if node is None or owner is None:
                    continue
                key = (node.name, h["ip"])
                if self.learned.get(key, {}).get("ifindex") == h["ifindex"]:
                    continue
                installed = self.m.p.install_host_route(node, owner[1], h["ip"])
                self.learned[key] = h     # only once its routes are in (wait_learned counts it)
                for sw in installed:
                    for (esw, p), t in list(self.m.excl.items()):   # keep exclusions in force
                        if esw == sw and t and ipaddress.IPv4Address(h["ip"]) in ipaddress.IPv4Network(p):
                            self.m.notices.apply_excl(self.m.spec.node(sw), p)
                self.m.counters[node.name]["hosts_learned"] += 1
                self.m.events.append({"event": "host_learned", "switch": node.name, "ip": h["ip"],
                                    "port": owner[1].name, "mac": h["mac"], "t_ns": time.monotonic_ns()})


def garp_frame(mac: str, ip: str) -> bytes:
    """Gratuitous ARP request (sender = target = ip), broadcast."""
    m = bytes.fromhex(mac.replace(":", ""))
    a = socket.inet_aton(ip)
    return (b"\xff" * 6 + m + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1)
            + m + a + b"\x00" * 6 + a)


def announce_hosts(spec, hosts: list[str] | None = None, *, xdp: bool = True) -> int:
    """Every host announces each NIC address out of every port of it (both planes) with a
    gratuitous ARP, as a dual-plane host does at start; leaves learn it (PORT_F_LEARN).

    xdp: sent as XDP frames (dataplane.xdp.inject: the leaf port keeps no page pool for
    it, 256 KiB per host port otherwise); a port where that fails, or xdp=False, sends
    from a packet socket as a host's kernel does."""
    injector = None
    if xdp:
        try:
            injector = Injector()
        except OSError as err:
            log.warning("GARP as XDP frames: %s; sending from packet sockets", err)
    sent = 0
    try:
        for node in spec.hosts:
            if (hosts is None or node.name in hosts) and spec.serves(node):
                sent += _announce(spec, node, injector)
    finally:
        if injector is not None:
            injector.close()
    return sent


def _announce(spec, node, injector: Injector | None) -> int:
    sent = 0
    frames = [(port, garp_frame(node.interface(port).mac, nic.address.split("/")[0]))
              for nic in spec.host_nics.get(node.name, []) for port in nic.ports]
    try:
        with in_netns(node.netns):
            left = []
            for port, frame in frames:
                try:
                    if injector is None:
                        raise OSError("no injector")
                    injector.inject(node.interface(port).ifindex, frame)
                    sent += 1
                except OSError:
                    left.append((port, frame))
            # one packet socket per host, sending out of each port by name
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW) if left else None
    except OSError as err:
        log.warning("GARP from %s: %s", node.name, err)
        return sent
    if s is None:
        return sent
    with s:
        for port, frame in left:
            try:
                s.sendto(frame, (port, 0))
                sent += 1
            except OSError as err:
                log.warning("GARP from %s:%s: %s", node.name, port, err)
    return sent
