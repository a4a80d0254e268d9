"""Whole labs on namespaces: deploy, probe every NIC pair through the XDP switches,
read the counters, destroy, and check nothing is left."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from dataplane.agent import client
from dataplane.kernel.netns import in_netns
from dataplane.lab.probe import run_probe
from dataplane.runtime import state
from dataplane.traffic import iperf

from .conftest import (RAILAB, ROOT, bpf_prog_exists, wait_for, leftovers, railab, shipped,
                       unique_name, xdp_prog_ids_in)

KINDS = ("clos2", "clos3", "rail-only", "rail-optimized", "dual-plane")
DATA = Path(__file__).parent / "data"


def _forwarded_by_xdp(spec) -> dict[str, int]:
    """Packets each switch forwarded, from the data plane's own group-member counters."""
    return {switch: sw.member_packets() for switch, sw in client.counters(spec.name).switches.items()}


def _read_sysctl(netns: str, key: str) -> str:
    with in_netns(netns):
        return Path("/proc/sys/" + key.replace(".", "/")).read_text().strip()


@pytest.mark.parametrize("kind", KINDS)
def test_shipped_lab_probes_clean_through_xdp(lab_factory, kind):
    spec = lab_factory(shipped(kind), prefix=kind[:4])
    for switch in spec.switches:
        assert _read_sysctl(switch.netns, "net.ipv4.ip_forward") == "0"
        assert xdp_prog_ids_in(switch.netns), f"{switch.name} has no XDP program attached"

    result = run_probe(spec)
    assert result.pairs > 0
    assert result.failed == [], result.failed[:5]
    assert result.ok == result.pairs

    forwarded = _forwarded_by_xdp(spec)
    leaves = [n.name for n in spec.switches if n.role == "leaf"]
    assert all(forwarded[leaf] > 0 for leaf in leaves), forwarded
    if kind != "rail-only":
        spines = [n.name for n in spec.switches if n.role == "spine"]
        assert sum(forwarded[s] for s in spines) > 0, forwarded


def test_foreign_srlinux_file_deploys_and_probes(lab_factory):
    spec = lab_factory(DATA / "srl-ls.clab.yml", prefix="srl")
    roles = {n.name: n.role for n in spec.nodes}
    assert roles["spine1"] == "spine" and roles["leaf1"] == "leaf" and roles["client1"] == "host"
    result = run_probe(spec)
    assert result.pairs > 0 and result.failed == []


def test_iperf3_tcp_crosses_leaf_spine_leaf(lab_factory):
    spec = lab_factory(shipped("rail-optimized"), prefix="tcp")
    src, dst = spec.hosts[0], spec.hosts[1]
    # Different rails: src NIC 0 and dst NIC 1 sit on different leaves, so the path
    # must cross a spine.
    src_ip = spec.host_nics[src.name][0].address.split("/")[0]
    dst_ip = spec.host_nics[dst.name][1].address.split("/")[0]
    before = _forwarded_by_xdp(spec)
    bps = iperf.tcp_bps(src.netns, dst.netns, dst_ip, seconds=2, src_ip=src_ip)
    assert bps > 10e6
    after = _forwarded_by_xdp(spec)
    spines = [n.name for n in spec.switches if n.role == "spine"]
    assert sum(after[s] - before[s] for s in spines) > 1000


def test_two_labs_side_by_side(lab_factory):
    first = lab_factory(shipped("rail-only"), prefix="one")
    second = lab_factory(shipped("rail-only"), prefix="two")
    assert run_probe(first).failed == []
    assert run_probe(second).failed == []


def test_deploy_twice_and_destroy_twice_are_noops(tmp_path):
    name = unique_name("noop")
    path = shipped("rail-only")
    try:
        railab("deploy", str(path), "--name", name)
        again = railab("deploy", str(path), "--name", name)
        assert "already deployed" in again.stdout
        inspect = json.loads(railab("inspect", name, "--json").stdout)
        assert inspect["name"] == name
        node = inspect["nodes"][0]
        assert {"name", "role", "netns", "interfaces"} <= node.keys()
        assert {"name", "address", "peer"} <= node["interfaces"][0].keys()
        assert {n["role"] for n in inspect["nodes"]} <= {"host", "leaf", "spine", "core"}
    finally:
        first = railab("destroy", name)
    assert "destroyed" in first.stdout
    second = railab("destroy", name)
    assert second.returncode == 0 and "not deployed" in second.stdout
    assert leftovers(name) == []


def test_exec_runs_inside_a_node():
    name = unique_name("exec")
    try:
        railab("deploy", str(shipped("rail-only")), "--name", name)
        spec = state.load(name).spec
        host = spec.hosts[0]
        out = railab("exec", name, host.name, "--", "ip", "-br", "addr").stdout
        assert spec.host_nics[host.name][0].address in out
    finally:
        railab("destroy", name)
    assert leftovers(name) == []


