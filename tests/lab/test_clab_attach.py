"""A lab containerlab deploys itself, with railab attached (`railab attach`): the shipped
rail-optimized lab rewritten by `railab topo images`, a plain `containerlab deploy`, then
railab's XDP switches forward inside the switch containers. Needs Docker, containerlab and
railab's node and switch images (scripts/setup.sh)."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from dataplane.agent import client
from dataplane.runtime import containerlab, lifecycle, state

from . import clabtools
from .conftest import bpf_prog_exists, leftovers, railab, shipped, unique_name, wait_for, xdp_prog_ids_in

CLAB_ENV = {**os.environ, "CLAB_VERSION_CHECK": "disable"}
# railab's node image under another name: a switch container that is not railab's switch
OTHER_IMAGE = "railab-test-not-a-switch:1"


@pytest.fixture(scope="module", autouse=True)
def containerlab_ready():
    clabtools.require([containerlab.node_image(), containerlab.switch_image()])


def _rewritten(kind: str, name: str, folder) -> str:
    """A shipped lab through `railab topo images`, under a lab name of its own."""
    text = railab("topo", "images", str(shipped(kind))).stdout
    path = folder / f"{name}.clab.yml"
    path.write_text(text.replace(f"\nname: {kind}\n", f"\nname: {name}\n", 1))
    return str(path)


def _clab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["containerlab", *args], capture_output=True, text=True, env=CLAB_ENV,
                          cwd="/tmp", timeout=300)


def _rx_by_switch(lab: str) -> dict[str, int]:
    """Packets each switch's XDP program received, over all its ports."""
    totals: dict[str, int] = {}
    for switch, _, counters in client.counters(lab).ports():
        totals[switch] = totals.get(switch, 0) + counters.rx_packets
    return totals


def _rx_inside(container: str, port: str) -> int:
    """A port's receive counter as the container itself sees it (its own sysfs)."""
    out = subprocess.run(["docker", "exec", container, "cat", f"/sys/class/net/{port}/statistics/rx_packets"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_containerlab_deploys_railab_attaches_probe_is_clean_destroy_leaves_nothing(tmp_path):
    name = unique_name("attach")
    topo = _rewritten("rail-optimized", name, tmp_path)
    programs = set()
    try:
        started = time.monotonic()
        deployed = _clab("deploy", "-t", topo)
        assert deployed.returncode == 0, deployed.stdout[-2000:] + deployed.stderr[-2000:]
        deploy_s = time.monotonic() - started
        assert len(clabtools.containers(name)) == 14
        started = time.monotonic()
        out = railab("attach", name, timeout=300).stdout
        attach_s = time.monotonic() - started
        assert f"lab {name} attached" in out
        spec = state.load(name).spec
        assert spec.attached and spec.runtime == "containerlab"
        assert {n.netns for n in spec.nodes} == {f"clab-{name}-{n.name}" for n in spec.nodes}

        # What an attach that fails half-way runs: railab's part goes, containerlab's stays,
        # and attaching again works.
        lifecycle.release(spec)
        assert leftovers(name) == [f"containerlab netns {n}" for n in sorted(n.netns for n in spec.nodes)]
        assert all(xdp_prog_ids_in(n.netns) == [] for n in spec.switches)
        host = spec.hosts[0]
        assert "10." not in subprocess.run(["ip", "-n", host.netns, "-br", "addr"], capture_output=True,
                                           text=True, check=True).stdout
        running = subprocess.run(["docker", "ps", "--filter", f"label=containerlab={name}", "-q"],
                                 capture_output=True, text=True, check=True).stdout.split()
        assert len(running) == 14
        railab("attach", name, timeout=300)
        spec = state.load(name).spec
        leaf = spec.node("leaf1-r0")
        before = _rx_by_switch(name)
        inside_before = _rx_inside(f"clab-{name}-leaf1-r0", leaf.interfaces[0].name)

        probe = json.loads(railab("probe", name, "--json", timeout=300).stdout)
        assert probe["pairs"] == 448 and probe["ok"] == 448, probe["failed"][:5]

        after = _rx_by_switch(name)
        assert all(after[n.name] > before[n.name] for n in spec.switches), (before, after)
        assert _rx_inside(f"clab-{name}-leaf1-r0", leaf.interfaces[0].name) > inside_before
        for switch in spec.switches:
            links = subprocess.run(["ip", "-n", switch.netns, "-d", "link", "show"],
                                   capture_output=True, text=True, check=True).stdout
            assert "xdpgeneric" not in links and " mtu 1500 xdp " in links, switch.name  # native XDP
            ids = xdp_prog_ids_in(switch.netns)
            assert len(ids) == len(switch.interfaces), switch.name
            programs.update(ids)
        print(f"containerlab deploy {deploy_s:.1f} s, railab attach {attach_s:.1f} s")
        gone = railab("destroy", name)
        assert f"lab {name} destroyed" in gone.stdout
    finally:
        railab("destroy", name, check=False)
        _clab("destroy", "-t", topo, "--cleanup")
    assert leftovers(name) == [] and clabtools.containers(name) == []
    assert not [ns for ns in os.listdir("/run/netns") if name in ns]
    # what containerlab wrote outside the containers: its lab folder, /etc/hosts, ssh config
    assert not (tmp_path / f"clab-{name}").exists()
    assert name not in Path("/etc/hosts").read_text()
    assert not Path(f"/etc/ssh/ssh_config.d/clab-{name}.conf").exists()
    assert programs and wait_for(lambda: not any(bpf_prog_exists(p) for p in programs), 10), programs


def test_attach_refuses_in_one_line_and_changes_nothing(tmp_path):
    proc = railab("attach", unique_name("nolab"), check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "no containerlab lab named" in proc.stderr

    name = unique_name("notsw")
    subprocess.run(["docker", "tag", containerlab.node_image(), OTHER_IMAGE], check=True)
    topo = tmp_path / "notsw.clab.yml"
    topo.write_text(
        f"name: {name}\ntopology:\n  defaults:\n    kind: linux\n    image: {containerlab.node_image()}\n"
        "    restart-policy: 'no'\n    network-mode: none\n    privileged: false\n"
        f"  nodes:\n    srv1: {{}}\n    srv2: {{}}\n    leaf1: {{image: {OTHER_IMAGE}}}\n"
        "  links:\n    - endpoints: ['srv1:eth1', 'leaf1:e1']\n    - endpoints: ['srv2:eth1', 'leaf1:e2']\n")
    try:
        assert _clab("deploy", "-t", str(topo)).returncode == 0
        proc = railab("attach", name, check=False)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"railab: error: lab {name}: switch leaf1 runs {OTHER_IMAGE}, not railab's switch "
            "image; rewrite the file with `railab topo images` and deploy it again"]
        # nothing of railab's; containerlab's containers and namespaces as they were
        assert [left for left in leftovers(name) if not left.startswith("containerlab netns")] == []
        assert clabtools.containers(name) == sorted(f"clab-{name}-{n}" for n in ("leaf1", "srv1", "srv2"))
        assert xdp_prog_ids_in(f"clab-{name}-leaf1") == []
    finally:
        _clab("destroy", "-t", str(topo), "--cleanup")
        subprocess.run(["docker", "image", "rm", OTHER_IMAGE], capture_output=True)
    assert clabtools.containers(name) == []
