"""The agent without BPF: its protocol, the server's dispatch table, the programmer's
routing state and restore, the monitor's locking and caches, and what the experiment
runner makes of the agent's real counters reply (built by the programmer's own code
over a FakeDataplane)."""
from __future__ import annotations

import ipaddress
import threading
import time
from types import SimpleNamespace

import pytest
from fakedp import programmed

from dataplane.agent import protocol as proto
from dataplane.agent.monitor import FabricMonitor
from dataplane.agent.notices import R_UTIL, T_RESTORE, T_WITHDRAW, Notice
from dataplane.agent.server import ControlServer
from dataplane.experiment import deltas, session
from dataplane.experiment.spec import Experiment, ModeSpec
from dataplane.lab.fabric import Fabric
from dataplane.traffic import workload as wl
from dataplane.xdp import abi


# ------------------------------------------------------------------ protocol and server
def test_every_request_has_one_handler(tmp_path):
    server = ControlServer(str(tmp_path / "agent.sock"), programmed())
    try:
        handled = set(server.locked) | set(server.unlocked)
        assert handled == set(proto.REQUESTS.values())
        assert not set(server.locked) & set(server.unlocked)
    finally:
        server.server_close()


def test_unknown_op_or_field_is_refused_before_it_runs():
    with pytest.raises(ValueError, match="unknown op 'status'"):
        proto.decode({"op": "status"})
    with pytest.raises(ValueError, match="unknown field colour"):
        proto.decode({"op": "counters", "colour": "red"})
    assert proto.request("port_speed", switch="s", port="p", speed_bps=None).to_wire() == \
        {"op": "port_speed", "switch": "s", "port": "p"}


def test_counters_reply_round_trips_and_shows_lab_wide_drops():
    p = programmed()
    wire = p.counters()
    snap = proto.CounterSnapshot.from_wire(wire)
    assert snap.to_wire() == wire
    assert snap.t_ns and abs(snap.t_ns - time.monotonic_ns()) < 10**9   # when the agent read them
    assert "unknown_port" in snap.drops            # dropped before any port is known
    assert set(snap.verdicts) >= {"drop", "pass", "redirect"}


def test_port_load_reply_is_the_counters_reply_cut_down():
    """port_load (what the live view polls) says per port what the counters and port_states
    replies say (protocol.load_row maps one to the other), and per switch its groups' modes."""
    p = programmed()
    p.lb_set(role="leaf", mode="spray-rr")
    for n, ifindex in enumerate(p.dp.ports):
        p.dp.tx[ifindex] = 1000 * n
    down = next(iter(p.dp.ports))
    p.dp.up[down] = False

    def agree() -> dict:
        load = p.port_load()
        snap = proto.CounterSnapshot.from_wire(p.counters())
        states = p.port_states()
        assert load["fields"] == list(proto.LOAD_FIELDS)
        assert set(load["switches"]) == set(snap.switches)
        for name, sw in snap.switches.items():
            assert load["switches"][name]["ports"] == {port: proto.load_row(c, states[name][port])
                                                       for port, c in sw.ports.items()}
            assert load["switches"][name]["modes"] == sorted({g.mode for g in sw.groups.values()})
        return load

    load = agree()
    assert load["switches"]["leaf1"]["modes"] == ["spray-rr"]
    assert sum(not row[-1] for sw in load["switches"].values() for row in sw["ports"].values()) == 1
    assert any(row[0] for sw in load["switches"].values() for row in sw["ports"].values())
    # PFC on: a port pausing its neighbour now, another that did for a while
    pausing = {ifx: (n % 3 == 0, 1000 * n) for n, ifx in enumerate(p.dp.ports)}
    p.port_model["pfc"] = "on"
    p.pfc_sender = SimpleNamespace(port_counters=lambda ifx: {
        "pause_frames_sent": 1, "xon_sent": 0, "pausing": pausing[ifx][0], "paused_sent_ns": pausing[ifx][1]})
    try:
        paused = agree()
    finally:
        p.port_model["pfc"], p.pfc_sender = "off", None
    rows = [row for sw in paused["switches"].values() for row in sw["ports"].values()]
    at = proto.LOAD_FIELDS.index
    assert any(row[at("pausing")] for row in rows) and any(row[at("paused_ns")] for row in rows)
    only = p.port_load("spine1")
    assert set(only["switches"]) == {"spine1"} and only["switches"]["spine1"] == load["switches"]["spine1"]
    with pytest.raises(ValueError, match="no switch matches"):
        p.port_load("nope")


