"""The resolved lab: every name, ifindex, MAC, address and route a deployment needs.

Built from the topology alone (pure), written to the lab's state file at the start of a
deploy, and read back by the agent (to program the switches), by `inspect`, `probe` and
by `destroy` (which must find everything even if the deploying process died).

Switch ports get explicit ifindexes unique within the lab: the XDP program is one BPF
object shared by all switches of the lab and tells switches apart by ingress ifindex.
"""
from __future__ import annotations

import json
import zlib
import dataclasses
from dataclasses import dataclass, field
from ipaddress import IPv4Network

from dataplane.errors import TopologyError
from dataplane.topology import routing
from dataplane.topology.addressing import plan_addresses
from dataplane.topology.model import Endpoint, Topology

NETNS_PREFIX = "railab-"
# containerlab links each container's namespace as /run/netns/<prefix>-<lab>-<node>; railab
# writes its derived topologies with containerlab's default prefix.
CLAB_NETNS_PREFIX = "clab-"
FIRST_IFINDEX = 100  # leaves room below for lo and anything the kernel adds
RUNTIMES = ("netns", "containerlab")
# Who forwards in the switches: railab's XDP program attached in native (driver) mode, the
# same program in generic (skb) mode -- on veth pairs the faster of the two, see the
# README's "Forwarding rate" -- or Linux's own IP forwarding with the controller's routes
# as multipath kernel routes (the baseline railab is compared with).
DATAPLANES = ("xdp", "xdp-generic", "kernel")
XDP_ATTACH_MODE = {"xdp": "drv", "xdp-generic": "generic"}


def netns_name(lab: str, node: str, runtime: str = "netns") -> str:
    return f"{CLAB_NETNS_PREFIX if runtime == 'containerlab' else NETNS_PREFIX}{lab}-{node}"


def lab_netns_prefix(lab: str) -> str:
    return f"{NETNS_PREFIX}{lab}-"


def port_mac(lab: str, ifindex: int) -> str:
    """Locally administered, unicast; byte 1 tells labs apart, bytes 2-5 carry the ifindex."""
    lab_byte = zlib.crc32(lab.encode()) & 0xFF
    return "02:%02x:%02x:%02x:%02x:%02x" % (
        lab_byte, (ifindex >> 24) & 0xFF, (ifindex >> 16) & 0xFF, (ifindex >> 8) & 0xFF, ifindex & 0xFF,
    )


@dataclass
class InterfaceSpec:
    name: str
    ifindex: int
    mac: str
    address: str | None          # CIDR
    peer: str                    # "node:interface"
    peer_ifindex: int
    peer_mac: str
    speed_bps: int
    rail: int | None = None
    plane: int | None = None

    @property
    def peer_node(self) -> str:
        """The node at the far end of the link."""
        return self.peer.split(":", 1)[0]    # split, not Endpoint.parse: a hot path at deploy

    @property
    def peer_if(self) -> str:
        """The far end's interface name."""
        return self.peer.split(":", 1)[1]


@dataclass
class NodeSpec:
    name: str
    role: str
    netns: str
    kind: str
    switch_id: int | None = None
    rail: int | None = None
    plane: int | None = None
    interfaces: list[InterfaceSpec] = field(default_factory=list)
    external: bool = False       # keeps its own container (only under the containerlab runtime)
    container: dict = field(default_factory=dict)  # an external node's containerlab settings

    def interface(self, name: str) -> InterfaceSpec:
        for iface in self.interfaces:
            if iface.name == name:
                return iface
        raise KeyError(f"{self.name}:{name}")


@dataclass
class RouteSpec:
    prefix: str
    nexthops: list[str]          # local interface names, in group member order


@dataclass
class HostNicSpec:
    address: str
    ports: list[str]
    gateway: str
    table: int
    relay: dict[str, int]        # destination segment -> index of the NIC that carries it


