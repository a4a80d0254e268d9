"""What the agent reads back from the data plane: counters, the live view's port loads,
port states, and a flow's path (the XDP program run on a test frame). A part of the
agent's programmer (dataplane.agent.programmer)."""
from __future__ import annotations

import time

from dataplane.agent import protocol as proto
from dataplane.agent.pathtrace import FlowKey, trace
from dataplane.kernel.netns import in_netns
from dataplane.xdp import abi
from dataplane.xdp.progtest import prog_test_run


class Telemetry:
    def __init__(self, spec, dataplane, routing, ports):
        self.spec = spec
        self.dp = dataplane
        self.routing = routing
        self.ports = ports                 # the PortModel: speeds, real queues, PFC, clock

    def trace(self, flows: list[dict]) -> list[dict]:
        """The path the data plane picks for each flow (see dataplane.agent.pathtrace).
        Looking must not steer: a traced frame starts a flowlet like any frame, and a
        flow that then starts within the flowlet gap (200 real-fabric us: seconds of wall
        time at a slow scale) would keep the member the trace picked with every port
        idle, not the one its own first frame would pick. So the flowlet table is put
        back as it was."""
        saved = self.dp.flowlet_snapshot()
        try:
            return [trace(self.spec, FlowKey(**flow),
                          lambda netns, frame, ifindex: _run_frame(self.dp.prog_fd, netns, frame, ifindex))
                    for flow in flows]
        finally:
            self.dp.flowlet_restore(saved)

    def counters(self, switch: str | None = None) -> dict:
        if switch is not None:
            self.spec.select_switches(switch, None)      # an unknown switch is an error, not an empty answer
        started = time.monotonic_ns()
        result: dict = {"switches": {}}
        nodes = [n for n in self.spec.switches if switch in (None, n.name)]
        ifindexes = [i.ifindex for n in nodes for i in n.interfaces]
        # every port's and group's counters in a few batch reads, not one read each
        counters = self.dp.ports_counters(ifindexes)
        pfc_states = self.dp.pfc_ports_state(ifindexes) if self.ports.port_model["pfc"] == "on" else {}
        member_counts = self.dp.groups_member_counters(
            [gid for (owner, _), gid in self.routing.groups.items() if switch in (None, owner)])
        for node in nodes:
            ports = {}
            shapers = {}
            if any(i.ifindex in self.ports.handoff_ports for i in node.interfaces):
                with self.ports.queues(node) as queues:
                    shapers = queues.stats()
            for i in node.interfaces:
                c = counters[i.ifindex]
                if i.ifindex in shapers:   # real queue: what waits in the port's qdisc now
                    c["shaper"] = shapers[i.ifindex]
                model = self.dp.port_model(i.ifindex) or {}
                c["speed_bps"] = model.get("speed_bps", 0)       # emulated (scaled)
                c["nominal_speed_bps"] = i.speed_bps
                c["pfc"] = self.ports.pfc_counters(i, pfc_states.get(i.ifindex))
                ports[i.name] = c
            groups = {}
            for gid, members in self.routing.switch_groups(node.name):
                per_member = member_counts[gid]
                groups[str(gid)] = {
                    "mode": self.dp.group_info(gid)["mode"],
                    "prefixes": self.routing.prefixes.get(gid, []),
                    "members": [dict(interface=m, **c) for m, c in zip(members, per_member)],
                }
            result["switches"][node.name] = {"ports": ports, "groups": groups}
        # lab-wide: every XDP verdict, and drops by reason over all ports -- including
        # frames dropped before any port is known (unknown_port), counted only here
        result["verdicts"] = self.dp.verdict_counters()
        result["drops"] = self.dp.drop_counters()
        # when the counters were read (CLOCK_MONOTONIC, as the caller's time.monotonic_ns):
        # the middle of the read, which can take long on a busy machine
        result["t_ns"] = (started + time.monotonic_ns()) // 2
        result["clock"] = self.ports.clock()
        return result

    def port_load(self, switch: str | None = None) -> dict:
        """The port_load reply (protocol.LOAD_FIELDS): per switch port the totals and states
        a live view draws, and per switch its groups' modes. The same numbers as counters
        and port_states, without what a view does not draw (per-reason drops, group member
        counters, PFC details): it answers a 56-node lab's poll in a few ms."""
        if switch is not None:
            self.spec.select_switches(switch, None)
        started = time.monotonic_ns()
        pfc = self.ports.pfc_sender if self.ports.port_model["pfc"] == "on" else None
        out: dict = {"fields": list(proto.LOAD_FIELDS), "switches": {}}
        modes: dict[str, set] = {}
        for (owner, _), gid in self.routing.groups.items():
            if switch in (None, owner):
                modes.setdefault(owner, set()).add(self.dp.group_mode(gid))
        nodes = [n for n in self.spec.switches if switch in (None, n.name)]
        loads = self.dp.port_loads([i.ifindex for n in nodes for i in n.interfaces])   # one read for all
        for node in nodes:
            shapers = {}
            if any(i.ifindex in self.ports.handoff_ports for i in node.interfaces):
                with self.ports.queues(node) as queues:
                    shapers = queues.stats()
            ports = {}
            for i in node.interfaces:
                tx, rx, ecn, drops, backlog = loads[i.ifindex]
                speed = (self.dp.port_model(i.ifindex) or {}).get("speed_bps", 0)
                if i.ifindex in shapers:
                    queue = int(shapers[i.ifindex].get("backlog_bytes", 0))
                else:
                    queue = backlog if speed else 0
                sent = (pfc.port_counters(i.ifindex) if pfc is not None else None) or {}
                ports[i.name] = [tx, rx, ecn, drops, speed or i.speed_bps, queue, sent.get("paused_sent_ns", 0),
                                 int(bool(sent.get("pausing"))), int(self.dp.port_is_up(i.ifindex))]
            out["switches"][node.name] = {"ports": ports, "modes": sorted(modes.get(node.name, ()))}
        out["t_ns"] = (started + time.monotonic_ns()) // 2
        return out

    def switch_reset(self, switch: str) -> dict:
        """Forget the switch's run-time state (as a reboot would); see reset_switch_state."""
        node = self.spec.select_switches(switch, None)[0]
        return self.dp.reset_switch_state(node.switch_id)

    def reaction_stamps(self, clear: bool = False) -> dict[str, dict[str, int]]:
        """{switch: {dead_ns, notice_ns, excl_ns, avoid_ns}} for the switches with any stamp
        (dataplane.xdp.tables.notices.reaction_stamps); clear: every switch starts over."""
        names = {n.switch_id: n.name for n in self.spec.switches}
        got = self.dp.reaction_stamps(sorted(names), clear=clear)
        return {names[sw]: st for sw, st in got.items() if any(st.values())}

    def port_states(self, switch: str | None = None) -> dict:
        return {n.name: {i.name: self.dp.port_is_up(i.ifindex) for i in n.interfaces}
                for n in self.spec.switches if switch in (None, n.name)}


def _run_frame(prog_fd: int, netns: str, frame: bytes, ifindex: int) -> tuple[int, bytes]:
    # The ingress device is looked up in the caller's namespace: the switch's.
    with in_netns(netns):
        result = prog_test_run(prog_fd, frame, ingress_ifindex=ifindex)
    if result.verdict == "pass" and abi.handoff_in(result.data):
        return abi.RL_VERDICT_QUEUED, abi.handed_on(result.data)   # forwarded, through a real queue
    return result.retval, result.data