# ------------------------------------------------------------------ the report's fields
def test_report_links_carry_the_emulated_speed_the_agent_sends():
    """The runner once read `scaled_bps`, a field the agent never sends: the emulated
    speed, the utilisation and the fabric colouring were missing from real reports."""
    p = programmed()
    before = proto.CounterSnapshot.from_wire(p.counters())
    for ifindex in p.dp.ports:
        p.dp.tx[ifindex] = 125_000
    after = proto.CounterSnapshot.from_wire(p.counters())
    links = deltas.link_bytes(p.spec, before, after)
    scale = p.port_model["scale"]
    assert links and all(link["scaled_bps"] == int(link["speed_bps"] * scale) for link in links)
    up = next(link for link in links if link["a"].startswith("leaf1:up"))
    assert up["bytes_ab"] == 125_000 and up["bytes_ba"] == 125_000


def test_a_mode_set_forgets_the_flowlets_of_the_groups_it_changes():
    # a run that sets its mode starts from no flowlet (their counts seed the next
    # flowlet's choice), so it repeats the run before it; other settings keep them
    p = programmed()
    p.lb_set(role="leaf", busy_util=0.5)
    assert p.dp.flowlets_forgotten == []
    changed = p.lb_set(role="leaf", mode="flowlet")["groups"]
    assert changed and sorted(p.dp.flowlets_forgotten) == sorted(changed)
    assert not set(changed) & set(p.routing.group_ids("spine1"))


# ------------------------------------------------------------------ one clock
def test_times_are_real_fabric_time_applied_at_the_lab_scale():
    """A flowlet gap, busy gap and utilisation window are given in real-fabric time; the
    data plane gets them / scale, and a new scale rewrites them, the real values unchanged."""
    p = programmed()
    p.apply_port_model(scale=1 / 40, window_us=2.0)
    p.lb_set(role="leaf", mode="flowlet", flowlet_timeout_us=200, busy_timeout_us=50)
    gid = p.routing.group_ids("leaf1")[0]
    assert p.dp.groups[gid].flowlet_timeout_us == pytest.approx(200 * 40)
    assert p.dp.groups[gid].busy_timeout_us == pytest.approx(50 * 40)
    assert next(iter(p.dp.models.values()))["window_us"] == pytest.approx(80)
    p.apply_port_model(scale=1 / 4000)
    assert p.dp.groups[gid].flowlet_timeout_us == pytest.approx(200 * 4000)
    assert next(iter(p.dp.models.values()))["window_us"] == pytest.approx(8000)
    shown = p.lb_show()
    g = shown["switches"]["leaf1"]["groups"][str(gid)]
    assert g["flowlet_timeout_us"] == 200 and g["flowlet_timeout_wall_us"] == pytest.approx(800_000)
    assert shown["clock"]["stretch"] == pytest.approx(4000)
    p.apply_port_model(scale=1e-6)       # 200 s of wall clock: capped at what u32 ns hold
    assert p.dp.groups[gid].flowlet_timeout_us < 2**32 / 1000
    with pytest.raises(ValueError, match="real-fabric"):
        p.lb_set(role="leaf", mode="ecmp", flowlet_timeout_us=-1)
    assert p.dp.groups[gid].mode == abi.LB_MODE_FLOWLET     # refused before anything changed


# ------------------------------------------------------------------ restoring a lab
def _fabric_of(server: ControlServer):
    """A Fabric whose requests go straight to the server's dispatch table."""
    class Direct(Fabric):
        def _req(self, op, **fields):
            return server.dispatch(proto.request(op, **fields))
    return Direct("unitlab")


def _tweak(fab: Fabric) -> None:
    fab.set_mode("flowlet", role="leaf", flowlet_timeout_us=333, busy_util=0.5, busy_timeout_us=20,
                 hash_fields=["src_ip", "dst_ip", "bth_dqp"], seed=7)
    fab.set_mode("wcmp", switch="spine1", weights=[1, 3])
    fab.set_mode(None, switch="leaf2", lbn={"up1": 5})
    fab.set_port_model(scale=0.001, buffer_bytes=65536)