@dataclass
class LabSpec:
    name: str
    source: str                  # topology file it came from
    kind: str | None
    nodes: list[NodeSpec]
    routes: dict[str, list[RouteSpec]]
    host_nics: dict[str, list[HostNicSpec]]
    segments: list[str]
    runtime: str = "netns"       # who makes namespaces and links: netns | containerlab
    dataplane: str = "xdp"       # who forwards in the switches: xdp | xdp-generic | kernel
    # containerlab runtime only: the user deployed the containers with containerlab and
    # railab attached to them (`railab attach`), rather than railab deploying them
    attached: bool = False
    # a lab split over machines (`deploy --hosts`): one machine's part holds the whole lab
    # (same addresses, routes and MACs everywhere) and names the nodes that run on it;
    # its agent programs only those switches (BPF state is one kernel's). None: all here.
    local: list[str] | None = None

    # Indexes over nodes and ports, built on first use. The spec is fixed once built, but
    # for one step: the containerlab runtime adopts the ifindexes the kernel gave its
    # veths, and calls reindex() after it.
    def reindex(self) -> None:
        self._local_set = None
        by_name = {n.name: n for n in self.nodes}
        ports: dict[int, tuple[NodeSpec, InterfaceSpec]] = {}
        by_mac: dict[str, tuple[NodeSpec, InterfaceSpec]] = {}
        for node in self.nodes:
            for iface in node.interfaces:
                by_mac[iface.mac.lower()] = (node, iface)
                if node.role != "host" and self.is_local(node.name):
                    # host ifindexes repeat across namespaces under containerlab;
                    # switch ports are unique within a lab (one XDP object for all)
                    ports[iface.ifindex] = (node, iface)
        self._index = {"name": by_name, "port": ports, "mac": by_mac,
                       "switch_id": {n.switch_id: n for n in self.nodes if n.switch_id}}

    def _table(self, table: str) -> dict:
        if getattr(self, "_index", None) is None:
            self.reindex()
        return self._index[table]

    def _lookup(self, table: str, key):
        return self._table(table)[key]

    def find_node(self, name: str) -> NodeSpec | None:
        return self._table("name").get(name)

    def find_switch(self, switch_id: int) -> NodeSpec | None:
        return self._table("switch_id").get(switch_id)

    def find_port(self, ifindex: int) -> tuple[NodeSpec, InterfaceSpec] | None:
        return self._table("port").get(ifindex)

    def node(self, name: str) -> NodeSpec:
        return self._lookup("name", name)

    def switch_by_id(self, switch_id: int) -> NodeSpec:
        return self._lookup("switch_id", switch_id)

    def port(self, ifindex: int) -> tuple[NodeSpec, InterfaceSpec]:
        """The switch and interface that own a switch port's ifindex (KeyError if none)."""
        return self._lookup("port", ifindex)

    def find_by_mac(self, mac: str) -> tuple[NodeSpec, InterfaceSpec] | None:
        """The node and interface (host or switch) that own a MAC address."""
        return self._table("mac").get(mac.lower())

    def endpoint(self, ref: str) -> tuple[NodeSpec, InterfaceSpec]:
        """'node:interface' -> that node and interface (KeyError if the lab has none,
        ValueError if ref is not NODE:INTERFACE)."""
        end = Endpoint.parse(ref)
        node = self.node(end.node)
        return node, node.interface(end.interface)

    def far_end(self, iface: InterfaceSpec) -> tuple[NodeSpec, InterfaceSpec]:
        """The node and interface at the other end of iface's link."""
        peer = self.node(iface.peer_node)
        return peer, peer.interface(iface.peer_if)

    def neighbours(self, node: NodeSpec) -> list[tuple[InterfaceSpec, NodeSpec]]:
        """(local interface, node at its far end) for every link of node."""
        return [(iface, self.node(iface.peer_node)) for iface in node.interfaces]

    def links(self):
        """Each link once, as (node, interface, peer node, peer interface)."""
        done = set()
        for node in self.nodes:
            for iface in node.interfaces:
                key = frozenset(((node.name, iface.name), (iface.peer_node, iface.peer_if)))
                if key not in done:
                    done.add(key)
                    yield (node, iface, *self.far_end(iface))

    def select_switches(self, switch: str | None, role: str | None) -> list[NodeSpec]:
        """The switches a request means: the one named and/or every one of a role (None:
        any); ValueError naming the lab's switches if none matches."""
        nodes = [n for n in self.switches
                 if (switch is None or n.name == switch) and (role is None or n.role == role)]
        if not nodes:
            known = [f"{n.name} ({n.role})" for n in self.switches]
            shown = ", ".join(known[:10]) + (f", ... ({len(known) - 10} more)" if len(known) > 10 else "")
            raise ValueError(f"no switch matches switch={switch!r} role={role!r}; switches: {shown}")
        return nodes

    def is_local(self, node: str) -> bool:
        """Whether the node runs on this machine (see `local`)."""
        if self.local is None:
            return True
        if getattr(self, "_local_set", None) is None:
            self._local_set = frozenset(self.local)
        return node in self._local_set

    def serves(self, host: NodeSpec) -> bool:
        """Whether one of this machine's switches is a host's first hop (it learns it)."""
        return self.local is None or any(self.is_local(i.peer_node) for i in host.interfaces)

    @property
    def switches(self) -> list[NodeSpec]:
        """The switches this machine runs (all of them unless the lab is split)."""
        return [n for n in self.nodes if n.role != "host" and self.is_local(n.name)]

    @property
    def hosts(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.role == "host"]

    def to_json(self) -> dict:
        """The spec as JSON data, compact where a large lab repeats itself (the state file of
        a 16,384-GPU lab was 114 MB and took 14 s to encode): a route's next hops as an index
        into `hop_sets` (the lists routes share), a NIC's relay as one carrier per segment in
        `segments` order (-1: none), or one number when it is the same for all."""
        hop_sets: dict[tuple[str, ...], int] = {}
        routes = {switch: [[r.prefix, hop_sets.setdefault(tuple(r.nexthops), len(hop_sets))] for r in rs]
                  for switch, rs in self.routes.items()}
        host_nics = {host: [{**_fields(n, HostNicSpec), "relay": _relay_out(n.relay, self.segments)}
                            for n in nics] for host, nics in self.host_nics.items()}
        nodes = [{**_fields(n, NodeSpec), "interfaces": [_fields(i, InterfaceSpec) for i in n.interfaces]}
                 for n in self.nodes]
        return {"name": self.name, "source": self.source, "kind": self.kind, "nodes": nodes,
                "routes": routes, "hop_sets": [list(h) for h in hop_sets], "host_nics": host_nics,
                "segments": self.segments, "runtime": self.runtime, "dataplane": self.dataplane,
                "attached": self.attached, "local": self.local}

    @classmethod
    def from_json(cls, data: dict) -> "LabSpec":
        nodes = [
            NodeSpec(**{**n, "interfaces": [InterfaceSpec(**i) for i in n["interfaces"]]})
            for n in data["nodes"]
        ]
        hop_sets = data.get("hop_sets")
        if hop_sets is None:     # a state file written before hop_sets
            routes = {k: [RouteSpec(**r) for r in v] for k, v in data["routes"].items()}
        else:                    # routes over one set of next hops share its list
            routes = {k: [RouteSpec(prefix, hop_sets[i]) for prefix, i in v] for k, v in data["routes"].items()}
        segments = data["segments"]
        host_nics = {k: [HostNicSpec(**{**h, "relay": _relay_in(h["relay"], segments)}) for h in v]
                     for k, v in data["host_nics"].items()}
        return cls(data["name"], data["source"], data["kind"], nodes, routes, host_nics, segments,
                   data.get("runtime", "netns"), data.get("dataplane", "xdp"), data.get("attached", False),
                   data.get("local"))


