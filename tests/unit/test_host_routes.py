"""A host's kernel routes (netns.node_requests): per NIC a table, and in the main table each
segment through the NIC on it, the relayed rest as one route for the access pool."""
from __future__ import annotations

from ipaddress import IPv4Network

from dataplane.runtime import labspec, netns
from dataplane.topology.addressing import ACCESS_POOL
from dataplane.topology.generate import generate


def _main_routes(spec, host: str) -> list[str]:
    """The destinations of the host's main-table routes, read from the requests' labels."""
    labels = [r.label for r in netns.node_requests(spec, spec.node(host)) if ": route " in r.label]
    return [label.split(": route ", 1)[1].split()[0] for label in labels
            if f" table {netns.MAIN_TABLE} " in label]


def test_relayed_segments_share_one_route_for_the_access_pool():
    spec = labspec.build(generate("dual-plane", name="hr", servers=4, rails=2, spines=2, leaf_ports=4))
    host = spec.hosts[0]
    own = sorted(str(IPv4Network(nic.address, strict=False)) for nic in spec.host_nics[host.name])
    routes = _main_routes(spec, host.name)
    # the host's own segments one by one, every other segment in the pool's route
    assert sorted(routes[:-1]) == own and routes[-1] == str(ACCESS_POOL)
    assert len(spec.segments) > len(own)
    assert all(IPv4Network(s).subnet_of(ACCESS_POOL) for s in spec.segments)


def test_segments_outside_the_pool_keep_their_own_routes():
    spec = labspec.build(generate("dual-plane", name="hr", servers=4, rails=2, spines=2, leaf_ports=4))
    host = spec.hosts[0]
    outside = "192.168.7.0/24"
    spec.segments.append(outside)
    for nic in spec.host_nics[host.name]:
        nic.relay[outside] = 0
    routes = _main_routes(spec, host.name)
    assert outside in routes and routes[-1] == str(ACCESS_POOL)