def test_lb_restore_gives_back_what_show_recorded(tmp_path):
    server = ControlServer(str(tmp_path / "agent.sock"), programmed())
    try:
        fab = _fabric_of(server)
        _tweak(fab)
        found = fab.show()
        fab.set_mode("spray-rr", seed="auto", hash_fields=["dst_ip"], lbn="auto")
        fab.set_port_model(scale=0.5)
        fab.restore(found)
        assert fab.show() == found
    finally:
        server.server_close()


def test_reused_lab_is_given_back_as_found(tmp_path, monkeypatch):
    """An experiment on a lab that was already up leaves its load balancing and port
    model exactly as it found them (it used to reset every switch to ECMP, auto seed)."""
    p = programmed()
    server = ControlServer(str(tmp_path / "agent.sock"), p)
    try:
        fab = _fabric_of(server)
        _tweak(fab)
        found = fab.show()
        monkeypatch.setattr(session, "Fabric", lambda lab: fab)
        monkeypatch.setattr(session.lifecycle, "is_up", lambda lab: True)
        monkeypatch.setattr(session.state, "load", lambda lab: SimpleNamespace(spec=p.spec))
        monkeypatch.setattr(session.runner, "run_once", lambda *a, **kw: {})
        monkeypatch.setattr(session, "write", lambda results, exp: tmp_path)
        monkeypatch.setattr(session.wl, "generate", lambda workload, hosts: [])
        from dataplane.report import metrics
        monkeypatch.setattr(metrics, "run_metrics", lambda run: {})
        exp = Experiment(name="restore", source=tmp_path / "x.yml",
                         lab_file=session.clab.Path(__file__).resolve().parents[2] / "labs/clos2/clos2.clab.yml",
                         duration_s=0.1, modes=[ModeSpec("spray-rr", "spray-rr"), ModeSpec("ecmp", "ecmp", {"seed": 3})],
                         workload=None, port_model={"scale": 0.01, "queue": "virtual"}, sweep=None, output=tmp_path, reuse_lab=False)
        session.run(exp, lab_name="unitlab")
        assert fab.show() == found
    finally:
        server.server_close()


# ------------------------------------------------------------------ the monitor
class _Sock:
    def __init__(self):
        self.sent = []

    def sendto(self, data, addr):
        self.sent.append((Notice.unpack(data), addr))


def _monitor(p=None) -> FabricMonitor:
    p = p or programmed()
    mon = FabricMonitor(p, threading.RLock())
    mon.udp = {n.name: _Sock() for n in p.spec.switches}
    return mon


def test_reachability_notices_only_for_the_switchs_own_groups():
    mon = _monitor()
    p = mon.p
    spine1 = p.spec.node("spine1")
    spine_gid = p.routing.group_ids("spine1")[0]
    for ifindex, _ in p.dp.groups[spine_gid].members:
        p.dp.up[ifindex] = False
    leaf1 = p.spec.node("leaf1")
    mon._notify_reachability(leaf1, [spine_gid], 0)        # not leaf1's group: nothing
    assert not mon.withdrawn
    mon._notify_reachability(spine1, [spine_gid], 0)       # spine1's: withdrawn upstream
    assert {sw for sw, _ in mon.withdrawn} == {"spine1"}
    assert mon.udp["spine1"].sent


class _CheckedDict(dict):
    """A dict that fails when read without `lock` held."""

    def __init__(self, lock, *a):
        super().__init__(*a)
        self.lock = lock

    def _check(self):
        assert self.lock._is_owned(), "exclusion table read without the lock"

    def items(self):
        self._check()
        return super().items()

    def __iter__(self):
        self._check()
        return super().__iter__()


def test_exclusion_table_is_only_read_under_the_lock():
    mon = _monitor()
    leaf1 = mon.p.spec.node("leaf1")
    spine1 = mon.p.spec.node("spine1")
    notice = Notice(T_WITHDRAW, R_UTIL, 1, spine1.switch_id, 0, "10.0.1.0/24", hold_ms=1)
    mon.handle_notice(leaf1, notice, time.monotonic_ns())
    mon.excl = _CheckedDict(mon.lock, mon.excl)
    mon.status()
    mon._expire(time.monotonic_ns() + 10**9)
    assert mon.counters["leaf1"]["expired"] == 1


