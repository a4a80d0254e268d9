"""Plain Linux forwarding, the baseline a user would build by hand: the lab's nodes as bare
network namespaces, its links as veth pairs, the topology's addresses, static routes and
`net.ipv4.ip_forward=1` on the switches -- and nothing else of railab's settings: no
sysctls beyond forwarding, no GRO, checksum or other offload changes, no qdiscs, no XDP,
no agent, no permanent neighbours (ARP resolves them), IPv6 left as the kernel has it.

Only the namespace names differ from the lab's (`rlplain-<tag>-<node>`, so a plain fabric
never collides with a deployed lab); interface names, ifindexes and MACs are the lab's,
so a FabricPath of the lab works on the plain fabric once its namespaces are renamed.
"""
from __future__ import annotations

import copy
import secrets
import subprocess
from contextlib import contextmanager
from ipaddress import IPv4Interface
from typing import Iterator

from dataplane.runtime.labspec import LabSpec, NodeSpec
from dataplane.runtime.netns import kernel_routes, list_netns

PREFIX = "rlplain-"


def plain_spec(spec: LabSpec, tag: str) -> LabSpec:
    """A copy of `spec` whose namespaces are `rlplain-<tag>-<node>`."""
    plain = copy.deepcopy(spec)
    plain.name = f"plain-{tag}"
    for node in plain.nodes:
        node.netns = f"{PREFIX}{tag}-{node.name}"
    return plain


def _batch(commands: list[str], netns: str | None = None) -> None:
    """iproute2 commands in one `ip -batch` child (in `netns` when given)."""
    argv = ["ip", *(["-n", netns] if netns else []), "-batch", "-"]
    proc = subprocess.run(argv, input="".join(f"{c}\n" for c in commands), capture_output=True,
                          text=True)
    if proc.returncode:
        raise RuntimeError(f"plain fabric: ip -batch{' in ' + netns if netns else ''}: "
                           f"{proc.stderr.strip()[-300:]}")


def _route_command(route: dict) -> str:
    """One of kernel_routes()'s routes (pyroute2 keywords) as an `ip route` command, with
    interface names resolved by the caller (oif -> name in route['dev'])."""
    def hop(h: dict) -> str:
        return (f"via {h['gateway']} " if "gateway" in h else "") + f"dev {h['dev']}"
    if "multipath" in route:
        return f"route add {route['dst']} " + " ".join(f"nexthop {hop(h)}" for h in route["multipath"])
    return f"route add {route['dst']} {hop(route)}"


def switch_commands(spec: LabSpec, node: NodeSpec) -> list[str]:
    """Addresses as the topology gives them, ports up, the controller's routes as static
    routes (several equal-cost next hops: a multipath route, hashed as Linux does by
    default)."""
    names = {i.ifindex: i.name for i in node.interfaces}
    commands = ["link set lo up"]
    for iface in node.interfaces:
        commands.append(f"link set {iface.name} up")
        if iface.address:
            commands.append(f"address add {iface.address} dev {iface.name}")
    for route in kernel_routes(spec, node):
        for h in route.get("multipath", [route]):
            h["dev"] = names[h["oif"]]
        commands.append(_route_command(route))
    return commands


def host_commands(spec: LabSpec, node: NodeSpec) -> list[str]:
    """Every port up with its address; a default route via the first addressed port's
    gateway (the switch end of its link)."""
    nodes = {n.name: n for n in spec.nodes}
    commands = ["link set lo up"]
    gateway = None
    for iface in node.interfaces:
        commands.append(f"link set {iface.name} up")
        if iface.address:
            commands.append(f"address add {iface.address} dev {iface.name}")
            far = nodes[iface.peer_node].interface(iface.peer_if)
            if gateway is None and far.address:
                gateway = (str(IPv4Interface(far.address).ip), iface.name)
    if gateway:
        commands.append(f"route add default via {gateway[0]} dev {gateway[1]} onlink")
    return commands


def create(spec: LabSpec) -> None:
    """Namespaces, veth pairs (the lab's names, ifindexes and MACs), addresses, routes,
    forwarding on in the switches. `spec` must already carry the plain namespace names."""
    _batch([f"netns add {node.netns}" for node in spec.nodes])
    ns = {n.name: n.netns for n in spec.nodes}
    _batch([f"link add {iface.name} index {iface.ifindex} address {iface.mac} netns {ns[node.name]} "
            f"type veth peer name {peer.name} index {peer.ifindex} address {peer.mac} "
            f"netns {ns[peer_node.name]}"
            for node, iface, peer_node, peer in spec.links()])
    for node in spec.nodes:
        if node.role == "host":
            _batch(host_commands(spec, node), node.netns)
        else:
            subprocess.run(["ip", "netns", "exec", node.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
                           check=True, capture_output=True)
            _batch(switch_commands(spec, node), node.netns)


def leftovers(tag: str) -> list[str]:
    """Namespaces of the plain fabric `tag` still present."""
    return [name for name in list_netns() if name.startswith(f"{PREFIX}{tag}-")]


def remove(tag: str) -> None:
    """Delete the plain fabric's namespaces (their veths go with them)."""
    doomed = leftovers(tag)
    if doomed:
        subprocess.run(["ip", "-force", "-batch", "-"], input="".join(f"netns delete {n}\n" for n in doomed),
                       capture_output=True, text=True)


@contextmanager
def plain_fabric(spec: LabSpec, tag: str | None = None) -> Iterator[LabSpec]:
    """The plain-Linux copy of `spec`, built on entry and removed on exit (whatever happens)."""
    tag = tag or secrets.token_hex(3)
    plain = plain_spec(spec, tag)
    try:
        create(plain)
        yield plain
    finally:
        remove(tag)
