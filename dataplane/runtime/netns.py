"""The netns runtime: turns a LabSpec into namespaces, veth pairs, addresses and routes,
and removes them again. Start and stop run in a fixed order; teardown never needs the
in-memory model, only the lab's name.
"""
from __future__ import annotations

import os
import subprocess
from contextlib import ExitStack
from ipaddress import IPv4Interface, IPv4Network

from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST
from pyroute2.netlink.rtnl import RTM_NEWLINK
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from dataplane.netns_util import in_netns
from dataplane.runtime.labspec import LabSpec, NodeSpec

NAME = "netns"
NETNS_DIR = "/run/netns"
IFA_F_NOPREFIXROUTE = 0x200
RTNH_F_ONLINK = 4
RULE_PRIORITY_BASE = 100
RT_SCOPE_LINK = 253
NUD_PERMANENT = 0x80


def list_netns() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def _ip_batch(commands: list[str], *, keep_going: bool = False) -> tuple[int, str]:
    """Run iproute2 commands in one `ip -batch` child. It is a child we hold, so an
    interrupted caller waits for it to end before cleaning up (pyroute2's netns helpers
    fork a process we cannot wait for, which could create a namespace after the cleanup
    looked)."""
    argv = ["ip", "-force", "-batch", "-"] if keep_going else ["ip", "-batch", "-"]
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
    create_links(spec)


def remove(lab: str, spec: LabSpec | None) -> None:
    """The namespaces go in lifecycle.destroy (the same for every runtime); nothing else here."""


def leftovers(lab: str) -> bool:
    return False


# ------------------------------------------------------------------ pieces
def create_namespaces(spec: LabSpec) -> None:
    code, err = _ip_batch([f"netns add {node.netns}" for node in spec.nodes])
    if code:
        raise RuntimeError(f"creating namespaces failed: {err.strip()}")


def _veth_request(name, index, mac, ns_fd, peer_name, peer_index, peer_mac, peer_ns_fd) -> ifinfmsg:
    # pyroute2's link("add") cannot set the peer's ifindex, which the shared XDP program
    # needs to be lab-unique, so the request is spelled out.
    msg = ifinfmsg()
    msg["index"] = index
    msg["attrs"] = [
        ("IFLA_IFNAME", name), ("IFLA_NET_NS_FD", ns_fd), ("IFLA_ADDRESS", mac),
        ("IFLA_LINKINFO", {"attrs": [
            ("IFLA_INFO_KIND", "veth"),
            ("IFLA_INFO_DATA", {"attrs": [
                ("VETH_INFO_PEER", {"index": peer_index, "attrs": [
                    ("IFLA_IFNAME", peer_name), ("IFLA_NET_NS_FD", peer_ns_fd),
                    ("IFLA_ADDRESS", peer_mac),
                ]}),
            ]}),
        ]}),
    ]
    return msg


def create_links(spec: LabSpec) -> None:
    with ExitStack() as stack:
        fds = {}
        for node in spec.nodes:
            fd = os.open(os.path.join(NETNS_DIR, node.netns), os.O_RDONLY)
            stack.callback(os.close, fd)
            fds[node.name] = fd
        ipr = stack.enter_context(IPRoute())
        for node, iface, peer_node, peer in spec.links():
            msg = _veth_request(iface.name, iface.ifindex, iface.mac, fds[node.name],
                                peer.name, peer.ifindex, peer.mac, fds[peer_node.name])
            # tuple(): some pyroute2 versions answer with a generator that sends
            # nothing until it is consumed.
            tuple(ipr.nlm_request(msg, msg_type=RTM_NEWLINK,
                                  msg_flags=NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL))


def _sysctl_script(node: NodeSpec, dataplane: str = "xdp") -> str:
    if node.external:
        # A user's own container keeps its settings; only what the XDP fabric needs of any
        # receiver: GRO on, so frames redirected into its veth are accepted (tx checksum
        # offload is already off: containerlab turns it off on both ends of its links).
        return "\n".join(f"ethtool -K {i.name} gro on >/dev/null" for i in node.interfaces) or "true"
    kernel_switch = node.role != "host" and dataplane == "kernel"
    lines = [
        "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
        # XDP switches forward only in XDP: the kernel must not forward behind their back.
        # Kernel switches forward with Linux, hashing multipath routes on the L4 5-tuple
        # (the lab is IPv4-only: IPv6 is off everywhere).
        f"sysctl -qw net.ipv4.ip_forward={1 if kernel_switch else 0}",
        "sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0",
    ]
    if kernel_switch:
        lines.append("sysctl -qw net.ipv4.fib_multipath_hash_policy=1 "
                     "net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.default.send_redirects=0")
    if node.role == "host":
        lines.append("sysctl -qw net.ipv4.fib_multipath_hash_policy=1")
        # a port that lost carrier leaves the host's multipath routes at once (dual-plane
        # hosts move their flows to the other plane; back when the carrier returns)
        lines.append("sysctl -qw net.ipv4.conf.all.ignore_routes_with_linkdown=1 "
                     "net.ipv4.conf.default.ignore_routes_with_linkdown=1")
    for iface in node.interfaces:
        lines.append(f"sysctl -qw net.ipv4.conf.{iface.name}.rp_filter=0")
        if node.role == "host":
            # A frame redirected by XDP loses its 'checksum still to do' mark, so hosts
            # must checksum in software; GRO lets a veth accept redirected frames.
            lines.append(f"ethtool -K {iface.name} tx off gro on >/dev/null")
    return "\n".join(lines)