def _start_deploy(name: str, kind: str = "rail-optimized") -> subprocess.Popen:
    return subprocess.Popen(
        [*RAILAB, "deploy", str(shipped(kind)), "--name", name],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_kill_9_mid_deploy_then_destroy_leaves_nothing():
    name = unique_name("kill")
    proc = _start_deploy(name)
    try:
        assert wait_for(lambda: any(n.startswith(f"railab-{name}-") for n in os.listdir("/run/netns"))
                         if os.path.isdir("/run/netns") else False)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert leftovers(name), "the kill should have left the half-built lab behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        railab("destroy", name)
    assert leftovers(name) == []


def test_kill_9_after_deploy_then_destroy_removes_programs_and_agent():
    name = unique_name("crash")
    proc = _start_deploy(name, "rail-only")
    try:
        proc.wait(timeout=120)
        assert proc.returncode == 0, proc.stderr
        spec = state.load(name).spec
        prog_ids = {i for sw in spec.switches for i in xdp_prog_ids_in(sw.netns)}
        assert prog_ids
        # The agent is the lab's long-lived process; kill it like a crash would.
        agent = state.load(name).agent_pid
        os.kill(agent, signal.SIGKILL)
        assert wait_for(lambda: not os.path.exists(f"/proc/{agent}/cmdline")
                         or not open(f"/proc/{agent}/cmdline", "rb").read(), 10)
        shown = json.loads(railab("inspect", name, "--json").stdout)
        assert shown["status"] == "broken"     # not "up" with nobody serving it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        railab("destroy", name)
    assert leftovers(name, spec) == []
    # The kernel frees a namespace's devices (and so their XDP programs) asynchronously.
    assert wait_for(lambda: not any(bpf_prog_exists(p) for p in prog_ids), 10), prog_ids


@pytest.mark.parametrize("second", [None, signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_during_deploy_leaves_nothing(second):
    """Also when a second signal arrives while the deploy cleans up after the first."""
    name = unique_name("intr")
    proc = _start_deploy(name, "dual-plane")
    try:
        assert wait_for(lambda: state.state_file(name).exists())
        # Let it get into namespace building before the interrupt.
        wait_for(lambda: any(n.startswith(f"railab-{name}-") for n in os.listdir("/run/netns"))
                  if os.path.isdir("/run/netns") else False, 10)
        proc.send_signal(signal.SIGINT)
        if second is not None:
            time.sleep(0.1)
            proc.send_signal(second)
        proc.wait(timeout=60)
        assert proc.returncode != 0
        assert "Traceback" not in proc.stderr
        assert leftovers(name) == [], "an interrupted deploy must clean up after itself"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        # Whatever the outcome, the machine is left clean for the next test.
        if leftovers(name):
            railab("destroy", name, check=False)


def test_bad_lab_names_touch_nothing(lab_factory):
    spec = lab_factory(shipped("clos2"), prefix="keep")   # one lab that every refusal must leave alone
    for name in (".", "..", "fz.x", "", "_x", "a" * 49, "a/b"):
        for argv in (("destroy", name), ("deploy", str(shipped("clos2")), f"--name={name}")):
            proc = railab(*argv, check=False)
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, (argv, proc.stderr)
            assert proc.stderr.count("\n") == 1 and "lab" in proc.stderr, (argv, proc.stderr)
        assert state.state_file(spec.name).exists() and state.pin_dir(spec.name).exists(), name
        assert state.STATE_ROOT.is_dir() and state.BPFFS_ROOT.is_dir(), name


def test_the_same_name_for_another_file_is_refused(lab_factory):
    spec = lab_factory(shipped("clos2"), prefix="same")
    proc = railab("deploy", str(shipped("rail-only")), "--name", spec.name, check=False)
    assert proc.returncode == 2 and "already deployed from" in proc.stderr
    again = railab("deploy", str(shipped("clos2")), "--name", spec.name)
    assert "already deployed" in again.stdout


def test_probe_reports_failed_pairs_with_the_hop(lab_factory):
    # rail-optimized: every NIC reaches every other on its own, so only pairs with the
    # downed port may fail (in rail-only the PXN relay would involve it for more pairs).
    spec = lab_factory(shipped("rail-optimized"), prefix="fail")
    host = spec.hosts[0]
    port = spec.host_nics[host.name][0].ports[0]
    subprocess.run(["ip", "-n", host.netns, "link", "set", port, "down"], check=True)
    proc = railab("probe", spec.name, "--json", check=False)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["failed"] and report["ok"] < report["pairs"]
    broken = f"{host.name}:{port}"
    assert all(broken in (f["a"], f["b"]) for f in report["failed"])
    assert all(f["died_at"] for f in report["failed"])


def test_containerlab_runtime_says_what_is_missing(tmp_path):
    # A PATH on which neither containerlab nor docker can be found.
    bare = {**os.environ, "PATH": f"{tmp_path}:/usr/sbin:/sbin"}
    name = unique_name("nocl")
    proc = railab("deploy", "--runtime", "containerlab", "--name", name, str(shipped("clos2")),
                  check=False, env=bare)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs containerlab and docker" in lines[0], proc.stderr
    assert not leftovers(name)
