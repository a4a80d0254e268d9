"""Routes and the switch's own addresses: the `routes` LPM table (group and avoid mask
per prefix), `port_addrs` (ARP answered per port) and `local_addrs` (IPv4 to the switch
itself). Every change bumps the switch's route_gen (SwitchDataplane._routes_changed), so
the data path's route cache never serves a stale answer.

Owns SwitchDataplane._routes, _wide_routes (and its index by prefix length, _wide_index),
_route_avoid and _local_refs."""
from __future__ import annotations

import ctypes as ct
import ipaddress

from dataplane.xdp import abi
from dataplane.xdp.bpfio import DataplaneError


def ip4(ip: str) -> ipaddress.IPv4Address:
    try:
        return ipaddress.IPv4Address(ip)
    except ValueError as e:
        raise ValueError(f"not an IPv4 address: {ip!r}") from e


class RouteTables:
    """Routes, avoid masks, the switches' own addresses.

    A part of SwitchDataplane (dataplane.xdp.switch): it uses the class's maps,
    shadow state and range checks."""

    def add_address(self, switch_id: int, ifindex: int, ip: str) -> None:
        """The switch owns ip on that port: answer ARP for it there, accept IPv4 to it locally."""
        self._check_switch(switch_id)
        addr = ip4(ip)
        port = self._ports.get(ifindex)
        if port is not None and port.switch_id != switch_id:
            raise DataplaneError(f"ifindex {ifindex} is a port of switch {port.switch_id}, not {switch_id}")
        be = abi.ip_be(addr)
        self.maps.update("port_addrs", abi.PortAddrKey(ifindex=ifindex, ip=be), ct.c_uint32(0))
        refs = self._local_refs.setdefault((switch_id, be), set())
        refs.add(ifindex)
        self.maps.update("local_addrs", abi.LocalAddrKey(switch_id=switch_id, ip=be), ct.c_uint32(len(refs)))
        self._routes_changed(switch_id)

    def del_address(self, switch_id: int, ifindex: int, ip: str) -> None:
        be = abi.ip_be(ip4(ip))
        self.maps.delete("port_addrs", abi.PortAddrKey(ifindex=ifindex, ip=be))
        refs = self._local_refs.get((switch_id, be), set())
        refs.discard(ifindex)
        key = abi.LocalAddrKey(switch_id=switch_id, ip=be)
        if refs:
            self.maps.update("local_addrs", key, ct.c_uint32(len(refs)))
        else:
            self._local_refs.pop((switch_id, be), None)
            self.maps.delete("local_addrs", key)
        self._routes_changed(switch_id)

    def add_route(self, switch_id: int, prefix: str, group_id: int) -> None:
        """Route prefix ('10.0.1.0/24'; host bits are masked) of switch_id to group_id."""
        self._check_switch(switch_id)
        self._check_group(group_id)
        net = ipaddress.IPv4Network(prefix, strict=False)
        key = self._route_key(switch_id, net)
        if (switch_id, net) in self._route_avoid:
            avoid = self._route_avoid[(switch_id, net)]
        else:
            # A new, more specific route (a learned /32) starts with what the covering
            # route of the same group avoids: written with it, so that no frame slips
            # through before the fabric monitor re-applies its exclusions.
            avoid = self._covering_avoid(switch_id, net, group_id)
            if avoid:
                self._route_avoid[(switch_id, net)] = avoid
        self.maps.update("routes", key, self._route_val(self._named(switch_id, net, group_id), group_id, avoid))
        self._routes[(switch_id, net)] = group_id
        if net.prefixlen < 32:
            self._wide_routes.setdefault(switch_id, {})[net] = group_id
            self._wide_index.setdefault(switch_id, {}).setdefault(net.prefixlen, {})[
                int(net.network_address)] = group_id
            self.wide_routes_version += 1
        self._routes_changed(switch_id)

    def _named(self, switch_id: int, net: ipaddress.IPv4Network, group_id: int) -> ipaddress.IPv4Network:
        """The prefix a notice the data plane makes for this route names: the least specific
        route of the same group that covers it (the one the fabric announced), else the
        route's own. A learned /32 on a spine forwards like the leaf's prefix; a notice
        naming the /32 would have the upstream avoid the spine for that one host, and each
        other host's traffic would lose a packet to find out the same."""
        best = net
        for other, gid in self._wide_routes.get(switch_id, {}).items():
            if gid == group_id and other.prefixlen < best.prefixlen and net.subnet_of(other):
                best = other
        return best

    def _covering_avoid(self, switch_id: int, net: ipaddress.IPv4Network, group_id: int) -> int:
        """The avoid mask of the most specific route of the same group that covers net
        (only routes with a mask can matter, and they are few)."""
        best, mask = None, 0
        for (sw, other), avoid in self._route_avoid.items():
            if sw == switch_id and other != net and self._routes.get((sw, other)) == group_id \
                    and net.subnet_of(other) and (best is None or other.prefixlen > best.prefixlen):
                best, mask = other, avoid
        return mask

    def set_route_avoid(self, switch_id: int, prefix: str, mask: int) -> None:
        """Members (bit i = member i of the route's group) to avoid for this prefix: remote
        failures (FGLB) and adaptive-routing notifications. Advisory in the data path: if
        avoiding them would leave no live member, they are used anyway."""
        net = ipaddress.IPv4Network(prefix, strict=False)
        gid = self._routes.get((switch_id, net))
        if gid is None:
            raise DataplaneError(f"switch {switch_id} has no route {net}")
        mask &= (1 << abi.DOWN_MASK_BITS) - 1
        self.maps.update("routes", self._route_key(switch_id, net),
                         self._route_val(self._named(switch_id, net, gid), gid, mask))
        if mask:
            self._route_avoid[(switch_id, net)] = mask
        else:
            self._route_avoid.pop((switch_id, net), None)
        self._routes_changed(switch_id)

    def route_avoid(self, switch_id: int | None = None) -> dict[tuple[int, str], int]:
        return {(sw, str(net)): m for (sw, net), m in self._route_avoid.items()
                if switch_id is None or sw == switch_id}

    def del_route(self, switch_id: int, prefix: str) -> bool:
        """Remove a route; returns False if there was none."""
        net = ipaddress.IPv4Network(prefix, strict=False)
        self._routes.pop((switch_id, net), None)
        if self._wide_routes.get(switch_id, {}).pop(net, None) is not None:
            self._wide_index[switch_id][net.prefixlen].pop(int(net.network_address), None)
            self.wide_routes_version += 1
        self._route_avoid.pop((switch_id, net), None)
        found = self.maps.delete("routes", self._route_key(switch_id, net))
        self._routes_changed(switch_id)
        return found

    def lookup_route(self, switch_id: int, ip: str) -> int | None:
        """Longest-prefix match as the data plane does it: group id or None."""
        key = abi.RouteKey(prefixlen=64, switch_id_be=abi.u32_be(switch_id), dst=abi.ip_be(ip4(ip)))
        val = abi.RouteVal()
        return val.group_id if self.maps.lookup("routes", key, val) else None

    def route_group(self, switch_id: int, prefix: str) -> int | None:
        """The group of exactly this route (no longest-prefix match), None if there is none."""
        return self._routes.get((switch_id, ipaddress.IPv4Network(prefix, strict=False)))

    def covering_group(self, switch_id: int, prefix: str) -> int | None:
        """The group every address of prefix takes by the switch's routes wider than a
        host's: that of the longest such route covering all of prefix. None when there is
        none, or when a narrower one (still wider than /32) lies inside prefix and splits
        it. A dict lookup per prefix length the switch uses (a few), not a scan of its
        routes: the agent asks this for every (switch, segment) of a 16,384-GPU lab."""
        net = ipaddress.IPv4Network(prefix, strict=False)
        addr, plen = int(net.network_address), net.prefixlen
        best_len, best = -1, None
        for length, nets in self._wide_index.get(switch_id, {}).items():
            if not nets:
                continue
            if length > plen:      # a narrower route: does one lie inside prefix?
                if any(other >> (32 - plen) == addr >> (32 - plen) for other in nets):
                    return None
            elif length > best_len:
                gid = nets.get(addr >> (32 - length) << (32 - length))
                if gid is not None:
                    best_len, best = length, gid
        return best

    def routes(self, switch_id: int) -> dict[str, int]:
        return {str(net): gid for (sw, net), gid in self._routes.items() if sw == switch_id}

    @staticmethod
    def _route_val(net: ipaddress.IPv4Network, group_id: int, avoid: int) -> abi.RouteVal:
        """The route's value; it repeats its prefix, which notices the data plane makes name."""
        return abi.RouteVal(group_id=group_id, avoid_mask=avoid, prefix=abi.ip_be(net.network_address),
                            plen=net.prefixlen)

    @staticmethod
    def _route_key(switch_id: int, net: ipaddress.IPv4Network) -> abi.RouteKey:
        return abi.RouteKey(prefixlen=32 + net.prefixlen, switch_id_be=abi.u32_be(switch_id),
                            dst=abi.ip_be(net.network_address))
