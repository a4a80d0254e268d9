"""`railab deploy --dataplane kernel`: the same lab forwarded by Linux (the controller's
routes as multipath kernel routes, L4 hash, no XDP): probe and counters through the
agent, ECMP settings mapped onto the kernel's, every other mode refused in one line,
and nothing left behind."""
from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.agent import client
from dataplane.kernel.netns import in_netns
from dataplane.lab.probe import probe_ports, run_probe, send_once
from dataplane.runtime import lifecycle, state, netns as rt
from dataplane.runtime.labspec import build
from dataplane.topology.clab import read as load_topology

from .conftest import leftovers, railab, shipped, unique_name, xdp_prog_ids_in


def _kernel_spec(kind: str, name: str):
    topo = load_topology(shipped(kind))
    topo.name = name
    return build(topo, str(shipped(kind)), dataplane="kernel")


@pytest.fixture(scope="module")
def kernel_lab():
    spec = _kernel_spec("clos2", unique_name("kdp"))
    try:
        lifecycle.deploy(spec)
        yield spec
    finally:
        lifecycle.destroy(spec.name)
        assert not leftovers(spec.name, spec)


def _sysctl(netns: str, key: str) -> str:
    with in_netns(netns):      # /proc/sys/net follows the reading thread's namespace
        return Path("/proc/sys/" + key.replace(".", "/")).read_text().strip()


def test_state_records_kernel_and_switches_forward_without_xdp(kernel_lab):
    assert state.load(kernel_lab.name).spec.dataplane == "kernel"
    for switch in kernel_lab.switches:
        assert _sysctl(switch.netns, "net.ipv4.ip_forward") == "1"
        assert _sysctl(switch.netns, "net.ipv4.fib_multipath_hash_policy") == "1"
        assert xdp_prog_ids_in(switch.netns) == [], f"{switch.name} has an XDP program"
    for host in kernel_lab.hosts:
        assert _sysctl(host.netns, "net.ipv4.ip_forward") == "0"
    # a spine-facing leaf route is a multipath kernel route over every uplink
    leaf1 = kernel_lab.node("leaf1")
    routes = rt.kernel_routes(kernel_lab, leaf1)
    multipath = [r for r in routes if "multipath" in r]
    assert multipath and all(len(r["multipath"]) == 4 for r in multipath)


def test_probe_reaches_every_nic_pair(kernel_lab):
    result = run_probe(kernel_lab)
    assert result.pairs == 112
    assert result.ok == result.pairs, result.failed[:5]
    out = railab("probe", kernel_lab.name)
    assert f"{result.pairs}/{result.pairs} NIC pairs ok" in out.stdout


