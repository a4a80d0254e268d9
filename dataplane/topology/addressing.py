"""The IPv4 addressing plan of a lab, derived from the topology alone (pure).

Rules, chosen so that a rail-optimized lab reads like a real GPU cluster:
- Every leaf's host-facing ports form one *access segment*: a subnet whose first address
  is the leaf's gateway and whose other addresses are the host NICs on it. In a
  rail-optimized fabric that makes each rail its own subnet with its leaf as gateway.
- In dual-plane fabrics the two leaves serving the same NICs (one per plane) share the
  segment and the gateway address: both ports of a NIC carry one host identity.
- Switch-to-switch links are point-to-point /31s.
- Addresses given in the file (containerlab's link `ipv4: [a, b]`) win; the plan then
  only fills in the endpoints the file left empty.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from ipaddress import IPv4Interface, IPv4Network

from dataplane.errors import TopologyError
from dataplane.topology.model import Endpoint, Link, Role, Topology

ACCESS_POOL = IPv4Network("10.0.0.0/9")
FABRIC_POOL = IPv4Network("10.128.0.0/9")


@dataclass
class Segment:
    """One access subnet: its gateway, the leaves that serve it, the NIC addresses on it."""

    network: IPv4Network
    gateway: IPv4Interface
    leaves: list[str] = field(default_factory=list)


@dataclass
class AddressPlan:
    by_endpoint: dict[Endpoint, IPv4Interface] = field(default_factory=dict)
    segments: list[Segment] = field(default_factory=list)
    segment_of_leaf: dict[str, Segment] = field(default_factory=dict)
    given_networks: list[IPv4Network] = field(default_factory=list)

    def address(self, endpoint: Endpoint) -> IPv4Interface | None:
        return self.by_endpoint.get(endpoint)


def _nic_identity(link: Link, host: Endpoint) -> tuple:
    """Ports of one dual-plane NIC share an address; every other host port has its own."""
    if link.plane is not None and link.rail is not None:
        return (host.node, "rail", link.rail)
    return (host.node, "if", host.interface)


def _segment_key(topo: Topology, leaf: str) -> tuple:
    node = topo.nodes[leaf]
    if node.plane is None:
        return ("leaf", leaf)
    nics = []
    for link in topo.links_of(leaf):
        far = link.other(leaf)
        if topo.nodes[far.node].role is Role.HOST:
            nics.append(_nic_identity(link, far))
    return ("shared", frozenset(nics)) if nics else ("leaf", leaf)


def _host_links(topo: Topology, leaf: str) -> list[tuple[Link, Endpoint]]:
    found = []
    for link in topo.links_of(leaf):
        far = link.other(leaf)
        if topo.nodes[far.node].role is Role.HOST:
            found.append((link, far))
    return found


def _blocks(pool: IPv4Network, prefixlen: int, label: str):
    try:
        yield from pool.subnets(new_prefix=prefixlen)
    except ValueError:
        pass
    raise TopologyError(f"addressing: {label} pool {pool} is exhausted")


def plan_addresses(topo: Topology) -> AddressPlan:
    plan = AddressPlan()
    _assign_given(topo, plan)
    _assign_access(topo, plan)
    _assign_fabric(topo, plan)
    _check_unique(topo, plan)
    return plan


def _check_unique(topo: Topology, plan: AddressPlan) -> None:
    """A host's address is its own: no other node may have it (the ports of a dual-plane
    NIC share their host's address, and the leaves of one segment share the gateway)."""
    owner: dict = {}
    for endpoint, iface in sorted(plan.by_endpoint.items(), key=lambda kv: str(kv[0])):
        first = owner.setdefault(iface.ip, endpoint)
        hosts = {n for n in (first.node, endpoint.node) if topo.nodes[n].role is Role.HOST}
        if first.node != endpoint.node and hosts:
            raise TopologyError(f"address {iface.ip} is on both {first} and {endpoint}")


