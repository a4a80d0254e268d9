"""`railab deploy FILE`: bring a containerlab topology up on namespaces with XDP switches."""
from __future__ import annotations

import shutil

from dataplane.errors import RuntimeStateError


def register(sub) -> None:
    p = sub.add_parser("deploy", help="deploy a lab from a containerlab topology file")
    p.add_argument("file", help="containerlab topology file (*.clab.yml)")
    p.add_argument("--name", help="lab name, overriding the file's name: field (as containerlab deploy --name)")
    p.add_argument("--runtime", choices=("netns", "containerlab"), default="netns",
                   help="netns (default): namespaces on this machine; containerlab: hand the file to containerlab")
    p.set_defaults(func=run)


def run(args) -> int:
    from dataplane.topology.clab import read as load_topology

    topo = load_topology(args.file)
    if args.name is not None:
        from dataplane.runtime.state import check_lab_name
        topo.name = check_lab_name(args.name)
    if args.runtime == "containerlab":
        return _containerlab(args.file)
    from dataplane.runtime import labspec, lifecycle

    spec = labspec.build(topo, str(args.file))
    result = lifecycle.deploy(spec)
    if result.already_up:
        print(f"lab {spec.name} is already deployed; nothing to do")
        return 0
    switches = len(spec.switches)
    print(f"lab {spec.name} deployed in {result.seconds:.1f} s: {len(spec.hosts)} hosts, "
          f"{switches} switches, {sum(len(n.interfaces) for n in spec.nodes) // 2} links "
          f"(railab inspect {spec.name})")
    return 0


def _containerlab(path: str) -> int:
    missing = [tool for tool in ("containerlab", "docker") if shutil.which(tool) is None]
    if missing:
        raise RuntimeStateError(
            f"--runtime containerlab needs {' and '.join(missing)}, not found on this machine; "
            "use the default netns runtime")
    import subprocess

    # Docker must also answer, not only be installed.
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        raise RuntimeStateError("--runtime containerlab: the Docker engine is not running")
    return subprocess.run(["containerlab", "deploy", "-t", path]).returncode
