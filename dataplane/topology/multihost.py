"""One lab split over several machines ("hosts"): the `--hosts` list and its checks, which
node runs where, and one containerlab file per host whose cut links are containerlab's
`vxlan-stitch` links (a veth to the node plus a VXLAN device towards the other host).

Placement: a node labelled `railab.host: NAME` runs on that host. The others: servers in
their natural order, split into equal consecutive blocks, one per host; each host takes
at most its share of the leaves, a leaf going to the open host with most of its servers
(on a tie, as for rail leaves, the one with the fewest leaves so far), so that host links
stay inside one machine wherever the cabling allows; spines and cores round-robin.

Each host's file is the lab's file (on railab's images: see clabimages) with only that
host's nodes, its internal links, and one `vxlan-stitch` endpoint per cut link: the same
VNI on both sides (one per link, from FIRST_VNI), `remote:` the other host's underlay
address. Each host deploys it as lab `<lab>-<host>`, with a management network of its own
(see management_network): on one machine (hosts emulated as namespaces sharing one Docker
engine) equal lab names would let one host's `containerlab destroy` take the other's
containers.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from ipaddress import ip_address

from dataplane.errors import TopologyError
from dataplane.topology import clab
from dataplane.topology.infer import natural_key
from dataplane.topology.model import Role, Topology

# VXLAN over IPv4 adds outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8 bytes; the kernel
# clamps a VXLAN device to its parent's MTU minus this.
VXLAN_OVERHEAD = 50
FABRIC_MTU = 1500
DST_PORT = 14789                 # containerlab's default for vxlan-stitch
FIRST_VNI = 1000
MGMT_SUBNET_BASE = 21            # host i's management network 172.20.(21 + i).0/24
HOST_LABEL = "railab.host"
HOST_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Host:
    name: str
    address: str                 # the underlay address the other hosts reach it at
    dev: str | None = None       # the underlay device (`NAME=ADDRESS@DEV`), if named


def parse_hosts(text: str) -> list[Host]:
    """`--hosts NAME=ADDRESS[@DEV],NAME=ADDRESS[@DEV][,...]`: two hosts or more, names and
    addresses each used once. One-line TopologyError otherwise."""
    hosts: list[Host] = []
    for item in [part.strip() for part in text.split(",")]:
        name, sep, address = item.partition("=")
        if not sep or not name or not address:
            raise TopologyError(f"--hosts: {item!r} is not NAME=ADDRESS (e.g. a=192.0.2.1)")
        if not HOST_NAME.match(name):
            raise TopologyError(f"--hosts: host name {name!r}: 1-32 letters, digits, '-' and '_'")
        address, _, dev = address.partition("@")
        try:
            address = str(ip_address(address))
        except ValueError:
            raise TopologyError(f"--hosts: host {name}: {address!r} is not an IP address") from None
        for other in hosts:
            if other.name == name:
                raise TopologyError(f"--hosts: host {name} is listed twice")
            if other.address == address:
                raise TopologyError(f"--hosts: hosts {other.name} and {name} have the same "
                                    f"address {address}")
        hosts.append(Host(name, address, dev or None))
    if len(hosts) < 2:
        raise TopologyError("--hosts: a lab split over hosts needs two hosts or more")
    return hosts


def check_underlay_mtu(mtu: int, fabric_mtu: int = FABRIC_MTU) -> None:
    if mtu < fabric_mtu + VXLAN_OVERHEAD:
        raise TopologyError(f"underlay MTU {mtu} is too small: VXLAN adds {VXLAN_OVERHEAD} bytes "
                            f"to the fabric's {fabric_mtu}-byte frames, so the underlay needs "
                            f"{fabric_mtu + VXLAN_OVERHEAD} or more")


def place(topo: Topology, hosts: list[Host]) -> dict[str, str]:
    """node -> host name (see the module's doc)."""
    names = [h.name for h in hosts]
    where: dict[str, str] = {}
    for node in topo.nodes.values():
        wanted = node.labels.get(HOST_LABEL)
        if wanted is not None:
            if wanted not in names:
                raise TopologyError(f"node {node.name}: {HOST_LABEL} {wanted!r} is not one of "
                                    f"the --hosts ({', '.join(names)})")
            where[node.name] = wanted
    servers = sorted((n for n in topo.hosts if n.name not in where), key=lambda n: natural_key(n.name))
    for i, server in enumerate(servers):
        where[server.name] = names[i * len(names) // len(servers)]
    leaves = [n for n in topo.nodes.values() if n.role is Role.LEAF and n.name not in where]
    cap = -(-len(leaves) // len(names))          # leaves per host at most: ceil
    count = dict.fromkeys(names, 0)
    for leaf in sorted(leaves, key=lambda n: natural_key(n.name)):
        near = [where.get(link.other(leaf.name).node) for link in topo.links_of(leaf.name)]
        open_hosts = [h for h in names if count[h] < cap]
        # most of its servers; on a tie (a rail leaf serves every server) the host with
        # the fewest leaves so far, so that rails spread over the hosts
        host = max(open_hosts, key=lambda h: (near.count(h), -count[h]))
        where[leaf.name] = host
        count[host] += 1
    upper = 0
    for node in sorted(topo.nodes.values(), key=lambda n: natural_key(n.name)):
        if node.name not in where:
            where[node.name] = names[upper % len(names)]
            upper += 1
    return where


def split(doc: dict, topo: Topology, hosts: list[Host], where: dict[str, str],
          dst_port: int = DST_PORT) -> dict[str, dict]:
    """host name -> its containerlab document (see the module's doc). `doc` is the lab's
    file as read (links in containerlab's brief form, as railab and `topo images` write
    them), `topo` what railab read from it."""
    address = {h.name: h.address for h in hosts}
    per_host = {}
    for number, host in enumerate(hosts):
        part = copy.deepcopy(doc)
        part["name"] = f"{doc['name']}-{host.name}"
        part["mgmt"] = management_network(doc["name"], number)
        section = part["topology"]
        section["nodes"] = {n: cfg for n, cfg in section["nodes"].items()
                            if n not in topo.nodes or where[n] == host.name}
        section["links"] = []
        per_host[host.name] = part
    vni = FIRST_VNI
    raws = _fabric_links(doc)
    for raw, link in zip(raws, topo.links):
        if [str(e) for e in raw["endpoints"]] != [str(link.a), str(link.b)]:
            raise TopologyError(f"link {raw['endpoints']}: interface names are not Linux "
                                "names; rewrite the file with railab topo images first")
        a, b = where[link.a.node], where[link.b.node]
        if a == b:
            per_host[a]["topology"]["links"].append(copy.deepcopy(raw))
            continue
        for end, here, there in ((link.a, a, b), (link.b, b, a)):
            per_host[here]["topology"]["links"].append({
                "type": "vxlan-stitch", "endpoint": {"node": end.node, "interface": end.interface},
                "remote": address[there], "vni": vni, "dst-port": dst_port, "mtu": FABRIC_MTU,
                **({"vars": dict(raw["vars"])} if raw.get("vars") else {})})
        vni += 1
    for host, part in per_host.items():
        clab.validate(part, f"host {host}'s file")
    return per_host


def management_network(lab: str, number: int) -> dict:
    """Host `number`'s own containerlab management network. railab's nodes use none
    (network-mode none), but containerlab makes one per lab; with one name, bridge and
    subnet per host the parts also deploy side by side on one machine (hosts emulated as
    namespaces sharing one Docker engine), where containerlab's default network would be
    claimed by the first part. external-access off: containerlab would edit the machine's
    firewall for it."""
    return {"network": f"{lab}-mgmt{number}", "bridge": f"rlmgmt{number}",
            "ipv4-subnet": f"172.20.{MGMT_SUBNET_BASE + number}.0/24",
            "ipv6-subnet": f"3fff:172:20:{MGMT_SUBNET_BASE + number}::/64", "external-access": False,
            "skip-when-unused": True}


def _fabric_links(doc: dict) -> list[dict]:
    """The file's links in the order railab reads them into topo.links (the ones it skips,
    dummy and mgmt-net, are not part of the fabric and stay out of every host's file)."""
    links = []
    for raw in doc["topology"].get("links") or []:
        if raw.get("type") not in (None, "veth"):
            continue
        if raw.get("type") is None and any(str(e).partition(":")[0] in clab.SPECIAL_ENDPOINT_NODES
                                           and str(e).partition(":")[0] not in doc["topology"]["nodes"]
                                           for e in raw["endpoints"]):
            continue
        if raw.get("type") == "veth":
            raise TopologyError("a lab split over hosts takes links in containerlab's brief form "
                                "(endpoints: ['node:if', 'node:if']); rewrite it with railab topo images")
        links.append(raw)
    return links