def _fields(obj, cls) -> dict:
    """A dataclass's own fields as a dict, not deep-copied (asdict copies every list and
    dict, seconds at 16,384 GPUs), nested specs and relay left to the caller."""
    return {name: getattr(obj, name) for name in _FIELD_NAMES.setdefault(cls, tuple(
        f.name for f in dataclasses.fields(cls) if f.name not in ("interfaces", "relay")))}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _relay_out(relay: dict[str, int], segments: list[str]):
    """A NIC's relay for JSON: one carrier per segment (-1: none), or that carrier alone;
    as it is if it names a destination that is no segment."""
    if not relay.keys() <= set(segments):
        return relay
    carriers = [relay.get(segment, -1) for segment in segments]
    if len(relay) == len(segments) and len(set(carriers)) == 1:
        return carriers[0]
    return carriers


def _relay_in(relay, segments: list[str]) -> dict[str, int]:
    if isinstance(relay, dict):          # a state file written before the compact form
        return relay
    if isinstance(relay, int):
        return dict.fromkeys(segments, relay)
    return {segment: carrier for segment, carrier in zip(segments, relay) if carrier >= 0}


def _check_ifname(node: str, name: str) -> None:
    if not name or len(name) > 15 or "/" in name or any(c.isspace() for c in name) or name in (".", ".."):
        raise TopologyError(f"node {node}: interface name {name!r} is not a valid Linux interface name")


