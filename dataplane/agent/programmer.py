"""The agent's programmer: turns the lab spec into map entries of the data plane and owns
the lab's routing state (groups, their members and prefixes, learned host routes). The
server calls its public methods; the fabric monitor asks it through methods too, never
through its fields.

Each concern is a part of its own over the shared spec, data plane and routing state:
the port model and the lab's clock (portmodel.PortModel), load balancing
(lb.LoadBalancer), the traffic matrix (trafficmatrix.TrafficMatrix) and what is read
back (telemetry.Telemetry). This class programs the spec's routes and learned host
routes, and answers every request by the part that serves it.
"""
from __future__ import annotations

import ipaddress

from dataplane.agent.flows import FLOW_SAMPLE_SHIFT
from dataplane.agent.lb import LoadBalancer
from dataplane.agent.portmodel import PortModel
from dataplane.agent.routingstate import RoutingState
from dataplane.agent.telemetry import Telemetry
from dataplane.agent.trafficmatrix import TrafficMatrix
from dataplane.runtime.labspec import XDP_ATTACH_MODE, LabSpec
from dataplane.topology import routing


class SwitchProgrammer:
    """Turns a LabSpec into map entries of a SwitchDataplane."""

    def __init__(self, spec: LabSpec, dataplane):
        self.spec = spec
        self.dp = dataplane
        self.routing = RoutingState()
        self.ports = PortModel(spec, dataplane, on_rescale=lambda: self.lb.rewrite_times())
        self.lb = LoadBalancer(spec, dataplane, self.routing, self.ports)
        self.tm = TrafficMatrix(spec, dataplane)
        self.telemetry = Telemetry(spec, dataplane, self.routing, self.ports)
        self._towards: dict[str, tuple] = {}           # see _paths_towards
        self._differing: dict[tuple[str, str], tuple[int, list[str]]] = {}   # see _host_route_switches
        self._networks: dict[str, str | None] | None = None                  # see _host_networks
        # every request, answered by the part of its concern
        self.wall_us, self.clock, self.pause_wall_ns = self.ports.wall_us, self.ports.clock, self.ports.pause_wall_ns
        self.apply_port_model, self.port_speed = self.ports.apply, self.ports.port_speed
        self.pfc_counters = self.ports.pfc_counters
        self.lb_set, self.lb_restore, self.lb_show = self.lb.lb_set, self.lb.lb_restore, self.lb.lb_show
        self.tm_add, self.tm_del, self.tm_list = self.tm.tm_add, self.tm.tm_del, self.tm.tm_list
        self.trace, self.counters, self.port_load = self.telemetry.trace, self.telemetry.counters, self.telemetry.port_load
        self.port_states, self.switch_reset = self.telemetry.port_states, self.telemetry.switch_reset
        self.reaction_stamps = self.telemetry.reaction_stamps

    @property
    def port_model(self) -> dict:
        """The lab-wide port model settings (portmodel.PORT_MODEL_DEFAULTS' keys)."""
        return self.ports.port_model

    @property
    def pfc_sender(self):
        return self.ports.pfc_sender

    @pfc_sender.setter
    def pfc_sender(self, sender) -> None:
        self.ports.pfc_sender = sender

    def program(self) -> None:
        lb = self.lb
        slot = 0  # counters live in arrays indexed by slot, shared by the whole lab
        for node in self.spec.switches:
            lb.seeds[node.name] = lb.seed_for(node.name)
            lb.hash_fields[node.name] = None
            self.dp.set_switch(node.switch_id, hash_seed=lb.seeds[node.name])
            for iface, lbn in zip(node.interfaces, lb.auto_lbn(node)):
                slot += 1
                lb.lbn[(node.name, iface.name)] = lbn
                self.dp.set_port(iface.ifindex, switch_id=node.switch_id, slot=slot,
                                 mac=iface.mac, lbn=lbn)
                if iface.address:
                    self.dp.add_address(node.switch_id, iface.ifindex, iface.address.split("/")[0])
        self.ports.apply()
        self.dp.set_flow_visibility(True, FLOW_SAMPLE_SHIFT)
        for node in self.spec.switches:
            by_name = {i.name: i for i in node.interfaces}
            for route in self.spec.routes.get(node.name, []):
                gid = self._group(node.name, tuple(route.nexthops), by_name)
                self.routing.add_prefix(gid, route.prefix)
                self.dp.add_route(node.switch_id, route.prefix, gid)

    def _group(self, switch: str, nexthops: tuple[str, ...], by_name) -> int:
        key = (switch, nexthops)
        rs = self.routing
        gid = rs.groups.get(key)
        if gid is None:
            gid = len(rs.groups) + 1
            rs.groups[key] = gid
            rs.members[gid] = list(nexthops)
            rs.prefixes[gid] = []
            rs.generation += 1
            self.dp.set_group(gid, [(by_name[n].ifindex, by_name[n].peer_mac) for n in nexthops])
            self.lb.add_group(gid)
        return gid

    def attach(self, attach_ports) -> None:
        """XDP on every switch port (in the lab's dataplane mode): attach_ports(netns,
        ifindexes, prog_fd, mode=...) once per switch."""
        mode = XDP_ATTACH_MODE[self.spec.dataplane]
        for node in self.spec.switches:
            attach_ports(node.netns, [i.ifindex for i in node.interfaces], self.dp.prog_fd, mode=mode)

    def _paths_towards(self, leaf: str):
        """(switch -> (node, its interfaces by name), next hops towards leaf), computed once
        per leaf: the switch graph is the spec's, and a large lab learns thousands of hosts
        per leaf at start."""
        cached = self._towards.get(leaf)
        if cached is None:
            # every switch of the lab, also other machines' in a split lab: a path through
            # them is a path (a graph of this machine's switches sent a host's /32 only
            # over its local spines)
            switches = [n for n in self.spec.nodes if n.role != "host"]
            nodes = {n.name: (n, {i.name: i for i in n.interfaces}) for n in switches}
            graph = {n.name: [(i.peer_node, i.name) for i in n.interfaces if i.peer_node in nodes]
                     for n in switches}
            cached = self._towards[leaf] = (nodes, routing.nexthops_towards(graph, [leaf]))
        return cached

    def install_host_route(self, leaf, iface, ip: str) -> list[str]:
        """ARP-to-host-route: a host learned on leaf:iface becomes a /32 on the leaf (out of
        that port) and on every switch of the leaf's plane (shortest paths towards the leaf,
        by the controller's next-hop rule), like a leaf advertising it across its plane.
        A switch whose routes already send the host that way (the leaf's planned /32, a
        spine's route to the host's segment when the leaf is the segment's only leaf in the
        plane) gets none: the /32 would change no frame's path, and at 16,384 GPUs they were
        6.3 M map entries. Returns the switches programmed."""
        prefix = f"{ip}/32"
        nodes, towards = self._paths_towards(leaf.name)
        done = []
        installed = self.routing.host_switches.setdefault(prefix, set())
        for name in self._host_route_switches(leaf.name, ip, towards, installed):
            if not self.spec.is_local(name):
                continue        # another machine's switch: its agent programs it
            node, by_name = nodes[name]
            hops = (iface.name,) if name == leaf.name else tuple(e[1] for e in towards[name])
            gid = self._group(name, hops, by_name)
            if name not in installed and self.dp.route_group(node.switch_id, prefix) == gid:
                continue     # the lab's own /32 (the leaf's host port) already says this
            self.dp.add_route(node.switch_id, prefix, gid)
            self.routing.host_routes[(name, prefix)] = gid
            installed.add(name)
            done.append(name)
        return done

    def _host_route_switches(self, leaf: str, ip: str, towards, installed: set[str]) -> list[str]:
        """The switches of towards (leaf first) that may need the host's /32: the leaf, those
        that have one already (a host that moved), and those whose route to the host's
        segment does not go towards leaf. Worked out once per (leaf, segment) while the
        routes wider than /32 stay as they were."""
        network = self._host_networks().get(ip)
        if network is None:
            return list(towards)
        version = self.dp.wide_routes_version
        key = (leaf, network)
        cached = self._differing.get(key)
        if cached is None or cached[0] != version:
            differing = []
            for name, edges in towards.items():
                if name == leaf:
                    continue
                gid = self.routing.groups.get((name, tuple(e[1] for e in edges)))
                if gid is None or self.dp.covering_group(self.spec.node(name).switch_id, network) != gid:
                    differing.append(name)
            cached = self._differing[key] = (version, differing)
        extra = installed.difference(cached[1], (leaf,))
        return [leaf, *cached[1], *(n for n in towards if n in extra)]

    def _host_networks(self) -> dict[str, str]:
        """Host address -> its segment (the NIC's network), from the spec, once."""
        if self._networks is None:
            self._networks = {}
            for nics in self.spec.host_nics.values():
                for nic in nics:
                    address, _, plen = nic.address.partition("/")
                    self._networks[address] = str(ipaddress.IPv4Network(nic.address, strict=False)) \
                        if plen else None
        return self._networks

    def select(self, switch: str | None, role: str | None) -> list:
        return self.spec.select_switches(switch, role)
