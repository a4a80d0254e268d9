"""What the nav controller (dataplane.agent.nav) knows of the fabric: the leaf-spine-leaf
paths, which leaves each host NIC hangs off, link speeds and states, and the bytes each
path link sent since the last round."""
from __future__ import annotations

import time
from ipaddress import IPv4Interface

Link = tuple[str, str]                  # (switch, egress port)
Path = tuple[Link, ...]                 # leaf uplink, spine downlink


class NavFabric:
    def __init__(self, programmer):
        spec = programmer.spec
        self.spec = spec
        self.dp = programmer.dp
        self.roles = {n.name: n.role for n in spec.nodes}
        self.nodes = {n.name: n for n in spec.switches}
        self.paths = self._paths()
        self.host_leaves = self._host_leaves()
        self.tx_seen: dict[Link, tuple[float, int]] = {}   # link -> (when, tx bytes) last read

    def _paths(self) -> dict[tuple[str, str], list[Path]]:
        """(source leaf, destination leaf) -> every leaf-spine-leaf path."""
        leaves = [n for n in self.nodes.values() if n.role == "leaf"]
        out: dict[tuple[str, str], list[Path]] = {}
        for a in leaves:
            for up in a.interfaces:
                spine = self.nodes.get(up.peer_node)
                if spine is None or spine.role != "spine":
                    continue
                for down in spine.interfaces:
                    b = down.peer_node
                    if b != a.name and self.roles.get(b) == "leaf":
                        out.setdefault((a.name, b), []).append(((a.name, up.name), (spine.name, down.name)))
        return out

    def _host_leaves(self) -> dict[str, list[str]]:
        """Host NIC address -> the leaves its ports hang off."""
        spec = self.spec
        hosts = {h.name: h for h in spec.hosts}
        out: dict[str, list[str]] = {}
        for host, nics in spec.host_nics.items():
            for nic in nics:
                ip = str(IPv4Interface(nic.address).ip)
                out[ip] = [hosts[host].interface(port).peer_node for port in nic.ports]
        return out

    def has_multipath(self) -> bool:
        return any(len(p) > 1 for p in self.paths.values())

    def speed(self, switch: str, port: str) -> int:
        iface = self.nodes[switch].interface(port)
        model = self.dp.port_model(iface.ifindex) or {}
        return model.get("speed_bps") or iface.speed_bps

    def link_alive(self, link: Link) -> bool:
        iface = self.nodes[link[0]].interface(link[1])
        peer = self.nodes.get(iface.peer_node)
        up = self.dp.port_is_up(iface.ifindex)
        if peer is not None:
            up = up and self.dp.port_is_up(peer.interface(iface.peer_if).ifindex)
        return up

    def leaf_pair(self, src_ip: str, dst_ip: str, src_leaf: str | None = None) -> tuple[str, str] | None:
        sources = [src_leaf] if src_leaf else self.host_leaves.get(src_ip, [])
        for a in sources:
            for b in self.host_leaves.get(dst_ip, []):
                if (a, b) in self.paths:
                    return a, b
        return None

    def link_loads(self, rounds) -> dict[Link, float]:
        """b/s each leaf uplink and spine downlink sent since the last round; the bytes of
        the leaf uplinks that sent any go to `rounds` (a record of balance over time)."""
        now = time.monotonic()
        out = {}
        sent = {}
        for path_list in self.paths.values():
            for path in path_list:
                for link in path:
                    if link in out:
                        continue
                    iface = self.nodes[link[0]].interface(link[1])
                    tx = self.dp.port_counters(iface.ifindex)["tx_bytes"]
                    t0, b0 = self.tx_seen.get(link, (now, tx))
                    out[link] = (tx - b0) * 8 / (now - t0) if now > t0 else 0.0
                    self.tx_seen[link] = (now, tx)
                    if self.roles[link[0]] == "leaf":
                        sent.setdefault(link[0], {})[link[1]] = tx - b0
        rounds.append({"t_ns": time.monotonic_ns(), "uplink_bytes": {
            f"{leaf}:{port}": n for leaf, ports in sent.items() if sum(ports.values())
            for port, n in ports.items()}})
        return out

    def dead_links(self) -> list[str]:
        links = {l for ps in self.paths.values() for p in ps for l in p}
        return sorted(f"{s}:{p}" for s, p in links if not self.link_alive((s, p)))
