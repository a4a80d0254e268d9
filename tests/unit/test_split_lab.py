"""Switching across machines (`railab deploy --hosts`) without a lab: the parts' files and
specs, the stitches' names and VNIs, the refusals, the token on the agents' TCP port, and
how the agents' replies merge into one."""
from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from dataplane.agent import netserve, remote
from dataplane.errors import RuntimeStateError
from dataplane.runtime import hostsplit as hs
from dataplane.runtime import labspec, splitstate
from dataplane.topology import clab, multihost

ROOT = Path(__file__).resolve().parents[2]


def split(hosts: str = "a=192.0.2.1,b=192.0.2.2@eth1", runtime: str = "containerlab", dataplane: str = "xdp"):
    topo = clab.read(ROOT / "labs" / "rail-optimized" / "rail-optimized.clab.yml")
    parsed = multihost.parse_hosts(hosts)
    spec = labspec.build(topo, "lab.clab.yml", runtime=runtime, dataplane=dataplane)
    return spec, parsed, multihost.place(topo, parsed)


def machines(parsed, mtu: int = 1550):
    return [hs.Machine(h, f"ns-{h.name}", h.dev or "under0", mtu, i) for i, h in enumerate(parsed)]


def test_host_devices_are_parsed():
    a, b = multihost.parse_hosts("a=192.0.2.1,b=192.0.2.2@eth1")
    assert (a.dev, b.dev, b.address) == (None, "eth1", "192.0.2.2")


def test_both_ends_of_a_cut_link_share_a_vni_and_containerlab_can_name_them():
    spec, _, where = split()
    cuts = hs.stitches(spec, where)
    by_vni: dict[int, list] = {}
    for cut in cuts:
        by_vni.setdefault(cut.vni, []).append(cut)
        assert all(len(name) <= 15 for name in cut.host_ends)
    assert all(len(ends) == 2 and where[ends[0].node] != where[ends[1].node] for ends in by_vni.values())
    assert len(by_vni) == sum(1 for n, _, p, _ in spec.links() if where[n.name] != where[p.name])
    assert min(by_vni) == hs.first_vni(spec.name) and max(by_vni) < 1 << 24
    assert hs.first_vni(spec.name) != hs.first_vni(spec.name + "x")


def test_a_node_name_too_long_for_containerlabs_stitch_names_is_refused(tmp_path):
    text = (ROOT / "labs" / "rail-optimized" / "rail-optimized.clab.yml").read_text()
    path = tmp_path / "long.clab.yml"
    path.write_text(text.replace("leaf1-r0", "leaf1-rail-zero"))
    topo = clab.read(path)
    parsed = multihost.parse_hosts("a=192.0.2.1,b=192.0.2.2")
    spec = labspec.build(topo, str(path), runtime="containerlab")
    with pytest.raises(RuntimeStateError, match="leaf1-rail-zero: its name is too long"):
        hs.stitches(spec, multihost.place(topo, parsed))


def test_each_part_has_its_nodes_its_links_and_a_stitch_per_cut_end():
    spec, parsed, where = split()
    cuts = hs.stitches(spec, where)
    address = {h.name: h.address for h in parsed}
    for machine in machines(parsed):
        doc = hs.part_topology(spec, where, machine, address, cuts)
        here = machine.host.name
        assert doc["name"] == f"{spec.name}-{here}"
        assert set(doc["topology"]["nodes"]) == {n for n, h in where.items() if h == here}
        assert {n["labels"]["railab.lab"] for n in doc["topology"]["nodes"].values()} == {doc["name"]}
        stitches = [l for l in doc["topology"]["links"] if l.get("type") == "vxlan-stitch"]
        assert len(stitches) == sum(1 for c in cuts if where[c.node] == here)
        other = next(h.address for h in parsed if h.name != here)
        assert {s["remote"] for s in stitches} == {other}
        assert {s["mtu"] for s in stitches} == {1500}
        assert {s.get("parent-interface") for s in stitches} == {machine.host.dev}
        for link in doc["topology"]["links"]:
            if link.get("type") == "veth":
                assert all(where[e["node"]] == here for e in link["endpoints"])
        assert doc["mgmt"]["bridge"] == f"rlmgmt{machine.number}"


