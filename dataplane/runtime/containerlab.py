"""The containerlab runtime: containerlab and Docker make one container per node and one
veth pair per link; railab then configures the hosts and runs its XDP switches in those
containers' namespaces exactly as in the netns runtime (the agent attaches from outside).

railab hands containerlab a derived topology, written in the lab's state directory (never
next to the user's file): every node railab emulates becomes a container of railab's own
node image (built locally by scripts/setup.sh; nothing is pulled), links carry MTU 1500 —
containerlab's default 9500 stops native XDP on veth — and the MACs of the lab spec. End
nodes marked external keep their own container settings.

Everything carries the lab's name: containers the Docker label `railab.lab=<lab>` (and
containerlab's own `containerlab=<lab>`), namespaces /run/netns/clab-<lab>-<node>. So
`remove` finds them after any crash, and never touches a containerlab lab railab did not
deploy (one without railab's label).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import yaml

from dataplane.errors import RuntimeStateError
from dataplane.kernel.netns import in_netns, iproute
from dataplane.runtime import state
from dataplane.runtime.labspec import CLAB_NETNS_PREFIX, LabSpec
from dataplane.topology.infer import HOST_IMAGE_REPOSITORY, SWITCH_IMAGE_REPOSITORY

NAME = "containerlab"
LAB_LABEL = "railab.lab"
IMAGE_REPOSITORY = HOST_IMAGE_REPOSITORY
LINK_MTU = 1500
DOCKER_TIMEOUT_S = 30
# containerlab settings railab owns on the nodes it emulates: the container only has to
# keep its namespace alive (railab drives it from outside), so it needs no capabilities,
# no management network, and must not be restarted with an empty namespace.
EMULATED_NODE = {
    "kind": "linux",
    "image-pull-policy": "never",
    "restart-policy": "no",
    "network-mode": "none",
    "privileged": False,
}


def _railab_version() -> str:
    try:
        return metadata.version("railab")
    except metadata.PackageNotFoundError:
        return "0.1.0"


def node_image() -> str:
    if os.environ.get("RAILAB_NODE_IMAGE"):     # another build of the node image
        return os.environ["RAILAB_NODE_IMAGE"]
    return f"{IMAGE_REPOSITORY}:{_railab_version()}"


def switch_image() -> str:
    """railab's switch image: the node image's root filesystem under a name of its own, so
    that a containerlab file says which of its nodes are railab's XDP switches."""
    if os.environ.get("RAILAB_SWITCH_IMAGE"):   # another build of the switch image
        return os.environ["RAILAB_SWITCH_IMAGE"]
    return f"{SWITCH_IMAGE_REPOSITORY}:{_railab_version()}"


def topology_file(lab: str) -> Path:
    return state.state_dir(lab) / f"{lab}.clab.yml"


def _env() -> dict:
    # Offline machines: containerlab would otherwise wait on its version check every run.
    return {**os.environ, "CLAB_VERSION_CHECK": "disable"}


def run_tool(argv: list[str], timeout: float = DOCKER_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]} did not answer in {timeout:.0f} s")


