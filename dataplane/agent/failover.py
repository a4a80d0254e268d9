"""Local fast failover (dataplane.agent.monitor's docstring): netlink link events of every
switch namespace -> the port's state in the data plane, and the withdraw / restore
notices a switch sends when it loses (or regains) every member for a prefix. A part of
the fabric monitor."""
from __future__ import annotations

import ipaddress
import struct
import time

from dataplane.agent.notices import R_CLEARED, R_LINK_DOWN, T_RESTORE, T_WITHDRAW
from dataplane.kernel.netns import in_netns

RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK = 16, 17
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000


def _parse_links(data: bytes):
    """(ifindex, flags) of every RTM_NEWLINK / RTM_DELLINK in a netlink datagram."""
    off = 0
    while off + 16 <= len(data):
        length, mtype = struct.unpack_from("=IH", data, off)
        if length < 16:
            break
        if mtype in (RTM_NEWLINK, RTM_DELLINK) and off + 32 <= len(data):
            _fam, _pad, _type, index, flags, _change = struct.unpack_from("=BBHiII", data, off + 16)
            yield index, (0 if mtype == RTM_DELLINK else flags)
        off += (length + 3) & ~3


def _link_states(netns: str, ifindexes: list[int]) -> dict[int, bool]:
    """{ifindex: IFF_UP and IFF_LOWER_UP} read over netlink in netns."""
    # deferred on purpose: pyroute2 takes 0.5 s to import (several on a busy machine),
    # time the agent's start would otherwise add to every deploy
    from pyroute2 import IPRoute

    with in_netns(netns):
        ipr = IPRoute()
    try:
        out = {}
        for ifx in ifindexes:
            flags = ipr.link("get", index=ifx)[0]["flags"]
            out[ifx] = bool(flags & IFF_UP) and bool(flags & IFF_LOWER_UP)
        return out
    finally:
        ipr.close()


# How long after a repair netlink messages about its ports are checked against the kernel.
RELEASE_SETTLE_NS = 1_000_000_000