def _assign_given(topo: Topology, plan: AddressPlan) -> None:
    for link in topo.links:
        if not link.ipv4:
            continue
        for endpoint, text in zip(link.endpoints(), link.ipv4):
            if text:
                try:
                    plan.by_endpoint[endpoint] = IPv4Interface(text)
                    plan.given_networks.append(plan.by_endpoint[endpoint].network)
                except ValueError:
                    raise TopologyError(f"link {link.a} - {link.b}: bad ipv4 address {text!r}")


def _assign_access(topo: Topology, plan: AddressPlan) -> None:
    groups: dict[tuple, list[str]] = {}
    leaves = sorted(
        (n for n in topo.switches if _host_links(topo, n.name)),
        key=lambda n: (n.rail if n.rail is not None else -1, n.index or 0, n.plane or 0, n.name),
    )
    for leaf in leaves:
        groups.setdefault(_segment_key(topo, leaf.name), []).append(leaf.name)

    per_size: dict[int, object] = {}
    # every address handed out so far, kept up to date below: a set per segment made from
    # all endpoints each time cost segments x endpoints (26 s at 16,384 GPUs)
    used = {a.ip for a in plan.by_endpoint.values()}
    for members in groups.values():
        nic_ids: list[tuple] = []
        for leaf in members:
            for link, far in _host_links(topo, leaf):
                ident = _nic_identity(link, far)
                if ident not in nic_ids:
                    nic_ids.append(ident)
        given = _given_segment(plan, topo, members)
        if given is not None:
            segment = given
        else:
            # network + broadcast + gateway + one address per NIC, rounded to a block.
            # /24 when it fits, for readable labs; larger blocks for big segments.
            size = min(24, 32 - math.ceil(math.log2(len(nic_ids) + 3)))
            blocks = per_size.setdefault(size, _blocks(ACCESS_POOL, size, "access"))
            network = _next_free(blocks, plan)
            segment = Segment(network, IPv4Interface(f"{network[1]}/{network.prefixlen}"))
        segment.leaves = list(members)
        plan.segments.append(segment)
        host_index = 2
        ident_addr: dict[tuple, IPv4Interface] = {}
        for leaf in members:
            plan.segment_of_leaf[leaf] = segment
            for link, far in _host_links(topo, leaf):
                near = link.local(leaf)
                plan.by_endpoint.setdefault(near, segment.gateway)
                used.add(plan.by_endpoint[near].ip)
                ident = _nic_identity(link, far)
                if far in plan.by_endpoint:
                    ident_addr.setdefault(ident, plan.by_endpoint[far])
                    continue
                if ident not in ident_addr:
                    while segment.network[host_index] in used:
                        host_index += 1
                    if host_index >= segment.network.num_addresses - 1:
                        raise TopologyError(f"addressing: segment {segment.network} of {leaf} is full")
                    ident_addr[ident] = IPv4Interface(
                        f"{segment.network[host_index]}/{segment.network.prefixlen}"
                    )
                    used.add(ident_addr[ident].ip)
                    host_index += 1
                plan.by_endpoint[far] = ident_addr[ident]


def _given_segment(plan: AddressPlan, topo: Topology, leaves: list[str]) -> Segment | None:
    for leaf in leaves:
        for link, _far in _host_links(topo, leaf):
            given = plan.by_endpoint.get(link.local(leaf))
            if given is not None:
                return Segment(given.network, given)
    return None


def _next_free(blocks, plan: AddressPlan) -> IPv4Network:
    # Blocks come out of each pool in order and are never handed out twice, so only the
    # networks the file itself gave can be in the way.
    taken = plan.given_networks
    for block in blocks:
        if not any(block.overlaps(t) for t in taken):
            return block
    raise TopologyError("addressing: no free block")


def _assign_fabric(topo: Topology, plan: AddressPlan) -> None:
    blocks = _blocks(FABRIC_POOL, 31, "fabric")
    for link in topo.links:
        roles = (topo.nodes[link.a.node].role, topo.nodes[link.b.node].role)
        if Role.HOST in roles:
            continue
        if link.a in plan.by_endpoint and link.b in plan.by_endpoint:
            continue
        net = _next_free(blocks, plan)
        plan.by_endpoint.setdefault(link.a, IPv4Interface(f"{net[0]}/31"))
        plan.by_endpoint.setdefault(link.b, IPv4Interface(f"{net[1]}/31"))

