"""What railab makes of a foreign containerlab file: which nodes are hosts or switches,
and the tier, rail, plane and pod facts the file did not label.

Rules (tests/unit/test_topology_clab.py shows each on a realistic file):
- A node or link that carries railab labels/vars (railab.role on a node, any railab.* var
  on a link) is taken as completely described by them; inference fills only unlabelled ones.
- Kind: `linux` nodes are hosts unless their image is a routing suite (frr, bird, ...)
  or their name is a network device's (leaf1, spine-2, tor3, rt1, ...);
  network-OS kinds are switches; kinds that are not a host or a switch/router are refused.
- Tier: BFS distance from the hosts over the switch graph: 1 leaf, 2 spine, 3+ core;
  except a switch 3 hops away whose spines are all reached by one leaf and that has
  nothing above it: a leaf without hosts (border or spare leaf), not a core.
- Planes: when the switch graph falls apart into several components and hosts have two or
  more links into a component, each component is a plane (dual-plane fabrics). A host with
  one link per component reads as rails (rail-only), not planes: label railab.plane to
  say otherwise.
- Rails: a host's links (per plane) sorted by interface name give NIC positions 0..n-1;
  a leaf whose host links mostly share one position serves that rail, and its host links
  take the leaf's rail (this corrects a host whose NICs are cabled out of order).
- Pods: when there are cores, the components of the leaf+spine graph are pods 1.., in
  order of their first switch name.
"""
from __future__ import annotations

import re
from collections import Counter, deque

from dataplane.errors import TopologyError
from dataplane.topology.model import Role, Topology

# Kinds emulated as railab switches: an explicit list, then prefix rules for the rest of
# the vendors' network OSes. Aliases from older containerlab versions included.
SWITCH_KINDS = frozenset({
    "nokia_srlinux", "srl", "nokia_sros", "vr-sros", "nokia_srsim", "arista_ceos", "ceos",
    "arista_veos", "vr-veos", "sonic-vs", "sonic-vm", "sonic", "dell_sonic", "plvision_sonic",
    "dell_ftosv", "vr-ftosv", "cisco_xrd", "xrd", "cisco_xrd_vrouter", "cisco_xrv", "vr-xrv",
    "cisco_xrv9k", "vr-xrv9k", "cisco_n9kv", "vr-n9kv", "cisco_nxos", "cisco_csr1000v", "cisco_csr",
    "vr-csr", "cisco_c8000", "cisco_c8000v", "cisco_cat9kv", "cisco_iol", "cisco_vios",
    "juniper_crpd", "crpd", "juniper_vmx", "vr-vmx", "juniper_vqfx", "vr-vqfx",
    "juniper_vjunosrouter", "juniper_vjunosswitch", "juniper_vjunosevolved",
    "juniper_cjunosevolved", "cjunosevolved", "cumulus_cvx", "cvx", "nvidia_cumulusvx",
    "aruba_aoscx", "ipinfusion_ocnos", "huawei_vrp", "mikrotik_ros", "vr-ros",
    "vyosnetworks_vyos", "arrcus_arcos", "6wind_vsr", "ciena_saos", "rare", "fdio_vpp", "openwrt",
    # containerlab's bridges join the nodes cabled to them into one segment; railab
    # emulates one as a switch of its own (a leaf when hosts hang off it)
    "bridge", "ovs-bridge",
})
SWITCH_KIND_PREFIXES = ("nokia_", "arista_", "cisco_", "juniper_", "vr-", "sonic", "dell_",
                        "cumulus", "nvidia_", "aruba_", "huawei_", "ipinfusion_", "arrcus_",
                        "mikrotik_", "6wind_", "ciena_")
