"""railab ui's request checks (pure), its per-tick computation on synthetic counters, and the
server's guard (token, read-only, bad bodies) against a lab recorded in a temporary state
directory with no agent: a refused write never reaches the lab."""
from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dataplane.agent.protocol import (LOAD_FIELDS, CounterSnapshot, GroupCounters, PortCounters,
                                      SwitchCounters, load_row)
from dataplane.lab.ports import compute_rows
from dataplane.runtime import state
from dataplane.runtime.labspec import build
from dataplane.topology.clab import read
from dataplane.ui import live, runs, server
from dataplane.ui.layout import layout
from dataplane.ui.validate import BadRequest, fault_request, lb_request, run_request

LABS = Path(__file__).resolve().parents[2] / "labs"


@pytest.fixture(scope="module")
def spec():
    topo = read(LABS / "dual-plane" / "dual-plane.clab.yml")
    topo.name = "ui-unit"
    return build(topo)


def test_lb_request(spec):
    assert lb_request({"mode": "spray-rr", "role": "leaf"}, spec) == {"mode": "spray-rr", "role": "leaf"}
    assert lb_request({"mode": "flowlet", "switch": "p0-spine1"}, spec) == {"mode": "flowlet", "switch": "p0-spine1"}
    for body, words in [({"mode": "spray-rr"}, "role or switch"),
                        ({"mode": "nope", "role": "leaf"}, "not one of"),
                        ({"mode": "ecmp", "role": "core"}, "no 'core' switches"),
                        ({"mode": "ecmp", "switch": "srv1"}, "no switch 'srv1'"),
                        ({"mode": "ecmp", "role": "leaf", "switch": "p0-spine1"}, "either"),
                        ({"mode": "ecmp", "role": "leaf", "extra": 1}, "unknown field extra"),
                        ([1], "JSON object"), ({"mode": 3, "role": "leaf"}, "non-empty string")]:
        with pytest.raises(BadRequest, match=words) as err:
            lb_request(body, spec)
        assert err.value.status == 400


def test_fault_request(spec):
    assert fault_request({"fault": "link-down", "a": "p0-spine1:down1"}, spec) == \
        {"fault": "link-down", "a": "p0-spine1:down1", "b": "p0-leaf1-r0:up1"}
    assert fault_request({"fault": "switch-up", "switch": "p1-spine2"}, spec) == {"fault": "switch-up", "switch": "p1-spine2"}
    assert fault_request({"fault": "plane-down", "plane": 1}, spec) == {"fault": "plane-down", "plane": 1}
    assert fault_request({"fault": "clear"}, spec) == {"fault": "clear"}
    for body, words in [({"fault": "link-down", "a": "p0-spine1:down99"}, "no interface"),
                        ({"fault": "link-down", "a": "p0-spine1:down1", "b": "p0-leaf1-r1:up1"}, "linked to"),
                        ({"fault": "link-down"}, "takes a"),
                        ({"fault": "switch-down", "switch": "srv1"}, "no switch"),
                        ({"fault": "switch-down", "switch": "p0-spine1", "a": "x:y"}, "takes switch"),
                        ({"fault": "plane-down", "plane": 2}, "not one of"),
                        ({"fault": "plane-down", "plane": True}, "not one of"),
                        ({"fault": "degrade", "port": "x"}, "unknown field port"),
                        ({"fault": "degrade"}, "not one of"),
                        ({"fault": "clear", "plane": 0}, "takes no other field")]:
        with pytest.raises(BadRequest, match=words):
            fault_request(body, spec)


def test_run_request():
    files = {"classroom.yml": Path("experiments/classroom.yml")}
    assert run_request({"experiment": "classroom.yml"}, files) == "classroom.yml"
    for body in ({"experiment": "../etc/passwd"}, {"experiment": "/tmp/x.yml"}, {}, {"file": "classroom.yml"}):
        with pytest.raises(BadRequest):
            run_request(body, files)


def test_experiment_files_are_the_shipped_ones():
    names = runs.experiment_files(LABS.parent / "experiments")
    assert "classroom.yml" in names and "ecmp-vs-spray.yml" in names


def _snapshot(spec, t_bytes: dict) -> CounterSnapshot:
    """Every switch port with tx/rx bytes from t_bytes[(switch, port)] = (tx, rx)."""
    switches = {}
    for node in spec.switches:
        ports = {i.name: PortCounters(tx_bytes=t_bytes.get((node.name, i.name), (0, 0))[0],
                                      rx_bytes=t_bytes.get((node.name, i.name), (0, 0))[1],
                                      speed_bps=10_000_000, nominal_speed_bps=400_000_000_000)
                 for i in node.interfaces}
        switches[node.name] = SwitchCounters(ports, {})
    return CounterSnapshot(switches)


def _load(snapshot: CounterSnapshot, down: set = frozenset()) -> dict:
    """The port_load reply the agent sends for these counters (protocol.load_row)."""
    return {"fields": list(LOAD_FIELDS), "switches": {
        name: {"ports": {p: load_row(c, (name, p) not in down) for p, c in sw.ports.items()},
               "modes": sorted({g.mode for g in sw.groups.values()})}
        for name, sw in snapshot.switches.items()}}