def build(topo: Topology, source: str = "", runtime: str = "netns", dataplane: str = "xdp") -> LabSpec:
    addresses = plan_addresses(topo)
    control = routing.compute(topo, addresses)

    ifindex_of: dict[tuple[str, str], int] = {}
    next_index = FIRST_IFINDEX
    for link in topo.links:
        for end in link.endpoints():
            _check_ifname(end.node, end.interface)
            ifindex_of[(end.node, end.interface)] = next_index
            next_index += 1

    nodes: list[NodeSpec] = []
    switch_id = 0
    for node in topo.nodes.values():
        sid = None
        if node.role.is_switch:
            switch_id += 1
            sid = switch_id
        spec = NodeSpec(node.name, node.role.value, netns_name(topo.name, node.name, runtime),
                        node.kind, sid, node.rail, node.plane,
                        # only containerlab can leave a node its own container; the netns
                        # runtime emulates such a node as a host like any other
                        external=node.external and runtime == "containerlab",
                        container=dict(node.container) if runtime == "containerlab" else {})
        for link in sorted(topo.links_of(node.name), key=lambda l: l.local(node.name).interface):
            near, far = link.local(node.name), link.other(node.name)
            if near == far:
                raise TopologyError(f"link {near} - {far}: a link cannot join an interface to itself")
            index, far_index = ifindex_of[(near.node, near.interface)], ifindex_of[(far.node, far.interface)]
            address = addresses.address(near)
            spec.interfaces.append(InterfaceSpec(
                name=near.interface, ifindex=index, mac=port_mac(topo.name, index),
                address=str(address) if address else None, peer=str(far), peer_ifindex=far_index,
                peer_mac=port_mac(topo.name, far_index), speed_bps=link.speed_bps,
                rail=link.rail, plane=link.plane,
            ))
        nodes.append(spec)

    names: dict[int, list[str]] = {}     # id of a shared next-hop tuple -> its names, once
    routes = {
        switch: [RouteSpec(str(r.prefix), _hop_names(names, r.nexthops)) for r in switch_routes]
        for switch, switch_routes in control.switch_routes.items()
    }
    text = {s.network: str(s.network) for s in addresses.segments}   # str() once per segment
    host_nics = {
        host: [
            HostNicSpec(str(n.address), list(n.ports), str(n.gateway.ip), n.table,
                        {text.get(net) or str(net): idx for net, idx in n.relay.items()})
            for n in routing.nics
        ]
        for host, routing in control.host_routing.items()
    }
    segments = [str(s.network) for s in addresses.segments]
    return LabSpec(topo.name, source, topo.kind, nodes, routes, host_nics, segments, runtime, dataplane)


def _hop_names(names: dict[int, list[str]], hops: tuple) -> list[str]:
    """The interface names of a next-hop tuple; routes over one shared tuple (routing.compute)
    share one list (the tuples outlive this build, so their ids stay theirs)."""
    found = names.get(id(hops))
    if found is None:
        found = names[id(hops)] = [h.interface for h in hops]
    return found


def dumps(spec: LabSpec) -> str:
    return json.dumps(spec.to_json(), indent=1, sort_keys=True)


def segment_of(spec: LabSpec, address: str) -> str | None:
    ip = IPv4Network(address, strict=False).network_address
    for seg in spec.segments:
        if ip in IPv4Network(seg):
            return seg
    return None