def _docker_ready() -> str | None:
    """None when Docker answers; otherwise why not, in a few words."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    if run_tool(["docker", "info", "--format", "{{.ServerVersion}}"]).returncode != 0:
        return "the Docker engine is not running"
    return None


def _image_present(image: str) -> bool:
    return run_tool(["docker", "image", "inspect", "--format", "{{.Id}}", image]).returncode == 0


def containers_labelled(label: str) -> list[str]:
    """Ids of containers (running or not) carrying `label` (key or key=value)."""
    if shutil.which("docker") is None:
        return []
    out = run_tool(["docker", "ps", "-aq", "--filter", f"label={label}"])
    return out.stdout.split() if out.returncode == 0 else []


def labs_with_containers() -> list[str]:
    """Lab names found on containers railab made (for `destroy --all` after state is lost)."""
    if shutil.which("docker") is None:
        return []
    out = run_tool(["docker", "ps", "-a", "--filter", f"label={LAB_LABEL}",
                "--format", f'{{{{.Label "{LAB_LABEL}"}}}}'])
    return sorted({line.strip() for line in out.stdout.splitlines() if line.strip()}) \
        if out.returncode == 0 else []


# ------------------------------------------------------------------ the runtime interface
def check(spec: LabSpec) -> None:
    """Refuse, before anything is made, what would make containerlab fail half-way."""
    missing = [tool for tool in ("containerlab", "docker") if shutil.which(tool) is None]
    if missing:
        raise RuntimeStateError(
            f"--runtime containerlab needs {' and '.join(missing)}, not found on this machine "
            "(scripts/setup.sh installs both where Go and Docker exist); or use --runtime netns")
    why = _docker_ready()
    if why:
        raise RuntimeStateError(f"--runtime containerlab: {why}")
    image = node_image()
    if not _image_present(image):
        raise RuntimeStateError(f"--runtime containerlab: railab's node image {image} is not "
                                "built on this machine; run scripts/setup.sh")
    for node in spec.nodes:
        if node.external:
            own = node.container.get("image")
            if not own:
                raise RuntimeStateError(f"node {node.name}: railab.role external needs an image: "
                                        "to run (or railab.role host to have railab emulate it)")
            if not _image_present(own) and node.container.get("image-pull-policy", "").lower() == "never":
                raise RuntimeStateError(f"node {node.name}: image {own} is not on this machine "
                                        "and its image-pull-policy is never")
    theirs = set(containers_labelled(f"containerlab={spec.name}")) - set(containers_labelled(f"{LAB_LABEL}={spec.name}"))
    if theirs:
        raise RuntimeStateError(f"lab name {spec.name} is used by a containerlab lab railab did "
                                "not deploy; destroy that one or deploy with --name")


def create(spec: LabSpec) -> None:
    """Have containerlab make every container and veth, then take the ifindexes the
    kernel gave the links into the spec (the XDP program tells ports apart by them)."""
    path = topology_file(spec.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(derived_topology(spec), sort_keys=False, width=200))
    # The lab directory's ACLs are for users sharing a lab; railab's is root's, in /run.
    result = run_tool(["containerlab", "deploy", "-t", str(path), "--skip-labdir-acl",
                   "--timeout", "5m"], timeout=900)
    if result.returncode != 0:
        raise RuntimeStateError(f"lab {spec.name}: containerlab deploy failed: "
                                f"{_clab_error(result.stdout + result.stderr)}")
    adopt_ifindexes(spec)


def remove(lab: str, spec: LabSpec | None) -> None:
    """Remove the lab's containers and their namespace links. Needs only the lab's name."""
    path = topology_file(lab)
    ours = containers_labelled(f"{LAB_LABEL}={lab}")
    if shutil.which("containerlab") and (ours or path.exists()):
        target = ["-t", str(path)] if path.exists() else ["--name", lab]
        # containerlab also removes what it wrote outside the lab: /etc/hosts entries, ssh config
        run_tool(["containerlab", "destroy", *target, "--cleanup", "--yes"], timeout=300)
    left = containers_labelled(f"{LAB_LABEL}={lab}")
    if left:
        run_tool(["docker", "rm", "-f", *left], timeout=120)
    prefix = f"{CLAB_NETNS_PREFIX}{lab}-"
    names = {n.netns for n in spec.nodes} if spec else set()
    for entry in _netns_links(prefix):
        # without a spec only links whose container is gone: another clab lab may share the prefix
        if entry.name in names or not entry.exists():
            entry.unlink(missing_ok=True)


def leftovers(lab: str) -> bool:
    return bool(containers_labelled(f"{LAB_LABEL}={lab}"))


# ------------------------------------------------------------------ pieces
def derived_topology(spec: LabSpec) -> dict:
    nodes = {}
    for node in spec.nodes:
        if node.external:
            settings = dict(node.container)
        else:
            settings = {**EMULATED_NODE, "image": node_image()}
        settings["labels"] = {**(settings.get("labels") or {}), LAB_LABEL: spec.name,
                              "railab.role": "external" if node.external else node.role}
        nodes[node.name] = settings
    links = [{"type": "veth", "mtu": LINK_MTU, "endpoints": [
        {"node": node.name, "interface": iface.name, "mac": iface.mac},
        {"node": peer_node.name, "interface": peer.name, "mac": peer.mac},
    ]} for node, iface, peer_node, peer in spec.links()]
    return {"name": spec.name, "prefix": CLAB_NETNS_PREFIX.rstrip("-"),
            "topology": {"nodes": nodes, "links": links}}


def adopt_ifindexes(spec: LabSpec, *, adopt_macs: bool = False, mtu: int | None = None) -> None:
    """The kernel's ifindexes of every lab port into the spec (and its MACs, for links
    whose MACs containerlab chose); ports above `mtu` are lowered to it first."""
    index: dict[tuple[str, str], int] = {}
    macs: dict[tuple[str, str], str] = {}
    for node in spec.nodes:
        with in_netns(node.netns):
            ipr = iproute()
        try:
            present = {link.get_attr("IFLA_IFNAME"): link for link in ipr.get_links()}
            for iface in node.interfaces:
                link = present.get(iface.name)
                if link is None:
                    raise RuntimeStateError(f"lab {spec.name}: containerlab did not make "
                                            f"{node.name}:{iface.name}")
                if mtu is not None and link.get_attr("IFLA_MTU") > mtu:
                    ipr.link("set", index=link["index"], mtu=mtu)
                index[(node.name, iface.name)] = link["index"]
                macs[(node.name, iface.name)] = link.get_attr("IFLA_ADDRESS")
        finally:
            ipr.close()
    switch_ports: dict[int, str] = {}
    for node in spec.nodes:
        for iface in node.interfaces:
            iface.ifindex = index[(node.name, iface.name)]
            iface.peer_ifindex = index[(iface.peer_node, iface.peer_if)]
            if adopt_macs:
                iface.mac = macs[(node.name, iface.name)]
                iface.peer_mac = macs[(iface.peer_node, iface.peer_if)]
            if node.role != "host":
                if iface.ifindex in switch_ports:
                    # Veths are made in the root namespace, so their indexes are unique
                    # there; a clash means a namespace already held that number.
                    raise RuntimeStateError(
                        f"lab {spec.name}: switch ports {switch_ports[iface.ifindex]} and "
                        f"{node.name}:{iface.name} share ifindex {iface.ifindex}; one XDP "
                        "program serves the lab and needs them unique: deploy again")
                switch_ports[iface.ifindex] = f"{node.name}:{iface.name}"
    spec.reindex()


def _netns_links(prefix: str) -> list[Path]:
    try:
        return [p for p in Path("/run/netns").iterdir() if p.name.startswith(prefix) and p.is_symlink()]
    except FileNotFoundError:
        return []


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _clab_error(output: str) -> str:
    """containerlab's own reason, on one line."""
    lines = [_ANSI.sub("", line).strip() for line in output.splitlines()]
    errors = [l for l in lines if " ERRO " in f" {l} " or l.startswith("Error")]
    text = errors[-1] if errors else next((l for l in reversed(lines) if l), "no output")
    return re.sub(r"\s+", " ", text)[:400]
