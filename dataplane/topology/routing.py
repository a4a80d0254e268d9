"""The controller: computes every switch's routes and next-hop groups, and every host's
routing, from the topology and its address plan. Pure: no I/O, like an SDN controller
that knows the whole graph, so no routing protocol is needed.

Switch routing: a leaf owns a /32 per attached host NIC (next hop: that port, the host's
MAC); every other switch routes each access segment over all its shortest-path
neighbours (equal-cost group, parallel links included).

Host routing: each NIC has its own table, selected by source address, so traffic
sourced from a GPU's NIC leaves by that NIC. Segments that NIC's fabric cannot reach
(rail-only: other rails) are routed out of a NIC of the same host that can: the PXN
relay of BRIEF.md section 1.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from ipaddress import IPv4Interface, IPv4Network

from dataplane.topology.addressing import AddressPlan, Segment
from dataplane.topology.model import Endpoint, Role, Topology

HOST_TABLE_BASE = 100


@dataclass(frozen=True)
class NextHop:
    interface: str          # egress interface on this switch
    neighbor: Endpoint      # far end of the link


@dataclass
class SwitchRoute:
    prefix: IPv4Network
    nexthops: tuple[NextHop, ...]


@dataclass
class HostNic:
    """One GPU NIC: an address and one port (two in dual-plane fabrics)."""

    address: IPv4Interface
    ports: list[str]
    gateway: IPv4Interface
    table: int
    # destination segment -> NIC (index into HostRouting.nics) that carries it
    relay: dict[IPv4Network, int] = field(default_factory=dict)


@dataclass
class HostRouting:
    host: str
    nics: list[HostNic]


@dataclass
class ControlPlan:
    switch_routes: dict[str, list[SwitchRoute]]
    host_routing: dict[str, HostRouting]
    # switch -> [(interface, address it owns)], for ARP answers
    switch_addresses: dict[str, list[tuple[str, IPv4Interface]]]


def _switch_graph(topo: Topology) -> dict[str, list[tuple[str, str, Endpoint]]]:
    """switch -> [(neighbour switch, local interface, far endpoint)], one entry per link."""
    graph: dict[str, list[tuple[str, str, Endpoint]]] = {s.name: [] for s in topo.switches}
    for link in topo.links:
        a, b = link.a, link.b
        if topo.nodes[a.node].role.is_switch and topo.nodes[b.node].role.is_switch:
            graph[a.node].append((b.node, a.interface, b))
            graph[b.node].append((a.node, b.interface, a))
    return graph


def _distances(graph, sources: list[str]) -> dict[str, int]:
    dist = {s: 0 for s in sources}
    queue = deque(sources)
    while queue:
        node = queue.popleft()
        for nbr, *_ in graph[node]:
            if nbr not in dist:
                dist[nbr] = dist[node] + 1
                queue.append(nbr)
    return dist


def nexthops_towards(graph: dict[str, list[tuple]], sources: list[str]) -> dict[str, list[tuple]]:
    """The one next-hop rule (the controller's routes, the agent's learned host routes):
    for every switch that reaches one of `sources` over `graph` (switch -> [(neighbour,
    local interface, ...)], one entry per link), the entries that lead one hop closer
    over a shortest path, sorted by local interface -- parallel links included, [] for
    the sources themselves. In breadth-first order from the sources."""
    dist = _distances(graph, sources)
    return {switch: sorted((e for e in graph[switch] if dist.get(e[0]) == d - 1), key=lambda e: e[1])
            for switch, d in dist.items()}


def compute(topo: Topology, plan: AddressPlan) -> ControlPlan:
    graph = _switch_graph(topo)
    routes: dict[str, list[SwitchRoute]] = {s.name: [] for s in topo.switches}
    reach: dict[IPv4Network, set[str]] = {}

    # one tuple per (switch, next-hop interfaces), shared by every route over them: a leaf
    # sends every other segment up the same uplinks (2 M next hops at 16,384 GPUs otherwise)
    shared: dict[tuple, tuple[NextHop, ...]] = {}
    for segment in plan.segments:
        towards = nexthops_towards(graph, segment.leaves)
        reach[segment.network] = set(towards)
        for switch, edges in towards.items():
            if switch in segment.leaves:
                continue
            key = (switch, *[e[1] for e in edges])
            hops = shared.get(key)
            if hops is None:
                hops = shared[key] = tuple(NextHop(local_if, far) for _, local_if, far in edges)
            routes[switch].append(SwitchRoute(segment.network, hops))

    addresses: dict[str, list[tuple[str, IPv4Interface]]] = {s.name: [] for s in topo.switches}
    for endpoint, link in topo.iter_endpoints():
        node = topo.nodes[endpoint.node]
        if not node.role.is_switch:
            continue
        own = plan.address(endpoint)
        if own is not None:
            addresses[node.name].append((endpoint.interface, own))
        far = link.other(endpoint.node)
        if topo.nodes[far.node].role is Role.HOST:
            host_ip = plan.address(far)
            if host_ip is not None:
                routes[node.name].append(
                    SwitchRoute(IPv4Network(f"{host_ip.ip}/32"), (NextHop(endpoint.interface, far),))
                )

    # the segments each leaf reaches, once for all hosts (a host asked of every segment
    # whether one of its leaves reaches it: 2 M set intersections at 16,384 GPUs)
    reached_from: dict[str, set[IPv4Network]] = {}
    for network, switches in reach.items():
        for switch in switches:
            reached_from.setdefault(switch, set()).add(network)
    hosts = {h.name: _host_routing(topo, plan, h.name, reach, reached_from) for h in topo.hosts}
    for switch_routes in routes.values():
        switch_routes.sort(key=lambda r: (r.prefix.prefixlen, r.prefix))
    return ControlPlan(routes, hosts, addresses)


def _host_routing(topo, plan: AddressPlan, host: str, reach, reached_from) -> HostRouting:
    nics: list[HostNic] = []
    by_address: dict[IPv4Interface, HostNic] = {}
    leaves_of: dict[int, set[str]] = {}
    for link in sorted(topo.links_of(host), key=lambda l: l.local(host).interface):
        port = link.local(host)
        address = plan.address(port)
        if address is None:
            continue
        leaf = link.other(host).node
        segment: Segment | None = plan.segment_of_leaf.get(leaf)
        gateway = segment.gateway if segment else plan.address(link.other(host))
        nic = by_address.get(address)
        if nic is None:
            nic = HostNic(address, [], gateway, HOST_TABLE_BASE + len(nics))
            by_address[address] = nic
            nics.append(nic)
        nic.ports.append(port.interface)
        leaves_of.setdefault(nics.index(nic), set()).add(leaf)

    # the segments each NIC reaches through one of its leaves
    reached = [set().union(*(reached_from.get(leaf, ()) for leaf in leaves_of[i])) for i in range(len(nics))]
    for i, nic in enumerate(nics):
        for network in reach:
            if network in reached[i]:
                nic.relay[network] = i
                continue
            for j in range(len(nics)):
                if network in reached[j]:
                    nic.relay[network] = j
                    break
    return HostRouting(host, nics)