def configure_sysctls(spec: LabSpec) -> None:
    procs = []
    for node in spec.nodes:
        procs.append((node, subprocess.Popen(
            ["ip", "netns", "exec", node.netns, "sh", "-e", "-c", _sysctl_script(node, spec.dataplane)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )))
    failed = []
    for node, proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            failed.append(f"{node.name}: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}")
    if failed:
        raise RuntimeError("configuring namespaces failed: " + "; ".join(failed))


def _ipr_in(netns: str) -> IPRoute:
    # A netlink socket stays in the namespace it was opened in. pyroute2's own netns=
    # forks a helper process, which is slower and inherits our signal handlers.
    with in_netns(netns):
        return IPRoute()


def configure_node(spec: LabSpec, node: NodeSpec) -> None:
    with _ipr_in(node.netns) as ipr:
        ipr.link("set", index=1, state="up")
        for iface in node.interfaces:
            if iface.address and node.role != "host":
                addr = IPv4Interface(iface.address)
                ipr.addr("add", index=iface.ifindex, address=str(addr.ip), prefixlen=addr.network.prefixlen)
            ipr.link("set", index=iface.ifindex, state="up")
        if node.role == "host":
            _configure_host(spec, node, ipr)
        elif spec.dataplane == "kernel":
            _configure_kernel_switch(spec, node, ipr)


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


def _configure_kernel_switch(spec: LabSpec, node: NodeSpec, ipr: IPRoute) -> None:
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


def _configure_host(spec: LabSpec, node: NodeSpec, ipr: IPRoute) -> None:
    nics = spec.host_nics.get(node.name, [])
    by_name = {i.name: i for i in node.interfaces}
    for nic in nics:
        addr = IPv4Interface(nic.address)
        for port in nic.ports:
            # No prefix route: hosts reach even their own segment through the leaf, which
            # answers ARP only for its gateway address (an L3 fabric down to the host).
            ipr.addr("add", index=by_name[port].ifindex, address=str(addr.ip),
                     prefixlen=addr.network.prefixlen, flags=IFA_F_NOPREFIXROUTE)

    def via(nic_index: int) -> dict:
        nic = nics[nic_index]
        hops = [{"gateway": nic.gateway, "oif": by_name[p].ifindex, "flags": RTNH_F_ONLINK} for p in nic.ports]
        if len(hops) == 1:
            return {"gateway": nic.gateway, "oif": hops[0]["oif"], "flags": RTNH_F_ONLINK}
        return {"multipath": hops}

    for i, nic in enumerate(nics):
        carriers = set(nic.relay.values())
        if carriers == {i}:
            ipr.route("add", dst="0.0.0.0/0", table=nic.table, **via(i))
        else:
            for segment, carrier in sorted(nic.relay.items()):
                ipr.route("add", dst=segment, table=nic.table, **via(carrier))
        ipr.rule("add", src=str(IPv4Interface(nic.address).ip), src_len=32,
                 table=nic.table, priority=RULE_PRIORITY_BASE + i)

    # Main table, for traffic not bound to a NIC: each segment through the NIC on it, or
    # the one the first NIC would relay through.
    for segment in spec.segments:
        network = IPv4Network(segment)
        direct = [i for i, n in enumerate(nics) if IPv4Interface(n.address).ip in network]
        carrier = direct[0] if direct else (nics[0].relay.get(segment) if nics else None)
        if carrier is not None:
            ipr.route("add", dst=segment, **via(carrier))


def configure_all(spec: LabSpec) -> None:
    for node in spec.nodes:
        configure_node(spec, node)


def delete_namespaces(names: list[str]) -> list[str]:
    """Delete the named namespaces (their veths go with them). Returns the ones it removed."""
    present = set(list_netns())
    doomed = [name for name in names if name in present]
    if doomed:
        _ip_batch([f"netns delete {name}" for name in doomed], keep_going=True)
    return doomed