# Kinds railab cannot emulate, with the reason given to the user. Checked before the prefixes
# (cisco_asav is not a switch even though cisco_ is a switch vendor prefix).
NOT_EMULATED = {
    "host": "the lab's host machine itself",
    "ext-container": "a container that lives outside the lab",
    "k8s-kind": "a Kubernetes-in-Docker cluster",
    "border0": "a remote-access service",
    "keysight_ixia-c-one": "a traffic generator appliance",
    "spirent_stc": "a traffic generator appliance",
    "ostinato": "a traffic generator appliance",
    "generic_vm": "a virtual machine with its own OS",
    "openbsd": "a virtual machine with its own OS",
    "freebsd": "a virtual machine with its own OS",
    "cisco_ftdv": "a firewall", "cisco_asav": "a firewall", "juniper_csrx": "a firewall",
    "juniper_vsrx": "a firewall", "vr-vsrx": "a firewall", "paloalto_panos": "a firewall",
    "vr-pan": "a firewall", "fortinet_fortigate": "a firewall", "checkpoint_cloudguard": "a firewall",
    "f5_bigip-ve": "a load-balancer appliance", "cisco_sdwan": "an SD-WAN appliance",
    "veesix_osvbng": "a broadband network gateway",
}
# `linux` nodes running one of these images are routers (containerlab has no frr kind).
ROUTER_IMAGE_WORDS = frozenset({"frr", "frrouting", "bird", "bird2", "quagga", "openbgpd",
                                "gobgp", "vyos", "sonic", "cumulus", "ceos", "crpd", "srlinux"})

ROLE_LABELS = {"host": Role.HOST, "leaf": Role.LEAF, "spine": Role.SPINE, "core": Role.CORE,
               "switch": None,      # a switch whose tier railab infers
               "external": Role.HOST}  # an end node that keeps its own container


# railab's own container images (scripts/setup.sh builds them; `railab topo images` writes
# them into a containerlab file): a node running one is railab's host or switch, never a
# user's container, whatever its name says.
HOST_IMAGE_REPOSITORY = "railab-node"
SWITCH_IMAGE_REPOSITORY = "railab-switch"
RAILAB_IMAGE_ROLES = {HOST_IMAGE_REPOSITORY: "host", SWITCH_IMAGE_REPOSITORY: "switch"}