def test_counters_count_real_traffic_from_kernel_link_stats(kernel_lab):
    ports = probe_ports(kernel_lab)
    src = next(p for p in ports if p.host == "srv1")
    dst = next(p for p in ports if p.host == "srv8")       # behind leaf4: crosses a spine
    before = client.counters(kernel_lab.name)
    sent = 200
    for _ in range(sent // 5):
        send_once(kernel_lab, src, dst, count=5)
    after = client.counters(kernel_lab.name)
    delta = after.minus(before)
    leaf1_rx = sum(c.rx_packets for s, _, c in delta.ports() if s == "leaf1")
    leaf4_tx = sum(c.tx_packets for s, _, c in delta.ports() if s == "leaf4")
    spines_rx = sum(c.rx_packets for s, _, c in delta.ports() if s.startswith("spine"))
    assert leaf1_rx >= sent and leaf4_tx >= sent and spines_rx >= sent, (leaf1_rx, spines_rx, leaf4_tx)
    forwarded = delta.verdicts["forwarded (kernel)"]["packets"]
    assert forwarded >= 3 * sent          # leaf1, a spine, leaf4: each forwarded every one
    out = railab("counters", kernel_lab.name, "--switch", "leaf1")
    assert "leaf1" in out.stdout and "forwarded (kernel)" in out.stdout
    # the web view's port_load reply: the same link statistics, every port up
    load = client.request(kernel_lab.name, "port_load")
    rows = {(s, p): row for s, sw in load["switches"].items() for p, row in sw["ports"].items()}
    assert set(rows) == {(s, p) for s, p, _ in after.ports()}
    tx, up = load["fields"].index("tx_bytes"), load["fields"].index("up")
    assert all(row[up] == 1 for row in rows.values())
    assert all(rows[(s, p)][tx] >= c.tx_bytes for s, p, c in after.ports())
    assert sum(rows[(s, p)][tx] for s, p in rows if s == "leaf4") > 0
    assert load["switches"]["leaf1"]["modes"] == ["ecmp"]


@pytest.mark.parametrize("args, says", [
    (["--mode", "flowlet"], "kernel forwarding only hashes"),
    (["--mode", "spray-rr"], "kernel forwarding only hashes"),
    (["--mode", "wcmp", "--weights", "1,2,3,4"], "kernel forwarding only hashes"),
    (["--hash-fields", "5tuple,bth_dqp"], "takes only"),
    (["--lbn", "auto"], "kernel forwarding only hashes"),
])
def test_lb_modes_other_than_ecmp_are_refused_in_one_line(kernel_lab, args, says):
    proc = railab("lb", "set", kernel_lab.name, "--switch", "leaf1", *args, check=False)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert _sysctl(kernel_lab.node("leaf1").netns, "net.ipv4.fib_multipath_hash_policy") == "1"


def test_ecmp_seed_and_fields_map_onto_the_kernel_hash(kernel_lab):
    leaf1 = kernel_lab.node("leaf1").netns
    try:
        railab("lb", "set", kernel_lab.name, "--switch", "leaf1", "--mode", "ecmp", "--seed", "7",
               "--hash-fields", "src_ip,dst_ip")
        assert _sysctl(leaf1, "net.ipv4.fib_multipath_hash_seed") == "7"
        assert _sysctl(leaf1, "net.ipv4.fib_multipath_hash_policy") == "3"
        assert int(_sysctl(leaf1, "net.ipv4.fib_multipath_hash_fields"), 0) == 0x3
        shown = client.request(kernel_lab.name, "lb_show")["switches"]["leaf1"]
        assert shown["hash_seed"] == 7 and shown["hash_fields"] == ["src_ip", "dst_ip"]
        assert all(g["mode"] == "ecmp" for g in shown["groups"].values())
        assert run_probe(kernel_lab).failed == []
    finally:
        railab("lb", "set", kernel_lab.name, "--switch", "leaf1", "--seed", "auto", "--hash-fields", "5tuple")
    assert _sysctl(leaf1, "net.ipv4.fib_multipath_hash_policy") == "1"
    out = railab("lb", "show", kernel_lab.name)
    assert "kernel" in out.stdout


@pytest.mark.parametrize("argv, says", [
    (["lb", "port-model", "{lab}", "--scale", "0.1"], "port model needs the XDP dataplane"),
    (["tm", "add", "{lab}", "--switch", "leaf1", "--src", "10.0.0.2", "--dst", "10.0.1.2",
      "--sport", "1", "--dport", "2", "--egress", "up1"], "traffic matrix needs the XDP dataplane"),
    (["fault", "{lab}", "arn", "--on"], "need the XDP dataplane"),
])
def test_xdp_only_verbs_are_refused_with_the_reason(kernel_lab, argv, says):
    proc = railab(*[a.format(lab=kernel_lab.name) for a in argv], check=False)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr


def test_redeploy_with_the_other_dataplane_is_refused(kernel_lab):
    proc = railab("deploy", str(shipped("clos2")), "--name", kernel_lab.name, check=False)
    assert proc.returncode != 0
    assert "already deployed with the kernel dataplane" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert run_probe(kernel_lab).failed == []


@pytest.mark.parametrize("argv, says", [
    (["--dataplane", "ebpf"], "invalid choice"),
    (["--dataplane", "kernel", "--runtime", "containerlab"], "only with the netns runtime"),
])
def test_bad_dataplane_flags_are_one_line_and_make_nothing(argv, says):
    name = unique_name("kbad")
    proc = railab("deploy", str(shipped("clos2")), "--name", name, *argv, check=False)
    assert proc.returncode != 0
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert not leftovers(name)


def test_dual_plane_lab_forwards_with_the_kernel():
    spec = _kernel_spec("dual-plane", unique_name("kdp2"))
    try:
        lifecycle.deploy(spec)
        result = run_probe(spec)
        assert result.ok == result.pairs > 0, result.failed[:5]
    finally:
        lifecycle.destroy(spec.name)
    assert not leftovers(spec.name, spec)


def test_xdp_generic_lab_forwards_in_generic_mode_and_refuses_real_queues():
    from dataplane.lab.fabric import Fabric
    from dataplane.xdp.bpfio import attached_xdp

    topo = load_topology(shipped("clos2"))
    topo.name = unique_name("xgen")
    spec = build(topo, str(shipped("clos2")), dataplane="xdp-generic")
    try:
        lifecycle.deploy(spec)
        for switch in spec.switches:
            for iface in switch.interfaces:
                assert attached_xdp(switch.netns, iface.ifindex)[0] == "generic", (switch.name, iface.name)
        before = client.counters(spec.name)
        result = run_probe(spec)
        assert result.ok == result.pairs == 112, result.failed[:5]
        redirected = client.counters(spec.name).minus(before).verdicts["redirect"]["packets"]
        assert redirected >= 112            # every probe crossed XDP switches
        Fabric(spec.name).set_mode("spray-rr", role="leaf")
        Fabric(spec.name).set_port_model(scale=0.1, queue="virtual")
        assert run_probe(spec).failed == []
        proc = railab("lb", "port-model", spec.name, "--scale", "0.1", "--queue", "real", check=False)
        assert proc.returncode != 0 and "needs native XDP" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    finally:
        lifecycle.destroy(spec.name)
    assert not leftovers(spec.name, spec)
