"""A data plane without BPF for the agent's unit tests: the SwitchDataplane methods the
programmer and the monitor call, keeping what they write in dicts. The replies the
programmer builds from it are the agent's real replies (same code, same field names)."""
from __future__ import annotations

import ipaddress
from pathlib import Path
from types import SimpleNamespace

from dataplane.agent.programmer import SwitchProgrammer
from dataplane.runtime import labspec
from dataplane.topology import clab
from dataplane.xdp import abi
from dataplane.xdp.switch import GroupState, hash_field_names

LABS = Path(__file__).resolve().parents[2] / "labs"


class FakeDataplane:
    prog_fd = handoff_prog_fd = -1

    def __init__(self):
        self.switches: dict[int, dict] = {}
        self.ports: dict[int, SimpleNamespace] = {}
        self.models: dict[int, dict] = {}
        self.groups: dict[int, GroupState] = {}
        self.route_table: dict[int, dict[str, int]] = {}
        self.avoid: dict[tuple[int, str], int] = {}
        self.up: dict[int, bool] = {}
        self.tx: dict[int, int] = {}         # ifindex -> tx bytes so far
        self.tm: dict[tuple, int] = {}       # (switch id, 5-tuple) -> egress ifindex
        self.flowlets_forgotten: list[int] = []   # groups whose flowlet entries were dropped

    def set_switch(self, switch_id, *, hash_seed, hash_fields=None):
        self.switches[switch_id] = {"hash_seed": hash_seed, "hash_fields": hash_fields}

    def set_port(self, ifindex, *, switch_id, slot, mac, lbn=0, speed_bps=0):
        self.ports[ifindex] = SimpleNamespace(switch_id=switch_id, slot=slot, mac=mac, lbn=lbn,
                                              speed_bps=speed_bps)
        self.up.setdefault(ifindex, True)

    def set_notices(self, *, generate, consume, hold_ms, interval_ns=None, pass_consumed=False,
                    watch=False):
        self.notices = {"generate": generate, "consume": consume, "hold_ms": hold_ms,
                        "interval_ns": interval_ns, "pass_consumed": pass_consumed, "watch": watch}

    def notice_counters(self):
        return dict.fromkeys(abi.ARN_STATS.values(), 0)

    def clear_exclusions(self, switch_id=None):
        self.exclusions_cleared = getattr(self, "exclusions_cleared", 0) + 1
        return 0

    def set_notice_port(self, ifindex, *, fabric, src=None, dst=None, peer_switch=0):
        self.notice_ports = getattr(self, "notice_ports", {})
        self.notice_ports[ifindex] = {"fabric": fabric, "src": src, "dst": dst, "peer_switch": peer_switch}

    def set_flow_visibility(self, on, sample_shift=0):
        self.flow_visibility = (on, sample_shift)

    def port_info(self, ifindex):
        return self.ports[ifindex]

    def add_address(self, switch_id, ifindex, ip):
        pass

    def set_port_model(self, ifindex, *, speed_bps, buffer_bytes, ecn_bytes, window_us, real_queue,
                       ecn_max_bytes=None, ecn_pmax=1.0):
        self.models[ifindex] = {"speed_bps": speed_bps, "buffer_bytes": buffer_bytes,
                                "window_us": window_us}

    def set_pfc(self, *, on, lossless_dscp=26, lossless_prio=3):
        self.pfc = {"on": on, "dscp": lossless_dscp, "prio": lossless_prio}

    def set_pfc_port(self, ifindex, *, limit_bytes, ns_per_quantum):
        self.models.setdefault(ifindex, {})["pfc_limit"] = limit_bytes

    def pfc_port_state(self, ifindex):
        return {}

    def pfc_ports_state(self, ifindexes):
        return {ifx: self.pfc_port_state(ifx) for ifx in ifindexes}

    def port_model(self, ifindex):
        return self.models.get(ifindex)

    def set_group(self, gid, members, **_):
        self.groups[gid] = GroupState(members=[(i, m) for i, m in members])

    def forget_flowlets(self, gids):
        self.flowlets_forgotten.extend(gids)
        return 0

    def set_group_lb(self, gid, *, mode=None, hash_fields=None, flowlet_timeout_us=None, busy_util=None,
                     busy_timeout_us=None, weights=None, clear_weights=False):
        g = self.groups[gid]
        if mode is not None:
            g.mode = abi.lb_mode(mode)
        if hash_fields is not None:
            g.hash_fields = hash_fields if isinstance(hash_fields, int) else \
                sum(abi.HASH_FIELDS[f] for f in hash_fields)
        if clear_weights:
            g.weights = None
        for name, value in (("flowlet_timeout_us", flowlet_timeout_us), ("busy_util", busy_util),
                            ("busy_timeout_us", busy_timeout_us), ("weights", weights)):
            if value is not None:
                setattr(g, name, value)

    def group_info(self, gid):
        g = self.groups[gid]
        return {"mode": abi.LB_MODE_NAMES[g.mode], "members": [i for i, _ in g.members],
                "hash_fields": hash_field_names(g.hash_fields), "flowlet_timeout_us": g.flowlet_timeout_us,
                "busy_util": g.busy_util, "busy_timeout_us": g.busy_timeout_us, "weights": g.weights}

    def group_mode(self, gid):
        return abi.LB_MODE_NAMES[self.groups[gid].mode]

    wide_routes_version = 0

    def add_route(self, switch_id, prefix, gid):
        self.route_table.setdefault(switch_id, {})[prefix] = gid
        self.wide_routes_version += not prefix.endswith("/32")

    def del_route(self, switch_id, prefix):
        self.wide_routes_version += not prefix.endswith("/32")
        return self.route_table.get(switch_id, {}).pop(prefix, None) is not None

    def route_group(self, switch_id, prefix):
        return self.route_table.get(switch_id, {}).get(prefix)

    def covering_group(self, switch_id, prefix):
        """As SwitchDataplane.covering_group, by a scan (the real one indexes)."""
        net = ipaddress.IPv4Network(prefix)
        wide = [(ipaddress.IPv4Network(p), gid) for p, gid in self.route_table.get(switch_id, {}).items()
                if ipaddress.IPv4Network(p).prefixlen < 32]
        if any(other.prefixlen > net.prefixlen and other.subnet_of(net) for other, _ in wide):
            return None
        covering = [(other.prefixlen, gid) for other, gid in wide if net.subnet_of(other)]
        return max(covering)[1] if covering else None

    def routes(self, switch_id):
        return dict(self.route_table.get(switch_id, {}))

    def lookup_route(self, switch_id, ip):
        hits = [(ipaddress.IPv4Network(p).prefixlen, gid) for p, gid in self.route_table.get(switch_id, {}).items()
                if ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(p)]
        return max(hits)[1] if hits else None

    def tm_add(self, switch_id, *, src, dst, sport, dport, proto="udp", egress_ifindex, dmac):
        self.tm[(switch_id, src, dst, sport, dport, proto)] = egress_ifindex

    def tm_del(self, switch_id, *, src, dst, sport, dport, proto="udp"):
        return self.tm.pop((switch_id, src, dst, sport, dport, proto), None) is not None

    def set_route_avoid(self, switch_id, prefix, mask):
        self.avoid[(switch_id, prefix)] = mask

    def port_is_up(self, ifindex):
        return self.up.get(ifindex, True)

    def set_port_state(self, ifindex, up):
        return self.set_port_states([(ifindex, up)]).get(ifindex, [])

    def set_port_states(self, changes):
        out = {}
        for ifindex, up in changes:
            if self.up.get(ifindex, True) != up:
                self.up[ifindex] = up
                out[ifindex] = [gid for gid, g in self.groups.items() if any(ifx == ifindex for ifx, _ in g.members)]
        return out

    def group_down_mask(self, gid):
        return sum(1 << k for k, (i, _) in enumerate(self.groups[gid].members) if not self.up.get(i, True))

    def port_counters(self, ifindex):
        tx = self.tx.get(ifindex, 0)
        return {"rx_packets": 0, "rx_bytes": 0, "tx_packets": tx // 1000, "tx_bytes": tx, "ecn_marked": 0,
                "drops": {name: 0 for name in abi.DROP_REASONS.values()}}

    def port_loads(self, ifindexes):
        out = {}
        for ifx in ifindexes:
            c = self.port_counters(ifx)
            out[ifx] = (c["tx_bytes"], c["rx_bytes"], c["ecn_marked"], sum(c["drops"].values()),
                        self.port_queue_state(ifx)["queue_bytes"])
        return out

    def port_queue_state(self, ifindex):
        return {"queue_bytes": 0, "utilization": 0.0}

    def ports_counters(self, ifindexes):
        return {ifx: {**self.port_counters(ifx), **self.port_queue_state(ifx)} for ifx in ifindexes}

    def member_counters(self, gid):
        return [{"ifindex": i, "packets": 0, "bytes": 0} for i, _ in self.groups[gid].members]

    def groups_member_counters(self, gids):
        return {gid: self.member_counters(gid) for gid in gids}

    def verdict_counters(self):
        return {name: {"packets": 0, "bytes": 0} for name in abi.XDP_ACTIONS.values()}

    def drop_counters(self):
        return {name: 0 for name in abi.DROP_REASONS.values()}


def programmed(kind: str = "clos2", name: str = "unitlab") -> SwitchProgrammer:
    """A programmer that has programmed a shipped lab into a FakeDataplane."""
    topo = clab.read(LABS / kind / f"{kind}.clab.yml")
    topo.name = name
    spec = labspec.build(topo)
    programmer = SwitchProgrammer(spec, FakeDataplane())
    programmer.program()
    return programmer