def image_repository(image: str) -> str:
    """'registry:5000/team/railab-node:0.1.0@sha256:...' -> 'railab-node'."""
    repo = image.rsplit("@", 1)[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    return repo.rsplit("/", 1)[-1]


def railab_image_role(image: str | None) -> str | None:
    """'host' or 'switch' for railab's own images, None for any other (or no) image."""
    return RAILAB_IMAGE_ROLES.get(image_repository(image)) if image else None


def natural_key(text: str) -> tuple:
    """'eth10' after 'eth9': compare digit runs as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def image_is_router(image: str | None) -> bool:
    if not image:
        return False
    repo = image.rsplit("@", 1)[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    words = re.split(r"[/_.\-]", repo.lower())
    return any(word in ROUTER_IMAGE_WORDS for word in words)


# Names of `linux` nodes that are network devices in the labs people write (leaf1,
# spine-2, tor3, border1, rt1, r2 ...), for images railab does not know as routers.
SWITCH_NAME = re.compile(r"^((border|super-?|b)?(leaf|spine|core|tor|switch|agg|router|rtr)"
                         r"[-_]?\d*[a-z]?|(sw|rt|r|dcgw|pe|p)[-_]?\d+[a-z]?)$", re.IGNORECASE)


def kind_class(kind: str, image: str | None = None, name: str | None = None) -> str:
    """'host', 'switch', or raise KeyError(reason) for kinds railab cannot emulate."""
    if kind == "linux":
        if railab_image_role(image):
            return railab_image_role(image)
        router = image_is_router(image) or bool(name and SWITCH_NAME.match(name))
        return "switch" if router else "host"
    if kind in NOT_EMULATED:
        raise KeyError(NOT_EMULATED[kind])
    if kind in SWITCH_KINDS or kind.startswith(SWITCH_KIND_PREFIXES):
        return "switch"
    raise KeyError("not a host or a switch railab knows how to emulate")


def infer_tiers(topo: Topology, unknown: set[str], source: str) -> None:
    """Give the switches in `unknown` a tier from their BFS distance to the hosts."""
    if not unknown:
        return
    distance: dict[str, int] = {h.name: 0 for h in topo.hosts}
    queue = deque(distance)
    adjacency = _adjacency(topo)
    while queue:
        here = queue.popleft()
        for there in adjacency[here]:
            if there not in distance and topo.nodes[there].role.is_switch:
                distance[there] = distance[here] + 1
                queue.append(there)
    for name in sorted(unknown, key=natural_key):
        if name not in distance:
            raise TopologyError(
                f"{source}: switch {name} has no path to any host, so its tier cannot be "
                "inferred; label it railab.role: leaf|spine|core")
        topo.nodes[name].role = {1: Role.LEAF, 2: Role.SPINE}.get(distance[name], Role.CORE)
    for name in _hostless_leaves(topo, distance, adjacency, unknown):
        topo.nodes[name].role = Role.LEAF


def _hostless_leaves(topo: Topology, distance: dict[str, int], adjacency: dict[str, list[str]],
                     unknown: set[str]) -> list[str]:
    """Switches three hops from the hosts that are leaves without hosts (yet), not cores:
    border and spare leaves. Such a switch reaches up only to spines that one leaf also
    reaches, and nothing above it; a core's spines span pods, which no leaf reaches."""
    def spines_of(name: str) -> set[str]:
        return {n for n in adjacency[name] if distance.get(n) == 2}

    leaf_spines = [spines_of(n) for n, d in distance.items() if d == 1]
    found = []
    for name in unknown:
        if distance.get(name) != 3:
            continue
        ups = spines_of(name)
        others = {n for n in adjacency[name] if topo.nodes[n].role.is_switch} - ups
        if ups and all(distance.get(n) == 3 for n in others) and any(ups <= s for s in leaf_spines):
            found.append(name)
    return found


def _adjacency(topo: Topology) -> dict[str, list[str]]:
    adjacency: dict[str, list[str]] = {name: [] for name in topo.nodes}
    for link in topo.links:
        adjacency[link.a.node].append(link.b.node)
        adjacency[link.b.node].append(link.a.node)
    return adjacency


def _components(topo: Topology, members: set[str]) -> list[list[str]]:
    """Connected components of the subgraph on `members`, each sorted, in name order."""
    adjacency = _adjacency(topo)
    seen: set[str] = set()
    parts = []
    for start in sorted(members, key=natural_key):
        if start in seen:
            continue
        part, queue = [], deque([start])
        seen.add(start)
        while queue:
            here = queue.popleft()
            part.append(here)
            for there in adjacency[here]:
                if there in members and there not in seen:
                    seen.add(there)
                    queue.append(there)
        parts.append(sorted(part, key=natural_key))
    return parts


def infer_planes(topo: Topology, unlabelled: set[str], unlabelled_links: set[int]) -> None:
    if any(n.plane is not None for n in topo.nodes.values()):
        return  # the file says which switches are in which plane
    switches = {n.name for n in topo.switches}
    parts = [p for p in _components(topo, switches)
             if any(topo.nodes[n].role is Role.LEAF for n in p)]
    if len(parts) < 2:
        return
    part_of = {name: i for i, part in enumerate(parts) for name in part}
    links_into = Counter()
    for link in topo.links:
        roles = (topo.nodes[link.a.node].role, topo.nodes[link.b.node].role)
        if Role.HOST in roles and roles != (Role.HOST, Role.HOST):
            host, switch = (link.a.node, link.b.node) if roles[0] is Role.HOST else (link.b.node, link.a.node)
            links_into[host, part_of[switch]] += 1
    if not all(any(links_into[h, i] >= 2 for h in topo.nodes) for i in range(len(parts))):
        return  # one link per host per component: rails of a rail-only fabric, not planes
    order = _plane_order(topo, parts, part_of)
    for i, part in enumerate(parts):
        for name in part:
            if name in unlabelled:
                topo.nodes[name].plane = order[i]
    for number, link in enumerate(topo.links):
        if number in unlabelled_links and link.plane is None:
            switch = link.b.node if link.b.node in part_of else link.a.node
            if switch in part_of:
                link.plane = order[part_of[switch]]


def _plane_order(topo: Topology, parts: list[list[str]], part_of: dict[str, int]) -> dict[int, int]:
    """Plane 0 is where the first host's first port goes (port a), then in host port order."""
    order: dict[int, int] = {}
    for host in sorted((h.name for h in topo.hosts), key=natural_key):
        for link in sorted(topo.links_of(host), key=lambda l: natural_key(l.local(host).interface)):
            part = part_of.get(link.other(host).node)
            if part is not None and part not in order:
                order[part] = len(order)
        if len(order) == len(parts):
            break
    for i in range(len(parts)):
        order.setdefault(i, len(order))
    return order


def infer_rails(topo: Topology, unlabelled: set[str], unlabelled_links: set[int]) -> None:
    numbers_of: dict[str, list[int]] = {name: [] for name in topo.nodes}
    for number, link in enumerate(topo.links):
        numbers_of[link.a.node].append(number)
        numbers_of[link.b.node].append(number)
    position: dict[int, int] = {}  # link number -> NIC position on its host
    for host in topo.hosts:
        per_plane: dict[object, list[tuple[int, str]]] = {}
        for number in numbers_of[host.name]:
            link = topo.links[number]
            far = topo.nodes[link.other(host.name).node]
            per_plane.setdefault(far.plane, []).append((number, link.local(host.name).interface))
        for ports in per_plane.values():
            for pos, (number, _) in enumerate(sorted(ports, key=lambda p: natural_key(p[1]))):
                position[number] = pos
    for leaf in topo.switches:
        if leaf.name not in unlabelled or leaf.rail is not None:
            continue
        seen = Counter(position[n] for n in numbers_of[leaf.name] if n in position)
        if seen:
            rail, count = seen.most_common(1)[0]
            if count * 2 > sum(seen.values()):
                leaf.rail = rail
    for number, link in enumerate(topo.links):
        if number not in position or number not in unlabelled_links or link.rail is not None:
            continue
        switch = link.b.node if topo.nodes[link.b.node].role.is_switch else link.a.node
        leaf_rail = topo.nodes[switch].rail
        link.rail = leaf_rail if leaf_rail is not None else position[number]
    for host in topo.hosts:
        if host.name in unlabelled and host.gpus is None:
            rails = {l.rail for l in topo.links_of(host.name) if l.rail is not None}
            host.gpus = len(rails) or None


def infer_pods(topo: Topology, unlabelled: set[str]) -> None:
    if not topo.by_role(Role.CORE) or any(n.pod is not None for n in topo.nodes.values()):
        return
    below = {n.name for n in topo.nodes.values() if n.role in (Role.HOST, Role.LEAF, Role.SPINE)}
    parts = [p for p in _components(topo, below) if any(topo.nodes[n].role.is_switch for n in p)]
    if len(parts) < 2:
        return
    for pod, part in enumerate(parts, start=1):
        for name in part:
            if name in unlabelled:
                topo.nodes[name].pod = pod


def complete(topo: Topology, source: str, unknown_tier: set[str], unlabelled: set[str],
             unlabelled_links: set[int]) -> None:
    """Fill in what the file did not say. Order matters: tiers, then planes, rails, pods."""
    infer_tiers(topo, unknown_tier, source)
    infer_planes(topo, unlabelled, unlabelled_links)
    infer_rails(topo, unlabelled, unlabelled_links)
    infer_pods(topo, unlabelled)