def test_flow_notice_moves_only_the_named_flows_of_the_leafs_own_hosts():
    """A flow-granular notice from spine1 survives the wire format; leaf1 moves the named
    flow of its own host off spine1 (one TM entry), ignores a named flow it does not
    source, installs nothing for the prefix as a whole, and drops the entry on expiry."""
    mon = _monitor()
    p = mon.p
    leaf1, leaf2, spine1 = (p.spec.node(n) for n in ("leaf1", "leaf2", "spine1"))
    src = p.spec.host_nics["srv1"][0].address.split("/")[0]
    dst = p.spec.host_nics["srv3"][0].address.split("/")[0]
    other = p.spec.host_nics["srv5"][0].address.split("/")[0]
    flows = [(src, dst, 4000, 9000, 17), (other, dst, 4001, 9000, 17)]
    wire = Notice(T_WITHDRAW, R_UTIL, 1, spine1.switch_id, 0, "10.0.1.0/24", hold_ms=5, flows=flows).pack()
    notice = Notice.unpack(wire)
    assert notice.flows == flows
    mon.handle_notice(leaf1, notice, time.monotonic_ns())
    mon.handle_notice(leaf2, notice, time.monotonic_ns())
    assert list(p.dp.tm) == [(leaf1.switch_id, src, dst, 4000, 9000, 17)]
    egress = p.spec.port(next(iter(p.dp.tm.values())))[1]
    assert egress.peer_node != "spine1"
    assert not mon.excl and not any(p.dp.avoid.values()) and not mon.dyn_routes
    mon._expire(time.monotonic_ns() + 10**9)
    assert not p.dp.tm and mon.counters["leaf1"]["flows_expired"] == 1


def test_unknown_granularity_is_refused_and_changes_nothing():
    mon = _monitor()
    before = dict(mon.cfg)
    with pytest.raises(ValueError, match="granularity 'packet'"):
        mon.configure(arn=True, granularity="packet")
    assert mon.cfg == before


def test_arn_ports_follow_the_routing_state():
    """The ports whose congestion matters are worked out again when the programmer's
    routing state changes (they were cached once and never refreshed)."""
    mon = _monitor()
    p = mon.p

    def targets():
        return {(iface.name, gid) for node, iface, t in mon._arn_ports() if node.name == "leaf1"
                for gid, _ in t}

    assert not targets()          # nobody routes through leaf1 what leaf1's groups carry
    leaf1 = p.spec.node("leaf1")
    # leaf1's own segment over a new group: the spines route it through leaf1
    gid = p._group("leaf1", ("up1",), {i.name: i for i in leaf1.interfaces})
    p.routing.add_prefix(gid, p.spec.segments[0])
    assert ("up1", gid) in targets()


def test_learned_host_routes_follow_the_controllers_next_hop_rule():
    """A host learned where the lab put it adds no route: the leaf's planned /32 and every
    other switch's route to its segment already lead there (a 16,384-GPU lab would have
    installed 6.3 M of them). One that turns up elsewhere becomes a /32 on the switches
    whose routes do not lead to it, over the controller's next hops towards its leaf."""
    p = programmed("dual-plane")
    leaf = p.spec.node("p0-leaf1-r1")
    spine = p.spec.node("p0-spine1")
    before = {sw: dict(t) for sw, t in p.dp.route_table.items()}
    assert p.install_host_route(leaf, leaf.interface("down2"), "10.0.1.3") == []
    assert p.dp.route_table == before
    segment = next(r for r in p.spec.routes[spine.name] if r.prefix == "10.0.1.0/24")
    assert p.routing.members[p.dp.lookup_route(spine.switch_id, "10.0.1.3")] == segment.nexthops

    # the same host on another port of its leaf: only the leaf's /32 changes
    assert p.install_host_route(leaf, leaf.interface("down3"), "10.0.1.3") == [leaf.name]
    assert p.routing.members[p.dp.lookup_route(leaf.switch_id, "10.0.1.3")] == ["down3"]

    # ... on a leaf of another segment of its plane: the spines (their segment route leads
    # to p0-leaf1-r1) and p0-leaf1-r1 (its /32 from before) need one; the other leaves go up
    # to either spine for both leaves alike; plane 1 is untouched
    other = p.spec.node("p0-leaf1-r2")
    done = p.install_host_route(other, other.interface("down1"), "10.0.1.3")
    assert done[0] == other.name
    assert set(done) == {other.name, leaf.name, "p0-spine1", "p0-spine2"}
    up = [i.name for i in spine.interfaces if i.peer_node == other.name]
    assert p.routing.members[p.dp.lookup_route(leaf.switch_id, "10.0.1.3")] == \
        [i.name for i in leaf.interfaces if i.name.startswith("up")]
    assert p.routing.members[p.dp.lookup_route(spine.switch_id, "10.0.1.3")] == up
    assert all(p.dp.route_table[n.switch_id] == before[n.switch_id]
               for n in p.spec.switches if n.name.startswith("p1"))


