"""The topology model: a pure graph of nodes, interfaces and links. No side effects.

Everything else (generators, containerlab reader/writer, addressing, controller, runtime)
speaks this model. A Topology is built once and then treated as read-only.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterator


class Role(str, Enum):
    HOST = "host"
    LEAF = "leaf"
    SPINE = "spine"
    CORE = "core"

    @property
    def is_switch(self) -> bool:
        return self is not Role.HOST


# Fabric kinds railab can generate (BRIEF.md section 1). Files read from elsewhere may
# have kind None: the graph is still deployable, only the generator facts are missing.
FABRIC_KINDS = ("clos2", "clos3", "rail-only", "rail-optimized", "dual-plane")

# Tier order, bottom up: used to tell uplinks (towards a higher tier) from downlinks.
TIER = {Role.HOST: 0, Role.LEAF: 1, Role.SPINE: 2, Role.CORE: 3}


@dataclass(frozen=True, order=True)
class Endpoint:
    """One end of a link: `node:interface`, as containerlab writes it."""

    node: str
    interface: str

    def __str__(self) -> str:
        return f"{self.node}:{self.interface}"

    @classmethod
    def parse(cls, text: str) -> "Endpoint":
        """'leaf1:up1' -> Endpoint('leaf1', 'up1'); ValueError without a ':'. The one
        reader of the "node:interface" names in lab specs, records and requests."""
        node, sep, interface = str(text).partition(":")
        if not sep:
            raise ValueError(f"expected NODE:INTERFACE, got {text!r}")
        return cls(node, interface)


@dataclass
class Node:
    name: str
    role: Role
    kind: str = "linux"            # containerlab kind the node had or will have
    rail: int | None = None        # leaves: the rail they serve; hosts: None
    plane: int | None = None       # dual-plane switches: 0 or 1
    pod: int | None = None         # clos3 leaves and spines
    index: int | None = None       # position within its role (server number, leaf number)
    gpus: int | None = None        # hosts: GPUs (= NICs) per server
    labels: dict[str, str] = field(default_factory=dict)  # extra labels, kept on write
    # An end node that keeps its own container under the containerlab runtime (label
    # railab.role: external, or a linux host with its own image); railab only puts the
    # addresses and routes of its fabric links on it. The netns runtime emulates it as a host.
    external: bool = False
    container: dict = field(default_factory=dict)   # its containerlab settings, merged


@dataclass
class Link:
    a: Endpoint
    b: Endpoint
    speed_bps: int = 400_000_000_000
    rail: int | None = None        # host links: the NIC's rail (= GPU index)
    plane: int | None = None       # links inside one plane of a dual-plane fabric
    # Addresses given in the file (containerlab's per-link `ipv4: [a, b]`), CIDR strings.
    # None: railab's addressing plan assigns them.
    ipv4: tuple[str | None, str | None] | None = None
    vars: dict[str, str] = field(default_factory=dict)  # extra link vars, kept on write

    def endpoints(self) -> tuple[Endpoint, Endpoint]:
        return (self.a, self.b)

    def other(self, node: str) -> Endpoint:
        if self.a.node == node:
            return self.b
        if self.b.node == node:
            return self.a
        raise KeyError(node)

    def local(self, node: str) -> Endpoint:
        return self.a if self.a.node == node else self.b


@dataclass
class Topology:
    name: str
    nodes: dict[str, Node] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    kind: str | None = None              # one of FABRIC_KINDS, or None for foreign files
    params: dict[str, object] = field(default_factory=dict)  # generator parameters
    # links by node name, rebuilt when links grew (links are only ever appended): a
    # 1,024-GPU lab asks links_of for each of its nodes, over thousands of links
    _links_by_node: dict[str, list[Link]] = field(default_factory=dict, init=False, repr=False,
                                                  compare=False)
    _links_indexed: int = field(default=-1, init=False, repr=False, compare=False)

    def add_node(self, node: Node) -> Node:
        self.nodes[node.name] = node
        return node

    def add_link(self, link: Link) -> Link:
        self.links.append(link)
        return link

    def by_role(self, role: Role) -> list[Node]:
        return [n for n in self.nodes.values() if n.role is role]

    @property
    def hosts(self) -> list[Node]:
        return self.by_role(Role.HOST)

    @property
    def switches(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.role.is_switch]

    def links_of(self, node: str) -> list[Link]:
        if self._links_indexed != len(self.links):
            index: dict[str, list[Link]] = {}
            for link in self.links:
                index.setdefault(link.a.node, []).append(link)
                if link.b.node != link.a.node:
                    index.setdefault(link.b.node, []).append(link)
            self._links_by_node, self._links_indexed = index, len(self.links)
        return list(self._links_by_node.get(node, []))

    def neighbors(self, node: str) -> list[str]:
        return [l.other(node).node for l in self.links_of(node)]

    def interfaces(self, node: str) -> list[str]:
        return [l.local(node).interface for l in self.links_of(node)]

    def iter_endpoints(self) -> Iterator[tuple[Endpoint, Link]]:
        for link in self.links:
            yield link.a, link
            yield link.b, link

    def link_at(self, endpoint: Endpoint) -> Link:
        for link in self.links:
            if endpoint in (link.a, link.b):
                return link
        raise KeyError(str(endpoint))

    def rails(self) -> list[int]:
        return sorted({l.rail for l in self.links if l.rail is not None})

    def planes(self) -> list[int]:
        return sorted({n.plane for n in self.nodes.values() if n.plane is not None})

    def copy(self) -> "Topology":
        return dataclasses.replace(
            self,
            nodes={k: dataclasses.replace(v, labels=dict(v.labels)) for k, v in self.nodes.items()},
            links=[dataclasses.replace(l, vars=dict(l.vars)) for l in self.links],
            params=dict(self.params),
        )
