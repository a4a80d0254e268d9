"""The netns runtime: turns a LabSpec into namespaces, veth pairs, addresses and routes,
and removes them again. Start and stop run in a fixed order; teardown never needs the
in-memory model, only the lab's name.
"""
from __future__ import annotations

import functools
import os
import subprocess
from contextlib import ExitStack
from ipaddress import IPv4Interface, IPv4Network

from dataplane.kernel import ethtool, rtnl
from dataplane.kernel.netns import in_netns, room_for_files
from dataplane.runtime.labspec import LabSpec, NodeSpec
from dataplane.topology.addressing import ACCESS_POOL

NAME = "netns"
NETNS_DIR = "/run/netns"
RULE_PRIORITY_BASE = 100
MAIN_TABLE = 254
RT_SCOPE_LINK = 253
NUD_PERMANENT = 0x80


def list_netns() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def ip_batch(commands: list[str], *, keep_going: bool = False, netns: str | None = None) -> tuple[int, str]:
    """Run iproute2 commands in one `ip -batch` child (in namespace `netns` if given). It
    is a child we hold, so an interrupted caller waits for it to end before cleaning up (pyroute2's netns helpers
    fork a process we cannot wait for, which could create a namespace after the cleanup
    looked)."""
    argv = ["ip", *(["-n", netns] if netns else []), *(["-force"] if keep_going else []), "-batch", "-"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    err = ""
    try:
        _, err = proc.communicate("".join(f"{c}\n" for c in commands))
    finally:
        if proc.returncode is None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            proc.wait()
    return proc.returncode, err


# ------------------------------------------------------------------ the runtime interface
# (the same four calls as dataplane.runtime.containerlab; lifecycle picks one by spec.runtime)
def check(spec: LabSpec) -> None:
    """Nothing to check beyond root, which lifecycle requires of every runtime."""


def create(spec: LabSpec) -> None:
    create_namespaces(spec)
    # Before the links: new interfaces inherit the namespace's defaults (IPv6 off, so no
    # addrconf traffic reaches the switches when the links come up).
    for node in spec.nodes:
        set_sysctls(node.netns, _namespace_sysctls(node, spec.dataplane))
    create_links(spec)


def remove(lab: str, spec: LabSpec | None) -> None:
    """The namespaces go in lifecycle.destroy (the same for every runtime); nothing else here."""


def leftovers(lab: str) -> bool:
    return False


# ------------------------------------------------------------------ pieces
def create_namespaces(spec: LabSpec) -> None:
    code, err = ip_batch([f"netns add {node.netns}" for node in spec.nodes])
    if code:
        raise RuntimeError(f"creating namespaces failed: {err.strip()}")


def create_links(spec: LabSpec) -> None:
    """Every veth pair in batches: both ends named, numbered (the shared XDP program needs
    lab-unique ifindexes) and placed in their namespaces by one request each, and each
    batch's ends brought up right after it, from a socket in each end's namespace.

    Why at once: the kernel's link watcher takes each new end's "no carrier" event later,
    and an end that is up by then while its peer is still down costs a deactivation that
    waits for an expedited RCU grace period under the rtnl lock. Brought up node by node
    (every host, then every switch), most ends of a 16,384-GPU lab were in that state and
    the addresses step waited minutes on the lock."""
    links = list(spec.links())
    room_for_files(2 * len(spec.nodes))   # a namespace fd and a socket per node
    with ExitStack() as stack:
        fds, socks = {}, {}
        for node in spec.nodes:
            fd = os.open(os.path.join(NETNS_DIR, node.netns), os.O_RDONLY | os.O_CLOEXEC)
            stack.callback(os.close, fd)
            fds[node.name] = fd
        sock = stack.enter_context(rtnl.Socket())
        for start in range(0, len(links), rtnl.BATCH):
            batch = links[start:start + rtnl.BATCH]
            sock.run(rtnl.veth(iface.name, iface.ifindex, iface.mac, fds[node.name],
                               peer.name, peer.ifindex, peer.mac, fds[peer_node.name],
                               label=f"link {node.name}:{iface.name} - {peer_node.name}:{peer.name}")
                     for node, iface, peer_node, peer in batch)
            ups: dict[str, list] = {}
            for node, iface, peer_node, peer in batch:
                ups.setdefault(node.name, []).append(rtnl.link_up(iface.ifindex, f"{node.name}:{iface.name} up"))
                ups.setdefault(peer_node.name, []).append(rtnl.link_up(peer.ifindex, f"{peer_node.name}:{peer.name} up"))
            for name, requests in ups.items():
                if name not in socks:
                    socks[name] = stack.enter_context(rtnl.Socket(spec.node(name).netns))
                socks[name].run(requests)


def _namespace_sysctls(node: NodeSpec, dataplane: str = "xdp") -> dict[str, str]:
    """The namespace-wide settings of a railab node (none for a user's own container)."""
    if node.external:
        return {}
    kernel_switch = node.role != "host" and dataplane == "kernel"
    values = {
        "net/ipv6/conf/all/disable_ipv6": "1", "net/ipv6/conf/default/disable_ipv6": "1",
        # XDP switches forward only in XDP: the kernel must not forward behind their back.
        # Kernel switches forward with Linux, hashing multipath routes on the L4 5-tuple
        # (the lab is IPv4-only: IPv6 is off everywhere).
        "net/ipv4/ip_forward": "1" if kernel_switch else "0",
        "net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0",
    }
    if node.role != "host" and not kernel_switch:
        # the link watch (bpf/switch.c rl_link_up) asks the FIB about a fabric port's
        # connected route: entered on lo, which must forward for the lookup to answer
        # (nothing arrives on lo from outside, so the kernel still forwards nothing), and
        # a port without carrier must fail it as a downed one does
        values.update({"net/ipv4/conf/lo/forwarding": "1",
                       "net/ipv4/conf/all/ignore_routes_with_linkdown": "1",
                       "net/ipv4/conf/default/ignore_routes_with_linkdown": "1"})
    if kernel_switch:
        values.update({"net/ipv4/fib_multipath_hash_policy": "1",
                       "net/ipv4/conf/all/send_redirects": "0",
                       "net/ipv4/conf/default/send_redirects": "0"})
    if node.role == "host":
        values["net/ipv4/fib_multipath_hash_policy"] = "1"
        # a port that lost carrier leaves the host's multipath routes at once (dual-plane
        # hosts move their flows to the other plane; back when the carrier returns)
        values["net/ipv4/conf/all/ignore_routes_with_linkdown"] = "1"
        values["net/ipv4/conf/default/ignore_routes_with_linkdown"] = "1"
    return values


def set_sysctls(netns: str, values: dict[str, str]) -> None:
    """Write /proc/sys entries of a namespace from this thread (setns: /proc/sys/net shows
    the namespace of the thread that opens it), instead of a sysctl process per entry."""
    if not values:
        return
    with in_netns(netns):
        for key, value in values.items():
            try:
                with open(f"/proc/sys/{key}", "w") as f:
                    f.write(value)
            except OSError as err:
                raise RuntimeError(f"{netns}: sysctl {key.replace('/', '.')}={value}: "
                                   f"{err.strerror}") from None


def make_room_in_arp_table(spec: LabSpec) -> None:
    """The kernel's ARP table is one table for every namespace, capped machine-wide by
    net.ipv4.neigh.default.gc_thresh3 (1,024 by default): every host port resolves its
    gateway, so a 1,024-GPU lab (2,048 host ports) overflows it and a third of its hosts
    cannot send ("neighbor table overflow" in the kernel log). Raise the caps (never
    lower them; they stay raised, like any host tuning for many containers)."""
    ports = sum(len(n.interfaces) for n in spec.hosts)
    for name, wanted in (("gc_thresh2", 512 + 2 * ports), ("gc_thresh3", 1024 + 4 * ports)):
        path = f"/proc/sys/net/ipv4/neigh/default/{name}"
        try:
            with open(path) as f:
                current = int(f.read())
            if current < wanted:
                with open(path, "w") as f:
                    f.write(str(wanted))
        except OSError as err:
            raise RuntimeError(f"sysctl net.ipv4.neigh.default.{name}={wanted}: {err.strerror}") from None


def configure_sysctls(spec: LabSpec) -> None:
    """The machine's ARP table caps (make_room_in_arp_table), namespace settings, then per
    interface: rp_filter off, and on hosts (and a user's containers) the offloads the XDP
    fabric needs (see ethtool.host_port_offloads)."""
    make_room_in_arp_table(spec)
    for node in spec.nodes:
        values = _namespace_sysctls(node, spec.dataplane)
        # the netns runtime set conf/default/rp_filter before it made the interfaces, which
        # took it from there (131,072 writes at 16,384 GPUs); containerlab's came before
        if not node.external and spec.runtime != "netns":
            values.update({f"net/ipv4/conf/{i.name}/rp_filter": "0" for i in node.interfaces})
        set_sysctls(node.netns, values)
        if node.role == "host" or node.external:
            try:
                ethtool.host_port_offloads(node.netns, [i.name for i in node.interfaces],
                                           # a user's container keeps its own tx checksum
                                           # setting (containerlab turns it off already)
                                           tx_checksum_off=not node.external)
            except OSError as err:
                raise RuntimeError(f"configuring namespaces failed: {node.name}: {err}") from None


def node_requests(spec: LabSpec, node: NodeSpec) -> list[rtnl.Request]:
    """Everything the kernel of one node needs, as netlink requests in order: lo and every
    port up first (an onlink route needs its device up), then addresses, routes, rules."""
    requests = [rtnl.link_up(1, f"{node.name}: lo up")]
    for iface in node.interfaces:
        requests.append(rtnl.link_up(iface.ifindex, f"{node.name}:{iface.name} up"))
        if iface.address and node.role != "host":
            requests.append(rtnl.address(iface.ifindex, iface.address,
                                         label=f"{node.name}:{iface.name} address {iface.address}"))
    if node.role == "host":
        requests += _host_requests(spec, node)
    return requests


def _host_requests(spec: LabSpec, node: NodeSpec) -> list[rtnl.Request]:
    nics = spec.host_nics.get(node.name, [])
    by_name = {i.name: i for i in node.interfaces}
    requests = []
    for nic in nics:
        for port in nic.ports:
            # No prefix route: hosts reach even their own segment through the leaf, which
            # answers ARP only for its gateway address (an L3 fabric down to the host).
            requests.append(rtnl.address(by_name[port].ifindex, nic.address, rtnl.IFA_F_NOPREFIXROUTE,
                                         label=f"{node.name}:{port} address {nic.address}"))

    def route(dst: str, nic_index: int, table: int = MAIN_TABLE) -> rtnl.Request:
        nic = nics[nic_index]
        return rtnl.route(dst, [(nic.gateway, by_name[p].ifindex) for p in nic.ports], table=table,
                          label=f"{node.name}: route {dst} table {table} via {nic.gateway}")

    for i, nic in enumerate(nics):
        carriers = set(nic.relay.values())
        if carriers == {i}:
            requests.append(route("0.0.0.0/0", i, nic.table))
        else:
            for segment, carrier in sorted(nic.relay.items()):
                requests.append(route(segment, carrier, nic.table))
        source = str(IPv4Interface(nic.address).ip)
        requests.append(rtnl.rule(source, nic.table, RULE_PRIORITY_BASE + i,
                                  label=f"{node.name}: rule from {source} table {nic.table}"))

    # Main table, for traffic not bound to a NIC: each segment through the NIC on it, or
    # the one the first NIC would relay through. Those relayed segments of the access pool
    # become one route for the pool when one NIC carries them all: 120 of a host's 128
    # segments at 16,384 GPUs, 262 k kernel routes in the lab otherwise.
    nic_ips = [int(IPv4Interface(n.address).ip) for n in nics]
    relayed = []
    for segment, (network, mask, pooled) in zip(spec.segments, _segment_networks(tuple(spec.segments))):
        direct = [i for i, ip in enumerate(nic_ips) if ip & mask == network]
        carrier = direct[0] if direct else (nics[0].relay.get(segment) if nics else None)
        if carrier is None:
            continue
        if direct or not pooled:
            requests.append(route(segment, carrier))
        else:
            relayed.append((segment, carrier))
    carriers = {carrier for _, carrier in relayed}
    if len(carriers) == 1:
        requests.append(route(str(ACCESS_POOL), carriers.pop()))
    else:
        requests += [route(segment, carrier) for segment, carrier in relayed]
    return requests


@functools.lru_cache(maxsize=4)
def _segment_networks(segments: tuple[str, ...]) -> list[tuple[int, int, bool]]:
    """(network, mask, inside the access pool) of each segment, as ints: parsed once per
    lab, not once per host."""
    out = []
    for segment in segments:
        net = IPv4Network(segment)
        out.append((int(net.network_address), int(net.netmask), net.subnet_of(ACCESS_POOL)))
    return out


def kernel_routes(spec: LabSpec, node: NodeSpec) -> list[dict]:
    """The controller's routes of one switch as kernel routes (pyroute2 route() keywords):
    a host /32 straight out of its port (the kernel resolves the host's MAC by ARP), a
    segment over every equal-cost next hop, each via the far end's address on the
    point-to-point link."""
    nodes = {n.name: n for n in spec.nodes}
    by_name = {i.name: i for i in node.interfaces}
    routes = []
    for route in spec.routes.get(node.name, []):
        hops = []
        for port in route.nexthops:
            iface = by_name[port]
            far = nodes[iface.peer_node].interface(iface.peer_if)
            if nodes[iface.peer_node].role == "host":
                hops.append({"oif": iface.ifindex, "scope": RT_SCOPE_LINK})
            elif far.address:
                hops.append({"gateway": str(IPv4Interface(far.address).ip), "oif": iface.ifindex})
            else:
                raise RuntimeError(f"switch {node.name}: port {port} leads to "
                                   f"{iface.peer} which has no address; kernel forwarding "
                                   "needs addressed switch links")
        routes.append({"dst": route.prefix, **(hops[0] if len(hops) == 1 else {"multipath": hops})})
    return routes


def _configure_kernel_switch(spec: LabSpec, node: NodeSpec, ipr) -> None:
    # Every neighbour's MAC is known (as the XDP switches know it): permanent entries, so
    # forwarding never waits on ARP, nor loses a neighbour whose ARP reply a flood dropped.
    nodes = {n.name: n for n in spec.nodes}
    for iface in node.interfaces:
        far = nodes[iface.peer_node].interface(iface.peer_if)
        if far.address:
            ipr.neigh("replace", ifindex=iface.ifindex, dst=str(IPv4Interface(far.address).ip),
                      lladdr=far.mac, state=NUD_PERMANENT)
    for route in kernel_routes(spec, node):
        ipr.route("replace", **route)


def _ipr_in(netns: str):
    # deferred on purpose: pyroute2 takes 0.5 s to import (several on a busy machine) and
    # only kernel-dataplane switches still use it
    from pyroute2 import IPRoute

    # A netlink socket stays in the namespace it was opened in. pyroute2's own netns=
    # forks a helper process, which is slower and inherits our signal handlers.
    with in_netns(netns):
        return IPRoute()


def configure_all(spec: LabSpec) -> None:
    """Each node's requests in one batch on a socket in its namespace; kernel-dataplane
    switches then get their neighbours and routes."""
    for node in spec.nodes:
        rtnl.run_in(node.netns, node_requests(spec, node))
        if node.role != "host" and spec.dataplane == "kernel":
            with _ipr_in(node.netns) as ipr:
                _configure_kernel_switch(spec, node, ipr)


def delete_namespaces(names: list[str]) -> list[str]:
    """Delete the named namespaces (their veths go with them). Returns the ones it removed."""
    present = set(list_netns())
    doomed = [name for name in names if name in present]
    if doomed:
        ip_batch([f"netns delete {name}" for name in doomed], keep_going=True)
    return doomed