def test_counters_verb_shows_the_lab_wide_verdicts_and_drops(monkeypatch, capsys):
    """`railab counters` shows every XDP verdict and the drops by reason of the whole lab:
    the data path counted them on every packet and no command showed them (a frame from
    an unknown port is dropped before any port owns it, so only this table counts it)."""
    from dataplane.cli import counters as counters_verb

    p = programmed()
    p.dp.drop_counters = lambda: {**{name: 0 for name in abi.DROP_REASONS.values()}, "unknown_port": 7}
    p.dp.verdict_counters = lambda: {name: {"packets": 0, "bytes": 0} for name in abi.XDP_ACTIONS.values()} | \
        {"drop": {"packets": 7, "bytes": 420}}
    snap = proto.CounterSnapshot.from_wire(p.counters())
    monkeypatch.setattr(counters_verb, "single_lab", lambda lab: "unitlab")
    monkeypatch.setattr(counters_verb, "load_lab", lambda lab: SimpleNamespace(spec=p.spec))
    monkeypatch.setattr(counters_verb.client, "counters", lambda lab, switch=None: snap)
    monkeypatch.setenv("COLUMNS", "200")
    args = SimpleNamespace(lab=None, switch=None, json=False, links=False, flows=False)
    assert counters_verb.run(args) == 0
    out = capsys.readouterr().out
    rows = {cells[0]: cells[1:] for line in out.splitlines()
            if (cells := [c.strip() for c in line.strip()[1:-1].split("│")]) and len(cells) == 3}
    assert rows["drop: unknown_port"][0] == "7"
    assert rows["drop"] == ["7", "420"]


def test_arn_path_dataplane_programs_the_switches_and_silences_the_agent():
    """arn_path dataplane: the data plane makes and consumes notices (held until a RESTORE,
    switch-switch ports with their link addresses), the monitor sends no link-down
    WITHDRAW itself, only the RESTORE when the prefix is back; back to agent: all off
    again. An unknown path changes nothing."""
    mon = _monitor()
    p = mon.p
    before = dict(mon.cfg)
    with pytest.raises(ValueError, match="arn_path 'kernel'"):
        mon.configure(arn_path="kernel")
    assert mon.cfg == before and not hasattr(p.dp, "notices")
    mon.configure(arn_path="dataplane")
    # link-down exclusions hold until the agent's RESTORE; notices at most one per interval
    assert p.dp.notices["generate"] and p.dp.notices["consume"] and p.dp.notices["hold_ms"] == 0
    assert p.dp.notices["interval_ns"] >= 1_000_000
    assert p.dp.notices["watch"], "the switches watch their own links"
    for node in p.spec.switches:
        for iface in node.interfaces:
            port = p.dp.notice_ports[iface.ifindex]
            to_switch = p.spec.node(iface.peer_node).role != "host"
            assert port["fabric"] == to_switch, iface.name
            if to_switch:
                far = p.spec.node(iface.peer_node).interface(iface.peer_if)
                assert port["src"] == iface.address and port["dst"] == far.address
                # parallel links to one neighbour: a notice on any of them concerns all
                assert port["peer_switch"] == p.spec.node(iface.peer_node).switch_id
    spine1 = p.spec.node("spine1")
    gid = p.routing.group_ids("spine1")[0]
    for ifindex, _ in p.dp.groups[gid].members:
        mon.port_event(spine1, p.spec.port(ifindex)[1], False)
    assert not mon.udp["spine1"].sent and mon.withdrawn        # the data plane withdraws
    for ifindex, _ in p.dp.groups[gid].members:
        mon.port_event(spine1, p.spec.port(ifindex)[1], True)
    restores = [msg for msg, _ in mon.udp["spine1"].sent]
    assert restores and all(n.type == T_RESTORE for n in restores)   # the agent restores
    mon.configure(arn_path="agent")
    assert not p.dp.notices["generate"] and not p.dp.notices["consume"] and not p.dp.notices["watch"]
    assert p.dp.exclusions_cleared       # nothing would RESTORE what the data plane excludes
    assert not any(v["fabric"] for v in p.dp.notice_ports.values())


