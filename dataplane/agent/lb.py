"""Load balancing of a lab's switches at run time: per switch its hash seed, hash fields
and ports' LBN values, per group its mode, weights and (real-fabric) flowlet times. A
part of the agent's programmer (dataplane.agent.programmer)."""
from __future__ import annotations

import zlib

from dataplane.agent.portmodel import check_real_times
from dataplane.xdp import abi
from dataplane.xdp.switch import GroupState

# Load-balancing times of a new group, real-fabric microseconds at the nominal speed: a
# flowlet ends after a 200 us gap (about 6,700 full frames at 400G), or 50 us while its
# member is busy. At scale 1/40 the lab waits 8 ms and 2 ms of wall-clock time for them.
LB_TIME_DEFAULTS = {"flowlet_timeout_us": 200.0, "busy_timeout_us": 50.0}


class LoadBalancer:
    """The load-balancing settings of every switch and group (over the shared routing
    state), written to the data plane and shown back by lb_show."""

    def __init__(self, spec, dataplane, routing, ports):
        self.spec = spec
        self.dp = dataplane
        self.routing = routing
        self.ports = ports                 # the PortModel: the lab's clock
        self.seeds: dict[str, int] = {}
        self.hash_fields: dict[str, list[str] | None] = {}
        self.lbn: dict[tuple[str, str], int] = {}
        self.lb_times: dict[int, dict[str, float]] = {}   # gid -> LB_TIME_DEFAULTS' keys, real us

    def seed_for(self, switch: str) -> int:
        return zlib.crc32(f"{self.spec.name}/{switch}".encode())

    def auto_lbn(self, node) -> list[int]:
        """LBN values in interface order: host-facing ports 0..k-1 first, then the others."""
        down = [i for i, peer in self.spec.neighbours(node) if peer.role == "host"]
        order = down + [i for i in node.interfaces if i not in down]
        value = {i.name: v for v, i in enumerate(order)}
        return [value[i.name] for i in node.interfaces]

    def _write_lb_times(self, gid: int, **changes) -> None:
        """Record a group's real-fabric load-balancing times and write their wall values."""
        check_real_times(**changes)
        for key, value in changes.items():
            if value is not None:
                self.lb_times[gid][key] = float(value)
        times = self.lb_times[gid]
        self.dp.set_group_lb(gid, flowlet_timeout_us=self.ports.wall_us(times["flowlet_timeout_us"]),
                             busy_timeout_us=self.ports.wall_us(times["busy_timeout_us"]))

    def add_group(self, gid: int) -> None:
        """A new group: the default load-balancing times, written at the lab's scale."""
        self.lb_times[gid] = dict(LB_TIME_DEFAULTS)
        self._write_lb_times(gid)

    def rewrite_times(self) -> None:
        """The port model's scale changed: the same real-fabric times, new wall values."""
        for gid in self.lb_times:
            self._write_lb_times(gid)

    def lb_set(self, switch: str | None = None, role: str | None = None, mode: str | None = None,
               seed=None, hash_fields=None, flowlet_timeout_us=None, busy_util=None,
               busy_timeout_us=None, weights=None, bandwidth: bool = False, lbn=None) -> dict:
        """Change load balancing of every group of the selected switches at run time.

        seed: int, or "auto" (the per-switch default). weights: list (member order) or
        {interface: weight}; bandwidth: weights = members' nominal link speeds (FGLB
        bandwidth mode; implies mode wcmp unless a mode is given). lbn: "auto" or
        {interface: value} for this switch's ingress ports."""
        nodes = self.spec.select_switches(switch, role)
        if bandwidth and weights is not None:
            raise ValueError("give weights or bandwidth, not both")
        if bandwidth and mode is None:
            mode = "wcmp"
        self._check_lb_request(nodes, switch, seed, weights, lbn)
        check_real_times(flowlet_timeout_us=flowlet_timeout_us, busy_timeout_us=busy_timeout_us)
        changed = []
        for node in nodes:
            by_name = {i.name: i for i in node.interfaces}
            if seed is not None or hash_fields is not None:
                if seed is not None:
                    self.seeds[node.name] = self.seed_for(node.name) if seed == "auto" else int(seed)
                if hash_fields is not None:
                    self.hash_fields[node.name] = list(hash_fields) or None
                self.dp.set_switch(node.switch_id, hash_seed=self.seeds[node.name],
                                   hash_fields=self.hash_fields[node.name])
            if lbn is not None:
                values = dict(zip([i.name for i in node.interfaces], self.auto_lbn(node))) \
                    if lbn == "auto" else {k: int(v) for k, v in lbn.items()}
                self._set_lbn(node, values, strict=switch is not None)
            for gid, members in self.routing.switch_groups(node.name):
                w = None
                if bandwidth:
                    w = [by_name[m].speed_bps for m in members]
                elif isinstance(weights, dict):
                    w = [float(weights.get(m, 1)) for m in members]
                elif weights is not None:
                    if len(weights) != len(members):
                        continue   # a weight list applies to groups of that many members
                    w = [float(x) for x in weights]
                self.dp.set_group_lb(gid, mode=mode, busy_util=busy_util, weights=w)
                self._write_lb_times(gid, flowlet_timeout_us=flowlet_timeout_us,
                                     busy_timeout_us=busy_timeout_us)
                changed.append(gid)
        if mode is not None:
            # a mode set starts balancing afresh: no flowlet (and its count, which seeds
            # the next flowlet's choice) carries over from the mode before, so a run
            # repeats the choices of the run before it with the same flows
            self.dp.forget_flowlets(changed)
        return {"switches": [n.name for n in nodes], "groups": changed}

    def _set_lbn(self, node, values: dict[str, int], strict: bool = True) -> None:
        by_name = {i.name: i for i in node.interfaces}
        for name, value in values.items():
            iface = by_name.get(name)
            if iface is None:
                if not strict:
                    continue
                raise ValueError(f"{node.name} has no interface {name!r}")
            port = self.dp.port_info(iface.ifindex)
            self.dp.set_port(iface.ifindex, switch_id=node.switch_id, slot=port.slot,
                             mac=iface.mac, lbn=value, speed_bps=port.speed_bps)
            self.lbn[(node.name, name)] = value

    def lb_restore(self, snapshot: dict) -> dict:
        """Give the switches back the load balancing an lb_show() reply recorded: per
        switch its hash seed, hash fields and ports' LBN values; per group its mode, hash
        fields, flowlet and busy parameters and weights. A group made since the snapshot
        (a learned host route) gets a new group's settings."""
        new = GroupState(members=[])
        fresh = {"mode": abi.LB_MODE_NAMES[new.mode], "hash_fields": new.hash_fields,
                 "busy_util": new.busy_util, "weights": new.weights, **LB_TIME_DEFAULTS}
        switches = snapshot["switches"]
        nodes = [self.spec.select_switches(name, None)[0] for name in switches]
        for node in nodes:
            saved = switches[node.name]
            self.seeds[node.name] = int(saved["hash_seed"])
            self.hash_fields[node.name] = list(saved["hash_fields"]) if saved["hash_fields"] else None
            self.dp.set_switch(node.switch_id, hash_seed=self.seeds[node.name],
                               hash_fields=self.hash_fields[node.name])
            self._set_lbn(node, {port: int(p["lbn"]) for port, p in saved["ports"].items()
                                 if int(p["lbn"]) != self.lbn.get((node.name, port))})
            for gid in self.routing.group_ids(node.name):
                g = saved["groups"].get(str(gid)) or fresh
                self.dp.set_group_lb(gid, mode=g["mode"], hash_fields=g["hash_fields"] or 0,
                                     busy_util=g["busy_util"], weights=g["weights"],
                                     clear_weights=g["weights"] is None)
                self._write_lb_times(gid, flowlet_timeout_us=g["flowlet_timeout_us"],
                                     busy_timeout_us=g["busy_timeout_us"])
        return {"switches": [n.name for n in nodes]}

    def _check_lb_request(self, nodes, switch, seed, weights, lbn) -> None:
        """Refuse a request that could only be applied in part, before changing anything."""
        if seed not in (None, "auto") and not 0 <= int(seed) < 2**32:
            raise ValueError(f"seed {seed} is not between 0 and 2^32-1")
        names = {i.name for n in nodes for i in n.interfaces}
        if isinstance(lbn, dict):
            unknown = sorted(set(lbn) - names)
            if unknown and switch is not None:
                raise ValueError(f"{switch} has no interface {', '.join(unknown)}")
            if any(int(v) < 0 for v in lbn.values()):
                raise ValueError("LBN values are 0 or more")
        if isinstance(weights, dict):
            unknown = sorted(set(weights) - names)
            if unknown:
                raise ValueError(f"weights name interfaces the switches do not have: {', '.join(unknown)}")
        elif weights is not None:
            sizes = {len(members) for (owner, members) in self.routing.groups
                     if owner in {n.name for n in nodes}}
            if len(weights) not in sizes:
                raise ValueError(f"{len(weights)} weights given; the groups of "
                                 f"{', '.join(n.name for n in nodes)} have "
                                 f"{' or '.join(map(str, sorted(sizes)))} members")

    def lb_show(self) -> dict:
        out = {"port_model": dict(self.ports.port_model), "clock": self.ports.clock(), "switches": {}}
        for node in self.spec.switches:
            groups = {}
            for gid, members in self.routing.switch_groups(node.name):
                info = self.dp.group_info(gid)
                for key, real in self.lb_times.get(gid, {}).items():   # real, and what the lab waits
                    info[key.replace("_us", "_wall_us")] = info[key]
                    info[key] = real
                info["members"] = list(members)
                info["prefixes"] = self.routing.prefixes.get(gid, [])
                groups[str(gid)] = info
            ports = {}
            for i in node.interfaces:
                model = self.dp.port_model(i.ifindex) or {}
                ports[i.name] = {"lbn": self.lbn.get((node.name, i.name), 0),
                                 "nominal_speed_bps": i.speed_bps,
                                 "speed_bps": model.get("speed_bps", 0), "peer": i.peer}
            out["switches"][node.name] = {
                "role": node.role, "switch_id": node.switch_id,
                "hash_seed": self.seeds.get(node.name), "hash_fields": self.hash_fields.get(node.name),
                "groups": groups, "ports": ports}
        return out