class Failover:
    def __init__(self, monitor):
        self.m = monitor

    def on_netlink(self, node, sock) -> None:
        while True:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                return
            t_rx = time.monotonic_ns()
            for ifindex, flags in _parse_links(data):
                owner = self.m.spec.find_port(ifindex)
                if owner is None or owner[0].name != node.name:
                    continue
                up = bool(flags & IFF_UP) and bool(flags & IFF_LOWER_UP)
                if t_rx - self.m.released_ns.get(ifindex, -RELEASE_SETTLE_NS) < RELEASE_SETTLE_NS:
                    up = _link_states(node.netns, [ifindex]).get(ifindex, up)
                self.port_event(node, owner[1], up, t_rx)

    def hold(self, ifindexes: list[int]) -> None:
        """Repair in progress: ignore these ports' netlink events until release()."""
        with self.m.lock:
            self.m.held.update(ifindexes)

    def release(self, ifindexes: list[int]) -> dict:
        """Apply the kernel's current state of these ports, in the order given (a switch
        coming back: its own ports first, then its neighbours' ends), under one lock: the
        neighbours start sending to it only once it can forward everything."""
        states = {}
        with self.m.lock:
            for ifx in ifindexes:
                self.m.held.discard(ifx)
            by_ns: dict[str, list[int]] = {}
            for ifx in ifindexes:
                by_ns.setdefault(self.m.spec.port(ifx)[0].netns, []).append(ifx)
            read_ns = time.monotonic_ns()
            for netns, idx in by_ns.items():
                states.update(_link_states(netns, idx))
            for ifx in ifindexes:
                self.m.released_ns[ifx] = read_ns
            # every port first, the notices after: a RESTORE sent as soon as one end of a
            # repaired link is up brought the upstream's traffic back before the other end
            # accepted it (with the data plane consuming the RESTORE within microseconds,
            # a packet per flow was dropped there as port_down)
            changed = self._apply([(*self.m.spec.port(ifx), states.get(ifx, False)) for ifx in ifindexes])
            self._notify(changed, time.monotonic_ns())
        return {"up": sum(states.values()), "ports": len(ifindexes), "t_ns": time.monotonic_ns()}

    def port_event(self, node, iface, up: bool, t_rx: int | None = None) -> None:
        """A port's new state, into the data plane, and the switch's notices upstream."""
        with self.m.lock:
            if self._apply([(node, iface, up)], t_rx):
                self._notify([node], time.monotonic_ns())

    def _apply(self, changes, t_rx: int | None = None) -> list:
        """(node, iface, up) of ports not held, into the data plane as one change (every end
        coming up accepts traffic before anyone sends into it: set_port_states). Returns the
        switches whose ports changed, in order."""
        moving = [(node, iface, up) for node, iface, up in changes
                  if iface.ifindex not in self.m.held and self.m.dp.port_is_up(iface.ifindex) != up]
        if not moving:
            return []
        groups = self.m.dp.set_port_states([(iface.ifindex, up) for _, iface, up in moving])
        t_map = time.monotonic_ns()
        nodes = []
        for node, iface, up in moving:
            self.m.events.append({"event": "port_up" if up else "port_down", "switch": node.name,
                                  "port": iface.name, "ifindex": iface.ifindex, "t_rx_ns": t_rx or t_map,
                                  "t_map_ns": t_map, "groups": groups.get(iface.ifindex, [])})
            if node not in nodes:
                nodes.append(node)
        return nodes

    def _notify(self, nodes, now: int) -> None:
        """Every group of each switch, not only the changed ports': after a reset the switch
        re-announces prefixes it still cannot reach. With arn_path dataplane the switch's
        program sends the WITHDRAW, the agent the RESTORE."""
        if self.m.cfg["notify"]:
            for node in nodes:
                self.notify_reachability(node, None, now, withdraw=self.m.cfg["arn_path"] == "agent")

    def notify_reachability(self, node, gids, now, withdraw: bool = True) -> None:
        """S lost (or regained) every member for a prefix: withdraw (restore) it upstream
        (withdraw False: only restore, the data plane withdraws)."""
        for gid, prefix in self.m.p.routing.group_prefixes(node.name, gids):
            dead = self.m.dp.group_down_mask(gid)
            n = len(self.m.p.routing.members_of(gid))
            all_dead = dead == (1 << min(n, 64)) - 1
            key = (node.name, prefix)
            if all_dead and key not in self.m.withdrawn:
                self.m.withdrawn.add(key)
                if withdraw:
                    self.m.notices.send_upstream(node, prefix, T_WITHDRAW, R_LINK_DOWN, gid)
            elif not all_dead and key in self.m.withdrawn:
                self.m.withdrawn.discard(key)
                if withdraw:
                    self.m.notices.send_upstream(node, prefix, T_RESTORE, R_CLEARED, gid)
                else:
                    self._restore_dataplane(node, gid, prefix)

    def _restore_dataplane(self, node, gid: int, prefix: str) -> None:
        """RESTORE what the switch's program may have withdrawn for prefix. Its WITHDRAW
        names the route its packet matched -- the prefix or a more specific (learned /32)
        route of the same group inside it -- and leaves by the port that packet came in on,
        and the upstream lifts an exclusion only for that prefix and that port's members.
        So the RESTORE goes for each of those routes over every link to each upstream
        (measured before: /32 exclusions at leaf1-r0 that no RESTORE lifted, and only
        one of four parallel links restored)."""
        net = ipaddress.IPv4Network(prefix)
        covered = [p for p, g in self.m.dp.routes(node.switch_id).items()
                   if g == gid and p != prefix and ipaddress.IPv4Network(p).subnet_of(net)]
        for named in (prefix, *covered):
            self.m.notices.send_upstream(node, named, T_RESTORE, R_CLEARED, gid,
                                         every_link=True, upstream_of=prefix)
