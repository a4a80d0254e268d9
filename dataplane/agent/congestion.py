"""ARN on congestion (dataplane.agent.monitor's docstring): poll the ports that carry a
prefix some neighbour routes through this switch, and on a queue or utilisation over the
limit send a withdraw notice with a hold time (at flow granularity naming the port's
heaviest flows). A part of the fabric monitor."""
from __future__ import annotations

import ipaddress

from dataplane.agent.flows import FlowTable
from dataplane.agent.notices import FLOWS_PER_NOTICE, R_QUEUE, R_UTIL, REASONS, T_WITHDRAW

FLOW_WINDOW_MIN_NS = 200_000_000     # flow rates over at least this much wall time


class Congestion:
    def __init__(self, monitor):
        self.m = monitor
        # sender state: (switch, port) -> last notice ns, since when congested, and the
        # flows the port named with how long they stay named
        self.arn_last: dict[tuple[str, int], int] = {}
        self.arn_active: dict[tuple[str, int], int] = {}
        self.arn_named: dict[tuple[str, int], dict[tuple, int]] = {}
        self._flow_table: FlowTable | None = None    # made on first flow-granular poll
        self._arn_port_list: list | None = None     # see arn_ports
        self._arn_port_gen = -1

    def forget(self, switch: str | None = None) -> None:
        """Drop the congestion state of switch's ports (every port's with None)."""
        if switch is None:
            self.arn_active.clear()
            self.arn_named.clear()
            return
        for key in [k for k in self.arn_active if k[0] == switch]:
            self.arn_active.pop(key, None)
            self.arn_named.pop(key, None)

    def arn_ports(self) -> list:
        """(switch, egress interface, [(gid, prefix)]) for every port that carries a prefix
        some neighbour routes through this switch: the ports whose congestion matters.
        Worked out again whenever the programmer's routing state changes."""
        routing = self.m.p.routing
        if self._arn_port_list is None or self._arn_port_gen != routing.generation:
            ports: dict[int, tuple] = {}
            with self.m.lock:
                gen = routing.generation
                for owner, gid, members in routing.every_group():
                    node = self.m.spec.node(owner)
                    for _, prefix in routing.group_prefixes(owner, [gid]):
                        if not self.m.notices.upstream(node, prefix, live_only=False):
                            continue
                        for ifname in members:
                            iface = node.interface(ifname)
                            ports.setdefault(iface.ifindex, (node, iface, []))[2].append((gid, prefix))
            self._arn_port_list, self._arn_port_gen = list(ports.values()), gen
        return self._arn_port_list

    def _hold_wall_ms(self) -> int:
        """The hold time as notices carry it: wall-clock ms at the lab's scale (sender and
        receiver share the lab's clock), at least 1 (0 would mean "until restored")."""
        return max(1, round(self.m.p.wall_us(self.m.cfg["hold_ms"] * 1000) / 1000))

    def poll(self, now: int) -> None:
        interval = int(self.m.p.wall_us(self.m.cfg["interval_ms"] * 1000) * 1000)
        for node, iface, targets in self.arn_ports():
            key = (node.name, iface.ifindex)
            if now - self.arn_last.get(key, 0) < interval:
                continue
            with self.m.lock:
                if not self.m.dp.port_is_up(iface.ifindex):
                    continue
                st = self.m.dp.port_queue_state(iface.ifindex)
            reason, metric = 0, 0
            if st["queue_bytes"] >= self.m.cfg["arn_queue_bytes"]:
                reason, metric = R_QUEUE, st["queue_bytes"]
            elif st["utilization"] >= self.m.cfg["arn_util"]:
                reason, metric = R_UTIL, int(st["utilization"] * 1024)
            if not reason:
                continue
            self.arn_last[key] = now
            self.arn_active[key] = now
            caught = self._caught_flows(node, iface, now, interval) if self.m.cfg["granularity"] == "flow" else None
            self.m.events.append({"event": "congestion", "switch": node.name, "port": iface.name,
                                "reason": REASONS[reason], "metric": metric, "t_ns": now,
                                **({"flows": [list(f) for f in caught]} if caught is not None else {})})
            for gid, prefix in targets:
                flows = None
                if caught is not None:
                    net = ipaddress.IPv4Network(prefix)
                    flows = [f for f in caught if ipaddress.IPv4Address(f[1]) in net]
                    if not flows:
                        continue             # flow granularity: no flow of this prefix to move
                self.m.notices.send_upstream(node, prefix, T_WITHDRAW, reason, gid, hold_ms=self._hold_wall_ms(),
                                    metric=metric, port=iface.ifindex, flows=flows)

    def _caught_flows(self, node, iface, now: int, interval_ns: int) -> list[tuple]:
        """The flows this port named within the hold (refreshed: they have moved, their
        bytes still fill the window), then the heaviest others, heaviest first, until what
        the unnamed flows send is below the utilisation limit -- the port's own utilisation
        lags a move by its averaging window, so it cannot say when to stop."""
        if self._flow_table is None:
            slots = {self.m.dp.port_info(i.ifindex).slot: (n.name, i.name)
                     for n in self.m.spec.switches for i in n.interfaces}
            self._flow_table = FlowTable(self.m.dp, slots)
        window_ns = max(4 * interval_ns, FLOW_WINDOW_MIN_NS)
        with self.m.lock:
            flows = [f for f in self._flow_table.read(window_ns)
                     if f.switch == node.name and f.port == iface.name]
        key = (node.name, iface.ifindex)
        named = {five: t for five, t in self.arn_named.get(key, {}).items() if t > now}
        others = sorted((f for f in flows if f.five not in named), key=lambda f: -f.rate_bps)
        left = sum(f.rate_bps for f in others)
        speed = (self.m.dp.port_model(iface.ifindex) or {}).get("speed_bps") or iface.speed_bps
        caught = list(named)[:FLOWS_PER_NOTICE]
        for f in others[:FLOWS_PER_NOTICE - len(caught)]:
            if left < self.m.cfg["arn_util"] * speed and caught:
                break
            caught.append(f.five)
            left -= f.rate_bps
        until = now + self._hold_wall_ms() * 1_000_000
        self.arn_named[key] = {five: until for five in caught}
        return caught
