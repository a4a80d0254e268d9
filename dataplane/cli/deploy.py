"""`railab deploy FILE [--runtime netns|containerlab]`: bring a containerlab topology up,
its switches forwarding with railab's XDP program."""
from __future__ import annotations

from dataplane.runtime import labspec, lifecycle
from dataplane.runtime.labspec import RUNTIMES
from dataplane.runtime.state import check_lab_name
from dataplane.topology.clab import read as load_topology


def register(sub) -> None:
    p = sub.add_parser("deploy", help="deploy a lab from a containerlab topology file")
    p.add_argument("file", help="containerlab topology file (*.clab.yml)")
    p.add_argument("--name", help="lab name, overriding the file's name: field (as containerlab deploy --name)")
    p.add_argument("--runtime", choices=RUNTIMES, default="netns",
                   help="netns (default): railab makes namespaces and veths; containerlab: "
                        "containerlab makes a container per node and the veths, railab's XDP "
                        "switches run inside them")
    p.set_defaults(func=run)


def run(args) -> int:
    topo = load_topology(args.file)
    if args.name is not None:
        topo.name = check_lab_name(args.name)
    spec = labspec.build(topo, str(args.file), runtime=args.runtime)
    result = lifecycle.deploy(spec)
    if result.already_up:
        print(f"lab {spec.name} is already deployed; nothing to do")
        return 0
    switches = len(spec.switches)
    print(f"lab {spec.name} deployed in {result.seconds:.1f} s ({spec.runtime} runtime): "
          f"{len(spec.hosts)} hosts, {switches} switches, "
          f"{sum(len(n.interfaces) for n in spec.nodes) // 2} links (railab inspect {spec.name})")
    return 0
