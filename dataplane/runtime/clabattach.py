"""railab on a lab that containerlab deployed itself (`railab attach LAB`).

The user runs `containerlab deploy` on a file whose switches run railab's switch image and
whose hosts run railab's node image (`railab topo images` writes one); railab then finds
the lab by the Docker labels containerlab puts on its containers (`containerlab=<lab>`,
`clab-node-name`, `clab-topo-file`), reads that topology file with its own reader, and
builds the lab spec on the containers' namespaces (/run/netns/<container name>, which
containerlab links). From there it is the containerlab runtime's bring-up: the kernel's
ifindexes, and here also its MACs (containerlab chose them), go into the spec; hosts are
configured from outside; the agent attaches the XDP program to every switch port.

The lab is railab's from then on: `railab destroy` removes it with its containers
(`containerlab destroy --cleanup` on the file it was deployed from). A failed attach undoes
only railab's part (`release`): the user's containers stay as containerlab made them.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dataplane.errors import RuntimeStateError
from dataplane.runtime import containerlab as clab_runtime
from dataplane.runtime import labspec
from dataplane.runtime.labspec import LabSpec
from dataplane.runtime.netns import NETNS_DIR, RULE_PRIORITY_BASE, ip_batch
from dataplane.topology import clab
from dataplane.topology.infer import railab_image_role

NAME = "containerlab-attached"
LINK_MTU = clab_runtime.LINK_MTU
NODE_LABEL = "clab-node-name"
TOPOLOGY_LABEL = "clab-topo-file"


@dataclass
class Container:
    name: str            # also its namespace's name under /run/netns
    node: str
    image: str
    running: bool
    status: str
    topology: str
    railab_deployed: bool


def containers(lab: str) -> list[Container]:
    """The containers containerlab made for `lab` (running or not)."""
    ids = clab_runtime.containers_labelled(f"containerlab={lab}")
    if not ids:
        return []
    out = clab_runtime.run_tool(["docker", "inspect", *ids])
    if out.returncode != 0:
        raise RuntimeStateError(f"lab {lab}: docker inspect failed: {out.stderr.strip()[:200]}")
    found = []
    for item in json.loads(out.stdout):
        labels = item["Config"].get("Labels") or {}
        found.append(Container(item["Name"].lstrip("/"), labels.get(NODE_LABEL, ""),
                               item["Config"].get("Image", ""), bool(item["State"].get("Running")),
                               item["State"].get("Status", ""), labels.get(TOPOLOGY_LABEL, ""),
                               clab_runtime.LAB_LABEL in labels))
    return found


def build_spec(lab: str, topology: str | None = None, dataplane: str = "xdp") -> LabSpec:
    """The lab spec of containerlab's running lab `lab`, each node on its container's
    namespace. Refuses, in one line and before anything is changed, what railab cannot
    run: no such lab, a lab railab deployed itself, a node without a running container,
    a switch whose container is not railab's switch image."""
    missing = [tool for tool in ("containerlab", "docker") if shutil.which(tool) is None]
    if missing:
        raise RuntimeStateError(f"attach needs {' and '.join(missing)}, not found on this machine")
    found = containers(lab)
    if not found:
        raise RuntimeStateError(f"no containerlab lab named {lab} on this machine "
                                "(`containerlab inspect --all` lists them)")
    if any(c.railab_deployed for c in found):
        raise RuntimeStateError(f"lab {lab} was deployed by railab (railab deploy --runtime "
                                "containerlab); it needs no attach")
    path = topology or next((c.topology for c in found if c.topology), "")
    if not path:
        raise RuntimeStateError(f"lab {lab}: containerlab did not record its topology file; "
                                "give it with --topology FILE")
    topo = clab.read(path)
    if topo.name != lab:
        # containerlab 0.79 destroys a lab by its file's name (`destroy --name` reads the
        # file again and takes its name): railab could not remove such a lab cleanly
        raise RuntimeStateError(f"lab {lab} was deployed from {path}, whose lab is {topo.name} "
                                "(containerlab deploy --name); containerlab cannot destroy it by "
                                "its own name: give the name in the file instead")
    spec = labspec.build(topo, str(Path(path).resolve()), runtime="containerlab", dataplane=dataplane)
    spec.attached = True
    by_node = {c.node: c for c in found}
    for node in spec.nodes:
        container = by_node.get(node.name)
        if container is None:
            raise RuntimeStateError(f"lab {lab}: node {node.name} of {path} has no container "
                                    "(was the lab deployed from another file? give --topology)")
        if not container.running:
            raise RuntimeStateError(f"lab {lab}: container {container.name} is {container.status}, "
                                    "not running")
        if node.role != "host" and railab_image_role(container.image) is None:
            raise RuntimeStateError(
                f"lab {lab}: switch {node.name} runs {container.image}, not railab's switch "
                "image; rewrite the file with `railab topo images` and deploy it again")
        if not os.path.lexists(os.path.join(NETNS_DIR, container.name)):
            raise RuntimeStateError(f"lab {lab}: container {container.name} has no namespace "
                                    f"link {NETNS_DIR}/{container.name}")
        node.netns = container.name
    spec.reindex()
    return spec


# ------------------------------------------------------------------ the runtime interface
def check(spec: LabSpec) -> None:
    """build_spec checked everything railab needs of the containers."""


def create(spec: LabSpec) -> None:
    """The containers and links are there already: take the kernel's ifindexes and MACs
    into the spec, with every fabric link at MTU 1500 (native XDP on veth refuses
    containerlab's default 9500)."""
    clab_runtime.adopt_ifindexes(spec, adopt_macs=True, mtu=LINK_MTU)


def remove(lab: str, spec: LabSpec | None) -> None:
    """An attached lab goes with its containers, as containerlab would remove it."""
    if spec is None or not spec.attached or shutil.which("containerlab") is None:
        return
    target = ["-t", spec.source] if Path(spec.source).exists() else ["--name", lab]
    clab_runtime.run_tool(["containerlab", "destroy", *target, "--cleanup", "--yes"], timeout=300)
    left = clab_runtime.containers_labelled(f"containerlab={lab}")
    if left:        # the file changed or went since the deploy: the containers go anyway
        clab_runtime.run_tool(["docker", "rm", "-f", *left], timeout=120)


def leftovers(lab: str) -> bool:
    """Without its state an attached lab is only the user's containerlab lab again."""
    return False


def release(spec: LabSpec) -> None:
    """Undo what railab did inside the containers (XDP programs; addresses, routes and
    rules of railab's nodes; on a user's own container only the addresses railab gave it)
    and leave the containers running; the agent, pins and state go in lifecycle."""
    for node in spec.nodes:
        if not os.path.lexists(os.path.join(NETNS_DIR, node.netns)):
            continue
        commands = []
        if node.role != "host":
            # by name: an attach that failed before taking the kernel's ifindexes into the
            # spec still holds railab's planned ones
            commands += [f"link set dev {i.name} {mode} off" for i in node.interfaces
                         for mode in ("xdpdrv", "xdpgeneric")]
        if node.external:       # a user's container: only what railab added
            commands += [f"address del {i.address} dev {i.name}" for i in node.interfaces if i.address]
        else:
            commands += [f"address flush dev {i.name}" for i in node.interfaces]
            commands += [f"route flush dev {i.name} table all" for i in node.interfaces]
        commands += [f"rule del priority {RULE_PRIORITY_BASE + n}"
                     for n in range(len(spec.host_nics.get(node.name, [])))]
        ip_batch(commands, keep_going=True, netns=node.netns)