def test_a_part_spec_runs_only_its_switches_but_knows_the_whole_lab():
    spec, parsed, where = split()
    local = [n for n, h in where.items() if h == "a"]
    part = hs.part_spec(spec, "lab-a", local)
    assert {n.name for n in part.switches} == {n for n in local if spec.node(n).role != "host"}
    assert len(part.nodes) == len(spec.nodes) and part.routes == spec.routes
    again = labspec.LabSpec.from_json(json.loads(json.dumps(part.to_json())))
    assert again.local == sorted(local) and {n.name for n in again.switches} == {n.name for n in part.switches}
    remote_switch = next(n for n in spec.switches if where[n.name] != "a")
    assert part.find_port(remote_switch.interfaces[0].ifindex) is None
    served = {h.name for h in part.hosts if part.serves(h)}
    assert served == {h.name for h in spec.hosts}      # every server has a rail leaf on a


@pytest.mark.parametrize("change, message", [
    ({"dataplane": "xdp-generic"}, "--dataplane xdp-generic cannot forward across machines"),
    ({"runtime": "netns"}, "runs with --runtime containerlab"),
])
def test_what_cannot_run_across_machines_is_refused(change, message):
    spec, parsed, _ = split(**change)
    with pytest.raises(RuntimeStateError, match=message):
        hs.check(spec, machines(parsed))


class FakeMachine(hs.Machine):
    def __init__(self, missing: str, mtu: int = 1550):
        super().__init__(multihost.Host("a", "192.0.2.1"), "ns-a", "under0", mtu, 0)
        self.missing = missing

    def run(self, argv, timeout=900):
        code = 1 if self.missing in argv else 0
        return subprocess.CompletedProcess(argv, code, "", "")


@pytest.mark.parametrize("machine, message", [
    (FakeMachine("none", mtu=1500), "host a \\(under0\\): underlay MTU 1500 is too small"),
    (FakeMachine("containerlab"), "host a: containerlab does not run there"),
    (FakeMachine("inspect"), "host a: railab's node image .* is not there"),
])
def test_a_machine_that_cannot_take_its_part_is_refused_in_one_line(machine, message):
    with pytest.raises(RuntimeStateError, match=message) as err:
        hs.check_machine(machine)
    assert "\n" not in str(err.value)


def test_an_address_on_no_namespace_here_is_refused():
    with pytest.raises(RuntimeStateError, match="host z: no interface .* has 192.0.2.99"):
        hs.locate(multihost.Host("z", "192.0.2.99"), 0, candidates=[None])


class Control:
    def dispatch(self, request):
        return {"op": request.op}


@pytest.fixture
def token_server():
    server = netserve.TokenServer(("127.0.0.1", 0), "t" * 32, Control())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_the_agents_tcp_port_answers_only_with_the_token(token_server):
    good = remote.ask("127.0.0.1", token_server, "t" * 32, {"op": "lb_show"})
    assert good == {"ok": True, "result": {"op": "lb_show"}}
    for token in ("x" * 32, ""):
        bad = remote.ask("127.0.0.1", token_server, token, {"op": "lb_show"})
        assert bad == {"ok": False, "error": netserve.REFUSED}
    with socket.create_connection(("127.0.0.1", token_server), timeout=5) as sock:
        sock.sendall(b'{"op": "lb_show"}\n')          # no token at all
        assert json.loads(sock.makefile().readline())["ok"] is False


def test_an_agent_needs_a_real_token():
    with pytest.raises(ValueError, match="16 characters"):
        netserve.TokenServer(("127.0.0.1", 0), "short", Control())


