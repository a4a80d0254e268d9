"""railab's switches across machines: `railab deploy --runtime containerlab --hosts ...` of
the rail-optimized lab over two and three machines, each machine a network namespace of
this one joined by an underlay (dataplane/runtime/emulated.py), with containerlab and one agent
per machine. The CLI in the root namespace reaches the agents over the underlay with
the lab's token. Needs Docker, containerlab and railab's images (scripts/setup.sh)."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import yaml

from dataplane.agent import client, netserve, remote
from dataplane.lab import faults
from dataplane.runtime import containerlab, splitstate, state
from dataplane.runtime.emulated import emulated_machines, hosts_option

from .. import sweeper
from . import clabtools
from .clabtools import split_leftovers
from .conftest import ROOT, RAILAB, railab, shipped, unique_name

PAIRS = 448         # rail-optimized: 32 NIC ports on 8 servers


@pytest.fixture(autouse=True)
def containerlab_ready():
    clabtools.require([containerlab.node_image()])


def _deploy(lab: str, hosts: dict, *extra: str, check: bool = True):
    return railab("deploy", str(shipped("rail-optimized")), "--name", lab, "--runtime", "containerlab",
                  "--hosts", hosts_option(hosts), *extra, check=check, timeout=300)


def _member_packets(lab: str, ref: str) -> int:
    switch, port = ref.split(":")
    groups = client.counters(lab).switches[switch].groups.values()
    return sum(m.packets for g in groups for m in g.members if m.interface == port)


def _host_of(lab: str) -> dict[str, str]:
    return {n: p["host"] for p in splitstate.load(lab)["parts"] for n in p["nodes"]}


def _uplinks(lab: str, same_machine: bool) -> list[tuple[str, str]]:
    """Leaf-spine links (leaf end, spine end) within one machine, or between two."""
    spec = state.load(lab).spec
    host_of = _host_of(lab)
    return [(f"{n.name}:{i.name}", i.peer) for n in spec.switches if n.role == "leaf"
            for i in n.interfaces if i.peer_node.startswith("spine")
            and (host_of[n.name] == host_of[i.peer_node]) == same_machine]


def _cut_uplink(lab: str) -> tuple[str, str]:
    """A leaf-spine link between two machines: (leaf end, spine end)."""
    return _uplinks(lab, same_machine=False)[0]


def test_two_machines_probe_counters_token_failover_and_destroy():
    lab = unique_name("mh2")
    with emulated_machines(sweeper.machines_tag("t"), 2, subnet="192.168.81") as hosts:
        try:
            out = _deploy(lab, hosts).stdout
            assert "over 2 machines" in out
            leaf_end, spine_end = _cut_uplink(lab)
            before = {ref: _member_packets(lab, ref) for ref in (leaf_end, spine_end)}
            probe = railab("probe", lab).stdout
            assert f"{PAIRS}/{PAIRS} NIC pairs ok" in probe
            # both machines' agents counted the probe across the cut link, each its own end
            assert all(_member_packets(lab, ref) > n for ref, n in before.items()), before
            # the agents' TCP ports take the lab's token and nothing else
            part = splitstate.load(lab)["parts"][0]
            assert remote.ask(part["address"], part["port"], part["token"], {"op": "lb_show"})["ok"]
            refused = remote.ask(part["address"], part["port"], "0" * 32, {"op": "lb_show"})
            assert refused == {"ok": False, "error": netserve.REFUSED}
            # a link-down on the cut link takes both machines' ends down; traffic fails over
            railab("fault", lab, "link-down", leaf_end, spine_end)
            states = client.request(lab, "port_states")
            assert not states[leaf_end.split(":")[0]][leaf_end.split(":")[1]]
            assert not states[spine_end.split(":")[0]][spine_end.split(":")[1]]
            down = {ref: _member_packets(lab, ref) for ref in (leaf_end, spine_end)}
            assert f"{PAIRS}/{PAIRS}" in railab("probe", lab).stdout
            assert {ref: _member_packets(lab, ref) for ref in down} == down
            railab("fault", lab, "link-up", leaf_end, spine_end)
            assert f"{PAIRS}/{PAIRS}" in railab("probe", lab).stdout
            # the uplinks of one machine's leaves to that machine's spines down: traffic
            # between those leaves goes out to another machine's spine and back, and still
            # every pair gets through
            machine = _host_of(lab)[leaf_end.split(":")[0]]
            for leaf, spine in _uplinks(lab, same_machine=True):
                if _host_of(lab)[leaf.split(":")[0]] == machine:
                    faults.link_down(lab, leaf, spine)
            assert f"{PAIRS}/{PAIRS}" in railab("probe", lab).stdout
            faults.clear(lab)
        finally:
            gone = railab("destroy", lab, check=False, timeout=300)
        # what destroy said, when it left something: a rare leftover here (one in many suites) has no other trace
        assert split_leftovers(lab, hosts) == [], (gone.returncode, gone.stderr[-2000:])


def test_three_machines_probe_and_a_run_with_counters_per_machine(tmp_path):
    lab = unique_name("mh3")
    experiment = yaml.safe_load((ROOT / "experiments" / "ecmp-vs-spray.yml").read_text())
    experiment.update(lab=str(shipped("rail-optimized")), duration="1s", modes=["ecmp", "spray-rr"],
                      workload=str(ROOT / "experiments" / experiment["workload"]))
    path = tmp_path / "exp.yml"
    path.write_text(yaml.safe_dump(experiment))
    with emulated_machines(sweeper.machines_tag("h"), 3, subnet="192.168.82") as hosts:
        try:
            assert "over 3 machines" in _deploy(lab, hosts).stdout
            assert f"{PAIRS}/{PAIRS} NIC pairs ok" in railab("probe", lab).stdout
            run = railab("run", str(path), "--no-plots", "--name", lab, "--output", str(tmp_path / "out"), timeout=120)
            assert "results:" in run.stdout and "ecmp per machine (switch packets sent, drops): a " in run.stdout
            results = next((tmp_path / "out").glob("*/results.json")).read_text()
            for mode in ("ecmp", "spray-rr"):
                machines = yaml.safe_load(results)["modes"][mode]["runs"][0]["switches"]["machines"]
                assert set(machines) == set(hosts)
                with_switches = [p["host"] for p in splitstate.load(lab)["parts"] if p["switches"]]
                assert len(with_switches) >= 2
                assert all(machines[h]["tx_packets"] > 1000 for h in with_switches), machines
        finally:
            gone = railab("destroy", lab, check=False, timeout=300)
        # what destroy said, when it left something: a rare leftover here (one in many suites) has no other trace
        assert split_leftovers(lab, hosts) == [], (gone.returncode, gone.stderr[-2000:])


def test_destroy_after_kill_9_of_the_deployer_leaves_nothing():
    lab = unique_name("mhk")
    with emulated_machines(sweeper.machines_tag("k"), 2, subnet="192.168.83") as hosts:
        deployer = subprocess.Popen([*RAILAB, "deploy", str(shipped("rail-optimized")), "--name", lab,
                                     "--runtime", "containerlab", "--hosts", hosts_option(hosts)],
                                    cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            # mid-deploy: containerlab has begun making containers on the machines
            while time.monotonic() < deadline and not clabtools.containers(f"{lab}-a"):
                time.sleep(0.2)
            assert deployer.poll() is None, "the deploy ended before it could be killed"
            deployer.send_signal(signal.SIGKILL)
            deployer.wait()
        finally:
            if deployer.poll() is None:
                deployer.kill()
                deployer.wait()
            gone = railab("destroy", lab, check=False, timeout=300)
        # what destroy said, when it left something: a rare leftover here (one in many suites) has no other trace
        assert split_leftovers(lab, hosts) == [], (gone.returncode, gone.stderr[-2000:])


def test_bad_hosts_are_refused_in_one_line_with_nothing_made():
    lab = unique_name("mhr")
    with emulated_machines(sweeper.machines_tag("r"), 2, subnet="192.168.84") as hosts, \
            emulated_machines(sweeper.machines_tag("s"), 2, mtu=1500, subnet="192.168.85") as small:
        a, b = (address for _, address in hosts.values())
        path = os.environ["PATH"].replace("/usr/local/bin", "/nonexistent")
        cases = [
            (["--hosts", f"a={a},b=192.0.2.77"], None, "host b: no interface of this machine"),
            (["--hosts", f"a={a},b={a}"], None, "hosts a and b have the same address"),
            (["--hosts", hosts_option(small)], None, "underlay MTU 1500 is too small"),
            (["--hosts", hosts_option(hosts), "--dataplane", "xdp-generic"], None,
             "--dataplane xdp-generic cannot forward across machines"),
            (["--hosts", hosts_option(hosts)], {"RAILAB_NODE_IMAGE": "railab-node:absent"},
             "railab's node image railab-node:absent is not there"),
            (["--hosts", hosts_option(hosts)], {"PATH": path}, "containerlab does not run there"),
        ]
        for args, env, message in cases:
            proc = railab("deploy", str(shipped("rail-optimized")), "--name", lab, "--runtime",
                          "containerlab", *args, check=False, env={**os.environ, **(env or {})})
            assert proc.returncode != 0, args
            assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
            assert "Traceback" not in proc.stderr
            assert split_leftovers(lab, hosts) == [] and split_leftovers(lab, small) == []
