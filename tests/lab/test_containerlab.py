"""Labs that containerlab builds (`--runtime containerlab`): containerlab makes the
containers and veths, railab's XDP switches forward inside them, and every verb works
as on a netns lab. Needs Docker and containerlab (scripts/setup.sh installs both)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from dataplane.agent import client
from dataplane.runtime import containerlab, state

from . import clabtools
from .conftest import (RAILAB, ROOT, bpf_prog_exists, wait_for, leftovers, railab, shipped, unique_name,
                       xdp_prog_ids_in)

KINDS = ("clos2", "clos3", "rail-only", "rail-optimized", "dual-plane")
EXTERNAL_IMAGE = "railab-test-external:1"


@pytest.fixture(scope="module", autouse=True)
def containerlab_ready():
    clabtools.require([containerlab.node_image()])


def _member_packets(lab: str) -> dict[str, int]:
    return {switch: sw.member_packets() for switch, sw in client.counters(lab).switches.items()}


@pytest.mark.parametrize("kind", KINDS)
def test_shipped_lab_built_by_containerlab_probes_clean(kind):
    name = unique_name(f"cl{kind[:4]}")
    programs = set()
    try:
        out = railab("deploy", "--runtime", "containerlab", "--name", name, str(shipped(kind)),
                     timeout=300).stdout
        assert "containerlab runtime" in out
        spec = state.load(name).spec
        assert spec.runtime == "containerlab"
        # containerlab made one container per node, and knows them as its own lab
        assert clabtools.containers(name) == sorted(f"clab-{name}-{n.name}" for n in spec.nodes)
        listed = subprocess.run(["containerlab", "inspect", "--name", name, "--format", "json"],
                                capture_output=True, text=True, env={**os.environ, "CLAB_VERSION_CHECK": "disable"})
        assert listed.returncode == 0 and all(f"clab-{name}-{n.name}" in listed.stdout for n in spec.nodes)
        inspect = json.loads(railab("inspect", name, "--json").stdout)
        assert inspect["runtime"] == "containerlab" and inspect["status"] == "up"
        probe = json.loads(railab("probe", name, "--json", timeout=300).stdout)
        assert probe["pairs"] > 0 and probe["ok"] == probe["pairs"], probe["failed"][:5]
        forwarded = _member_packets(name)
        assert all(forwarded[n.name] > 0 for n in spec.switches if n.role == "leaf"), forwarded
        for switch in spec.switches:
            ids = xdp_prog_ids_in(switch.netns)
            assert ids, f"{switch.name} has no XDP program attached"
            programs.update(ids)
        host = spec.hosts[0]
        addrs = railab("exec", name, host.name, "--", "ip", "-br", "addr").stdout
        assert spec.host_nics[host.name][0].address in addrs
    finally:
        railab("destroy", name, check=False)
    assert leftovers(name) == []
    assert clabtools.containers(name) == []
    assert programs and wait_for(lambda: not any(bpf_prog_exists(p) for p in programs), 10), programs


def test_experiment_with_a_link_failure_on_a_containerlab_lab(tmp_path):
    """`railab run` deploys the lab with containerlab, switches modes (ECMP, spraying),
    takes a leaf uplink down inside the containers (real carrier loss) for the rest of
    the run, and destroys the lab. The switches fail over by themselves."""
    name = unique_name("clrun")
    exp = tmp_path / "failover.yml"
    exp.write_text(f"name: failover\nlab: {shipped('rail-optimized').as_posix()}\nduration: 2.5s\n"
                   "modes: [{mode: ecmp, seed: 7, role: leaf}, spray-rr]\n"
                   f"workload: {(ROOT / 'experiments' / 'elephants.yml').as_posix()}\n"
                   "events:\n  - {at: 1.0, fault: link-down, a: 'leaf1-r0:up1', b: 'spine1:down1'}\n")
    proc = railab("run", str(exp), "--runtime", "containerlab", "--json", "--no-plots", "--output", str(tmp_path),
                  "--name", name, timeout=600)
    assert leftovers(name) == [] and clabtools.containers(name) == []
    report = json.loads(proc.stdout)
    ecmp, spray = report["modes"]["ecmp"], report["modes"]["spray-rr"]
    assert ecmp["flows_on_failed"] >= 1 and spray["flows_on_failed"] >= 1
    assert ecmp["loss_elsewhere"] == 0 and spray["loss_elsewhere"] == 0
    # Without failover the flows on the link would lose everything after 1.0 s of 2.5 s
    # (60 %); the switches moving them within milliseconds keeps it to a few packets (the
    # bound leaves room for a loaded 2-core machine delaying the agent).
    results = json.loads((Path(report["folder"]) / "results.json").read_text())
    for mode in ("ecmp", "spray-rr"):
        hit = [f for f in results["modes"][mode]["runs"][0]["flows"] if f["on_failed_element"]]
        lost, sent = sum(f["lost"] for f in hit), sum(f["sent_packets"] for f in hit)
        assert lost < 0.05 * sent, (mode, lost, sent)
    assert spray["uplink_max_mean"] < ecmp["uplink_max_mean"]


def test_lb_and_fault_inside_containers():
    name = unique_name("clfault")
    try:
        railab("deploy", "--runtime", "containerlab", "--name", name, str(shipped("clos2")), timeout=300)
        spec = state.load(name).spec
        railab("lb", "set", name, "--role", "leaf", "--mode", "spray-rr")
        shown = json.loads(railab("lb", "show", name, "--json").stdout)
        for leaf in (n.name for n in spec.switches if n.role == "leaf"):
            assert {g["mode"] for g in shown["switches"][leaf]["groups"].values()} == {"spray-rr"}
        leaf = spec.node("leaf1")
        up = next(i for i in leaf.interfaces if i.peer.startswith("spine"))
        railab("fault", name, "link-down", f"leaf1:{up.name}")
        link = subprocess.run(["ip", "-n", leaf.netns, "link", "show", up.name],
                              capture_output=True, text=True, check=True).stdout
        assert "LOWER_UP" not in link and "state DOWN" in link
        probe = json.loads(railab("probe", name, "--json", timeout=300).stdout)
        assert probe["ok"] == probe["pairs"], probe["failed"][:5]   # the other uplinks carry it
        railab("fault", name, "link-up", f"leaf1:{up.name}")
        link = subprocess.run(["ip", "-n", leaf.netns, "link", "show", up.name],
                              capture_output=True, text=True, check=True).stdout
        assert "LOWER_UP" in link
    finally:
        railab("destroy", name, check=False)
    assert leftovers(name) == []


def test_destroy_after_kill_9_of_deployer_and_agent():
    name = unique_name("clkill")
    deployer = subprocess.Popen([*RAILAB, "deploy", "--runtime", "containerlab", "--name", name,
                                 str(shipped("rail-optimized"))], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(clabtools.containers(name)) < 4:
            time.sleep(0.2)
        assert clabtools.containers(name), "containerlab made no container in 120 s"
        deployer.send_signal(signal.SIGKILL)
        deployer.wait()
        current = state.load(name)
        if current and current.agent_pid:
            try:
                os.kill(current.agent_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # containerlab may still be making containers: its own process was not killed
        time.sleep(2)
    finally:
        if deployer.poll() is None:
            deployer.kill()
            deployer.wait()
        out = railab("destroy", name, check=False)
    assert out.returncode == 0, out.stderr
    assert leftovers(name) == [] and clabtools.containers(name) == []
    assert not [ns for ns in os.listdir("/run/netns") if name in ns]


def test_a_containerlab_lab_railab_did_not_deploy_is_left_alone(tmp_path):
    name = unique_name("theirs")
    topo = tmp_path / "theirs.clab.yml"
    topo.write_text(
        f"name: {name}\ntopology:\n  defaults:\n    kind: linux\n    image: {containerlab.node_image()}\n"
        "    image-pull-policy: never\n    restart-policy: 'no'\n    network-mode: none\n"
        "    privileged: false\n  nodes:\n    a: {}\n    b: {}\n"
        "  links:\n    - endpoints: ['a:e1', 'b:e1']\n")
    env = {**os.environ, "CLAB_VERSION_CHECK": "disable"}
    subprocess.run(["containerlab", "deploy", "-t", str(topo)], capture_output=True, check=True, env=env)
    try:
        # (not `destroy --all`: it would take the developer's own labs with it)
        gone = railab("destroy", name)
        assert "not deployed" in gone.stdout
        refused = railab("deploy", "--runtime", "containerlab", "--name", name, str(shipped("clos2")),
                         check=False)
        assert refused.returncode == 2
        assert len(refused.stderr.strip().splitlines()) == 1
        assert "used by a containerlab lab railab did not deploy" in refused.stderr
        assert clabtools.containers(name) == [f"clab-{name}-a", f"clab-{name}-b"]
        assert os.path.exists(f"/run/netns/clab-{name}-a")
    finally:
        subprocess.run(["containerlab", "destroy", "-t", str(topo), "--cleanup"], capture_output=True, env=env)
    assert clabtools.containers(name) == []


def test_missing_node_image_is_one_line_and_builds_nothing():
    name = unique_name("noimg")
    proc = subprocess.run([*RAILAB, "deploy", "--runtime", "containerlab", "--name", name,
                           str(shipped("clos2"))], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "RAILAB_NODE_IMAGE": "railab-node:not-built"})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "railab-node:not-built" in lines[0] and "setup.sh" in lines[0]
    assert leftovers(name) == [] and clabtools.containers(name) == []


@pytest.fixture(scope="module")
def external_image(tmp_path_factory):
    """A user's own container image, built here (no registry): busybox with ping."""
    rootfs = tmp_path_factory.mktemp("rootfs")
    (rootfs / "bin").mkdir()
    shutil.copy("/bin/busybox", rootfs / "bin" / "busybox")
    for applet in ("sh", "sleep", "ping", "ip"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(["docker", "import", "--change", 'ENTRYPOINT ["/bin/sleep", "86400"]', "-",
                    EXTERNAL_IMAGE], stdin=tar.stdout, capture_output=True, check=True)
    tar.wait()
    try:
        yield EXTERNAL_IMAGE
    finally:
        subprocess.run(["docker", "image", "rm", "-f", EXTERNAL_IMAGE], capture_output=True)


def test_an_external_container_reaches_railab_hosts_through_the_xdp_fabric(tmp_path, external_image):
    name = unique_name("mixed")
    topo = tmp_path / "mixed.clab.yml"
    topo.write_text(f"""name: {name}
topology:
  defaults: {{kind: linux}}
  nodes:
    leaf1: {{labels: {{railab.role: leaf}}}}
    leaf2: {{labels: {{railab.role: leaf}}}}
    spine1: {{labels: {{railab.role: spine}}}}
    srv1: {{labels: {{railab.role: host}}}}
    traffic1:
      image: {external_image}
      image-pull-policy: never
      restart-policy: "no"
      privileged: false
      labels: {{railab.role: external}}
  links:
    - endpoints: ["srv1:eth1", "leaf1:e1"]
    - endpoints: ["traffic1:eth1", "leaf2:e1"]
      ipv4: ["192.168.77.10/24", "192.168.77.1/24"]
    - endpoints: ["leaf1:e2", "spine1:e1"]
    - endpoints: ["leaf2:e2", "spine1:e2"]
""")
    try:
        railab("deploy", "--runtime", "containerlab", str(topo), timeout=300)
        spec = state.load(name).spec
        ext = spec.node("traffic1")
        assert ext.external and ext.container["image"] == external_image
        # railab left the container as the user built it: its own image and entrypoint
        inspect = subprocess.run(["docker", "inspect", f"clab-{name}-traffic1", "--format",
                                  "{{.Config.Image}} {{json .Config.Entrypoint}}"],
                                 capture_output=True, text=True, check=True).stdout
        assert inspect.startswith(external_image) and "sleep" in inspect
        assert ext.interface("eth1").address == "192.168.77.10/24"   # the link's ipv4
        target = spec.host_nics["srv1"][0].address.split("/")[0]
        before = _member_packets(name)
        ping = subprocess.run(["docker", "exec", f"clab-{name}-traffic1", "ping", "-c", "3", "-W", "2",
                               target], capture_output=True, text=True, timeout=30)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        after = _member_packets(name)
        for switch in ("leaf2", "spine1", "leaf1"):       # the path both ways
            assert after[switch] - before[switch] >= 6, (switch, before, after)
    finally:
        railab("destroy", name, check=False)
    assert leftovers(name) == [] and clabtools.containers(name) == []


def test_a_name_up_under_the_other_runtime_is_refused(lab_factory):
    spec = lab_factory(shipped("clos2"), prefix="twort")
    proc = railab("deploy", "--runtime", "containerlab", "--name", spec.name, str(shipped("clos2")),
                  check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"railab: error: lab {spec.name} is already deployed with the netns runtime; destroy it first"]
    assert clabtools.containers(spec.name) == []
    assert state.load(spec.name).spec.runtime == "netns"