def _frame(links, before, after, down=frozenset(), dt=1.0):
    return live.named(links, live.frame(live.plan(links), _load(before), _load(after, down), stamp=0.0, dt=dt))


def test_frame_reads_each_direction_where_it_is_sent(spec):
    links = layout(spec)["links"]
    before = _snapshot(spec, {})
    # leaf sends 500 kB down to srv1 in 1 s (4 Mb/s of 10 Mb/s); srv1 sends 250 kB up
    # (read at the leaf's rx); the leaf's uplink to the spine sends 1.25 MB (10 Mb/s: full)
    after = _snapshot(spec, {("p0-leaf1-r0", "down1"): (500_000, 250_000),
                             ("p0-leaf1-r0", "up1"): (1_250_000, 0)})
    out = _frame(links, before, after, down={("p0-spine1", "down1")})
    host_link = out["links"]["p0-leaf1-r0:down1>srv1:nic0a"]
    assert host_link == {"down_util": 0.4, "up_util": 0.2, "down_bps": 4_000_000, "up_bps": 2_000_000, "state": "up"}
    uplink = out["links"]["p0-spine1:down1>p0-leaf1-r0:up1"]
    assert uplink["up_util"] == 1.0 and uplink["down_util"] == 0.0 and uplink["state"] == "down"
    idle = [l for i, l in out["links"].items() if i not in ("p0-leaf1-r0:down1>srv1:nic0a", "p0-spine1:down1>p0-leaf1-r0:up1")]
    assert len(idle) == len(links) - 2 and all(l["down_bps"] == l["up_bps"] == 0 for l in idle)
    assert all(l["state"] == "up" for l in idle)


def test_a_port_pausing_its_neighbour_draws_its_link_paused(spec):
    links = layout(spec)["links"]
    before, after = _snapshot(spec, {}), _snapshot(spec, {})
    # PFC: the leaf's host port keeps srv1 paused (the agent's pfc counters of that port)
    after.switches["p0-leaf1-r0"].ports["down1"].pfc = {"pausing": True, "paused_ns": 0}
    # and a spine port kept its leaf paused for part of the interval, not any more
    before.switches["p0-spine1"].ports["down2"].pfc = {"pausing": False, "paused_ns": 10**9}
    after.switches["p0-spine1"].ports["down2"].pfc = {"pausing": False, "paused_ns": 10**9 + 2000}
    out = _frame(links, before, after)
    assert out["links"]["p0-leaf1-r0:down1>srv1:nic0a"]["state"] == "paused"
    assert out["links"]["p0-spine1:down2>p0-leaf1-r0:up2"]["state"] == "paused"
    assert sum(l["state"] == "paused" for l in out["links"].values()) == 2


def test_the_view_shows_railab_tops_numbers(spec):
    """Every link direction and switch total of a frame is what `railab top` computes from
    the full counters of the same two reads: the port_load reply loses nothing drawn."""
    rng = random.Random(16)
    links = layout(spec)["links"]
    before, after = _snapshot(spec, {}), _snapshot(spec, {})
    for (_, _, c0), (_, _, c1) in zip(before.ports(), after.ports()):
        c0.tx_bytes, c0.rx_bytes = rng.randrange(10**9), rng.randrange(10**9)
        c1.tx_bytes, c1.rx_bytes = c0.tx_bytes + rng.randrange(10**6), c0.rx_bytes + rng.randrange(10**6)
        c0.ecn_marked, c1.ecn_marked = 5, 5 + rng.randrange(50)
        c0.drops = {"queue_full": 3, "no_route": 1}
        c1.drops = {"queue_full": 3 + rng.randrange(9), "no_route": 1 + rng.randrange(2), "port_down": 0}
        c1.queue_bytes = rng.randrange(30_000)
        c1.speed_bps = rng.choice([0, 10_000_000])        # 0: no port model, util against the nominal
    after.switches["p0-leaf1-r0"].groups = {"7": GroupCounters("spray-rr", [], [])}
    dt = 0.5
    out = _frame(links, before, after, dt=dt)
    rows = {(r.switch, r.port): r for r in compute_rows(before, after, dt)}
    for link in links:
        shown = out["links"][link["id"]]
        for sender, receiver, util, bps in ((link["a"], link["b"], "down_util", "down_bps"),
                                            (link["b"], link["a"], "up_util", "up_bps")):
            row = rows.get(tuple(sender.split(":", 1)))
            rate = row.tx_bps if row else rows[tuple(receiver.split(":", 1))].rx_bps
            row = row or rows[tuple(receiver.split(":", 1))]
            assert shown[bps] == round(rate)
            assert shown[util] == round(rate / (row.speed_bps or row.nominal_bps), 4)
    for name in {r.switch for r in rows.values()}:
        mine = [r for r in rows.values() if r.switch == name]
        s = out["switches"][name]
        assert s["queue_bytes"] == sum(r.queue_bytes or 0 for r in mine)
        assert s["drops_per_s"] == round(sum(r.drops_per_s for r in mine), 1)
        assert s["ecn_per_s"] == round(sum(r.ecn_per_s for r in mine), 1)
        assert s["drops"] == sum(r.drops_total for r in mine)
        assert s["ecn"] == sum(after.port(name, r.port).ecn_marked for r in mine)
    assert out["switches"]["p0-leaf1-r0"]["modes"] == ["spray-rr"]
    assert any(s["drops_per_s"] for s in out["switches"].values())