def test_a_repair_restores_upstream_only_once_both_ends_of_the_link_are_up(monkeypatch):
    """release() of a repaired link, spine end first: the RESTORE leaves after the leaf's
    end is up too. Sent with the first end, the data plane's upstream (which acts on it
    within microseconds) sent into a link whose far end still dropped as port_down."""
    from dataplane.agent import failover
    mon = _monitor()
    p = mon.p
    mon.configure(arn_path="dataplane")
    spine1 = p.spec.node("spine1")
    gid = p.routing.group_ids("spine1")[0]
    ends = []
    for ifindex, _ in p.dp.groups[gid].members:
        node, iface = p.spec.port(ifindex)
        far = p.spec.node(iface.peer_node).interface(iface.peer_if)
        ends.append((ifindex, far.ifindex))
        mon.port_event(spine1, iface, False)
        mon.port_event(p.spec.node(iface.peer_node), far, False)
    assert mon.withdrawn
    monkeypatch.setattr(failover, "_link_states", lambda netns, idx: dict.fromkeys(idx, True))
    order = []
    set_port_states = p.dp.set_port_states
    monkeypatch.setattr(p.dp, "set_port_states",
                        lambda changes: order.append(("ports", changes)) or set_port_states(changes))
    sock = mon.udp["spine1"]
    monkeypatch.setattr(sock, "sendto", lambda data, addr: order.append(("notice", Notice.unpack(data).type)))
    spine_end, leaf_end = ends[0]
    mon.release([spine_end, leaf_end])
    assert order[0] == ("ports", [(spine_end, True), (leaf_end, True)]), "both ends as one change"
    assert ("notice", T_RESTORE) in order[1:] and not mon.withdrawn


def test_notices_the_data_plane_consumed_are_left_alone_by_the_agent():
    from dataplane.agent import arnpath
    mon = _monitor()
    wire = Notice(T_WITHDRAW, 1, 1, 7, 0, "10.0.1.0/24", hold_ms=5).pack()
    flows = Notice(T_WITHDRAW, R_UTIL, 1, 7, 0, "10.0.1.0/24", hold_ms=5,
                   flows=[("10.0.0.2", "10.0.1.2", 1, 2, 17)]).pack()
    assert not arnpath.consumed_below(mon.cfg, wire)           # agent path: the agent's
    mon.configure(arn_path="dataplane", arn_capture=True)
    assert mon.p.dp.notices["pass_consumed"]
    assert arnpath.consumed_below(mon.cfg, wire)
    assert not arnpath.consumed_below(mon.cfg, flows)          # flow lists stay the agent's


def test_a_data_plane_repair_restores_every_route_it_may_have_withdrawn_over_every_link():
    """The switch's program withdraws the route its packet matched (a learned /32 inside
    the prefix, say) out of the port the packet came in on, and the upstream lifts only
    that: the RESTORE goes for the prefix and each more specific route of the group, over
    every live link to each upstream, addressed to that link's far end."""
    mon = _monitor()
    p = mon.p
    mon.configure(arn_path="dataplane")
    spine1 = p.spec.node("spine1")
    gid = p.routing.group_ids("spine1")[0]
    prefix = next(pf for g, pf in p.routing.group_prefixes("spine1") if g == gid)
    host = str(next(iter(ipaddress.IPv4Network(prefix).hosts())))
    p.dp.add_route(spine1.switch_id, f"{host}/32", gid)          # learned, inside the prefix
    for ifindex, _ in p.dp.groups[gid].members:
        mon.port_event(spine1, p.spec.port(ifindex)[1], False)
    for ifindex, _ in p.dp.groups[gid].members:
        mon.port_event(spine1, p.spec.port(ifindex)[1], True)
    sent = mon.udp["spine1"].sent
    links = mon.notices.upstream(spine1, prefix, every_link=True)
    assert links
    for named in (prefix, f"{host}/32"):
        to = sorted(addr for msg, addr in sent if msg.prefix == named and msg.type == T_RESTORE)
        assert len(to) == len(links), (named, to)
        assert len(set(to)) == len(to)                         # one per link, each its own far end