def test_replies_merge_switches_by_union_tallies_by_sum_settings_as_they_are():
    a = {"switches": {"leaf1": {"ports": {}}}, "verdicts": {"tx": {"packets": 3}}, "drops": {"ttl": 1},
         "t_ns": 5, "clock": {"scale": 5e-5}, "port_model": {"ecn_pmax": 1.0}}
    b = {"switches": {"spine1": {"ports": {}}}, "verdicts": {"tx": {"packets": 4}}, "drops": {"ttl": 2},
         "t_ns": 9, "clock": {"scale": 5e-5}, "port_model": {"ecn_pmax": 1.0}}
    merged = remote.merge([a, b])
    assert set(merged["switches"]) == {"leaf1", "spine1"}
    assert merged["verdicts"] == {"tx": {"packets": 7}} and merged["drops"] == {"ttl": 3}
    assert merged["t_ns"] == 9 and merged["clock"] == {"scale": 5e-5}
    assert merged["port_model"] == {"ecn_pmax": 1.0}
    assert remote.merge([[1], [2, 3]]) == [1, 2, 3]


PARTS = [{"host": "a", "switches": {"leaf1": "leaf", "spine1": "spine"}, "ports": [100, 101]},
         {"host": "b", "switches": {"leaf2": "leaf"}, "ports": [102]}]


@pytest.mark.parametrize("wire, hosts", [
    ({"op": "counters", "switch": "leaf2"}, ["b"]),
    ({"op": "lb_set", "role": "spine"}, ["a"]),
    ({"op": "lb_set", "role": "leaf"}, ["a", "b"]),
    ({"op": "hold_ports", "ifindexes": [102]}, ["b"]),
    ({"op": "counters"}, ["a", "b"]),
])
def test_a_request_goes_to_the_machines_it_concerns(wire, hosts):
    assert [p["host"] for p, _ in remote.addressed(PARTS, wire)] == hosts


def test_an_lb_restore_gives_each_machine_its_switches():
    wire = {"op": "lb_restore", "snapshot": {"switches": {"leaf1": 1, "spine1": 2, "leaf2": 3}}}
    sent = {p["host"]: w["snapshot"]["switches"] for p, w in remote.addressed(PARTS, wire)}
    assert sent == {"a": {"leaf1": 1, "spine1": 2}, "b": {"leaf2": 3}}


def test_a_part_whose_agent_is_not_up_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(splitstate.state, "STATE_ROOT", tmp_path)
    splitstate.save("lab", {"parts": [{"host": "a", "switches": {"s": "leaf"}, "port": 1},
                                      {"host": "b", "switches": {"t": "leaf"}, "port": None},
                                      {"host": "c", "switches": {}, "port": None}]})
    with pytest.raises(RuntimeStateError, match="agent on host b is not up"):
        splitstate.split_parts("lab")
    assert oct((tmp_path / "lab" / "hosts.json").stat().st_mode & 0o777) == "0o600"
    assert splitstate.split_parts("other") == []


def test_a_run_on_a_split_lab_prints_each_machines_counters():
    from dataplane.cli.run import _machine_lines     # the CLI module, only for this test
    results = {"modes": {"ecmp": {"runs": [{"switches": {"machines": {
        "a": {"tx_packets": 1200, "drops": 0}, "b": {"tx_packets": 900, "drops": 3}}}}]},
        "spray": {"runs": [{"switches": {}}]}}}
    assert _machine_lines(results) == ["ecmp per machine (switch packets sent, drops): a 1,200, 0, b 900, 3"]


def test_a_command_without_a_lab_name_means_the_split_lab_not_its_parts(monkeypatch):
    """Parts (`<lab>-<host>`) have state of their own; naming no lab still means the lab."""
    from dataplane.cli import common
    marks = {"big-a": {"lab": "big"}, "big-b": {"lab": "big"}, "orphan-a": {"lab": "orphan"}}
    monkeypatch.setattr(common.state, "known_labs", lambda: ["big", "big-a", "big-b"])
    monkeypatch.setattr(common.splitstate, "part_mark", marks.get)
    assert common.single_lab(None) == "big"
    # a part whose lab is gone is left to name (destroy cleans it up by that name)
    monkeypatch.setattr(common.state, "known_labs", lambda: ["orphan-a"])
    assert common.single_lab(None) == "orphan-a"
    monkeypatch.setattr(common.state, "known_labs", lambda: ["big", "big-a", "other"])
    with pytest.raises(common.RuntimeStateError, match="big, other"):
        common.single_lab(None)
