"""A lab split over two machines (`railab topo split`), the machines emulated on this one as
network namespaces joined by a veth underlay (MTU 1550): each part deploys with a plain
`containerlab deploy` run inside its machine's namespace, and a link cut between machines
(a vxlan-stitch on both sides) carries full 1500-byte frames. railab's switches do not run
across machines yet: this checks the files and the substrate. Needs Docker, containerlab
and railab's images (scripts/setup.sh)."""
from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from .conftest import railab, shipped, unique_name
from . import clabtools
from .test_clab_attach import CLAB_ENV, containerlab_ready  # noqa: F401 (fixture)

UNDERLAY = {"a": "192.168.77.1", "b": "192.168.77.2"}


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def machines():
    """Two emulated machines: a namespace each, joined by a veth underlay at MTU 1550."""
    names = {host: unique_name(f"host{host}") for host in UNDERLAY}
    try:
        for ns in names.values():
            _ip("netns", "add", ns)
        _ip("link", "add", "rlunder-a", "netns", names["a"], "mtu", "1550", "type", "veth",
            "peer", "name", "rlunder-b", "netns", names["b"], "mtu", "1550")
        for host, ns in names.items():
            _ip("-n", ns, "address", "add", f"{UNDERLAY[host]}/24", "dev", f"rlunder-{host}")
            _ip("-n", ns, "link", "set", f"rlunder-{host}", "up")
        yield names
    finally:
        for ns in names.values():
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


def _in(ns: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                          env=CLAB_ENV, cwd="/tmp", timeout=300)


def test_split_lab_deploys_on_two_emulated_machines_and_a_cut_link_carries_full_frames(tmp_path, machines):
    name = unique_name("split")
    hosts = ",".join(f"{h}={a}" for h, a in UNDERLAY.items())
    out = railab("topo", "split", str(shipped("clos2")), "--hosts", hosts, "--underlay-mtu", "1550",
                 "-o", str(tmp_path)).stdout
    assert out.count("8 to other hosts") == 2, out
    files, docs = {}, {}
    for host in UNDERLAY:
        path = tmp_path / f"clos2-{host}.clab.yml"
        text = path.read_text().replace("name: clos2-", f"name: {name}-").replace(
            "network: clos2-mgmt", f"network: {name}-mgmt")
        path.write_text(text)
        files[host], docs[host] = path, yaml.safe_load(text)
    try:
        for host, ns in machines.items():
            deployed = _in(ns, "containerlab", "deploy", "-t", str(files[host]))
            assert deployed.returncode == 0, deployed.stdout[-1500:] + deployed.stderr[-1500:]
        assert len(clabtools.containers(f"{name}-a")) == len(clabtools.containers(f"{name}-b")) == 7
        # containerlab made each stitch in its machine's namespace, none in the real root one
        for host, ns in machines.items():
            assert _ip("-n", ns, "-d", "link", "show").count("vxlan id") == 8
        assert "vx-" not in _ip("-br", "link")
        # one cut link, both ends (same VNI): full-size frames, don't-fragment, across it
        ends = {}
        for host in UNDERLAY:
            link = next(l for l in docs[host]["topology"]["links"] if l.get("vni") == 1000)
            ends[host] = f"clab-{name}-{host}-{link['endpoint']['node']}", link["endpoint"]["interface"]
        for number, (ns, port) in enumerate(ends.values(), start=1):
            _ip("-n", ns, "address", "add", f"10.250.0.{number}/30", "dev", port)
        ping = subprocess.run(["ip", "netns", "exec", ends["a"][0], "ping", "-c", "2", "-W", "2",
                               "-s", "1472", "-M", "do", "10.250.0.2"], capture_output=True, text=True)
        assert ping.returncode == 0, ping.stdout + ping.stderr
    finally:
        for host, ns in machines.items():
            _in(ns, "containerlab", "destroy", "-t", str(files[host]), "--cleanup")
    assert clabtools.containers(f"{name}-a") == clabtools.containers(f"{name}-b") == []
    assert not [ns for ns in os.listdir("/run/netns") if name in ns]