# ---------------------------------------------------------------- the server's guard
@pytest.fixture
def recorded_lab(tmp_path, monkeypatch, spec):
    monkeypatch.setattr(state, "STATE_ROOT", tmp_path)
    state.LabState(spec, "up").save()
    return spec.name


def _call(settings, method, path, **kw):
    async def go():
        async with TestClient(TestServer(server.make_app(settings))) as client:
            reply = await client.request(method, path, **kw)
            return reply.status, await reply.json()
    return asyncio.run(go())


def test_write_needs_the_token(recorded_lab):
    settings = server.Settings(token="sekrit")
    body = json.dumps({"mode": "spray-rr", "role": "leaf"})
    status, reply = _call(settings, "POST", f"/api/labs/{recorded_lab}/lb", data=body)
    assert status == 403 and "token" in reply["error"]
    status, reply = _call(settings, "POST", f"/api/labs/{recorded_lab}/lb", data=body,
                          headers={server.TOKEN_HEADER: "wrong"})
    assert status == 403
    # with the token the request passes the guard and reaches the lab (which has no agent here)
    status, reply = _call(settings, "POST", f"/api/labs/{recorded_lab}/lb?token=sekrit", data=body)
    assert status == 400 and "agent is not running" in reply["error"]


def test_read_only_refuses_every_write(recorded_lab):
    settings = server.Settings(token="sekrit", read_only=True)
    for path in ("lb", "fault", "run", "run/stop"):
        status, reply = _call(settings, "POST", f"/api/labs/{recorded_lab}/{path}", data="{}",
                              headers={server.TOKEN_HEADER: "sekrit"})
        assert status == 403 and "read-only" in reply["error"]


def test_bad_requests_are_json_4xx(recorded_lab):
    settings = server.Settings(token="t")
    h = {server.TOKEN_HEADER: "t"}
    assert _call(settings, "POST", f"/api/labs/{recorded_lab}/lb", data="not json", headers=h) == \
        (400, {"error": "the body is not JSON"})
    status, reply = _call(settings, "POST", f"/api/labs/{recorded_lab}/fault", data='{"fault": "melt"}', headers=h)
    assert status == 400 and "not one of" in reply["error"]
    status, reply = _call(settings, "GET", "/api/labs/no-such-lab/layout")
    assert status == 404 and "not deployed" in reply["error"]
    status, reply = _call(settings, "GET", "/api/labs/bad.name/layout")
    assert status == 404
    status, reply = _call(settings, "GET", f"/api/labs/{recorded_lab}/switches/srv1")
    assert status == 404 and "no switch" in reply["error"]
    status, reply = _call(settings, "GET", f"/api/labs/{recorded_lab}/layout")
    assert status == 200 and len(reply["links"]) == 64


def test_foreign_host_names_are_refused(recorded_lab):
    settings = server.Settings(token="t", allowed_hosts=server.loopback_names("127.0.0.1"))
    status, reply = _call(settings, "GET", "/api/labs", headers={"Host": "attacker.example:8080"})
    assert status == 403
    assert server.loopback_names("0.0.0.0") is None


def test_another_sites_page_cannot_write_or_watch(recorded_lab):
    """A page of another site driving the user's browser: its writes are refused even with
    the token (which a link could carry), and so is its WebSocket; the same origin passes."""
    settings = server.Settings(token="t")
    body = json.dumps({"mode": "spray-rr", "role": "leaf"})
    path = f"/api/labs/{recorded_lab}/lb?token=t"
    for headers in ({"Origin": "http://attacker.example"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Sec-Fetch-Site": "same-site"}):
        status, reply = _call(settings, "POST", path, data=body, headers=headers)
        assert status == 403 and "another site" in reply["error"], headers
    status, reply = _call(settings, "GET", f"/api/labs/{recorded_lab}/ws",
                          headers={"Origin": "http://attacker.example", "Upgrade": "websocket",
                                   "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                                   "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert status == 403 and "another site" in reply["error"]

    async def same_origin():
        async with TestClient(TestServer(server.make_app(settings))) as client:
            origin = f"http://{client.host}:{client.port}"
            reply = await client.post(path, data=body, headers={"Origin": origin, "Sec-Fetch-Site": "same-origin"})
            return reply.status, await reply.json()
    status, reply = asyncio.run(same_origin())
    assert status == 400 and "agent is not running" in reply["error"]     # past the guard


def test_serving_beyond_loopback_must_be_meant():
    import subprocess, sys   # why: only this test runs the command line
    cmd = [sys.executable, "-m", "dataplane.cli.main", "ui", "--bind", "0.0.0.0", "--port", "0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "railab: error: --bind 0.0.0.0: not a loopback address; other machines could reach the "
        "labs' controls: add --allow-remote to mean it"]
