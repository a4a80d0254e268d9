"""`railab deploy FILE [--runtime netns|containerlab]`: bring a containerlab topology up,
its switches forwarding with railab's XDP program."""
from __future__ import annotations

from dataplane.runtime import hostdeploy, labspec, lifecycle
from dataplane.topology import multihost
from dataplane.errors import UsageError
from dataplane.runtime.labspec import DATAPLANES, RUNTIMES
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
    p.add_argument("--hosts", metavar="NAME=ADDRESS[@DEV],...",
                   help="split the lab over these machines (with --runtime containerlab): one "
                        "containerlab part and one agent per machine, links between machines "
                        "as vxlan-stitch over the underlay ADDRESS (DEV: its device)")
    add_dataplane_option(p)
    p.set_defaults(func=run)


def add_dataplane_option(p) -> None:
    p.add_argument("--dataplane", choices=DATAPLANES, default="xdp",
                   help="xdp (default): railab's XDP program forwards in every switch, attached "
                        "in native mode; xdp-generic: the same program in generic (skb) mode, "
                        "faster on veth pairs (railab bench fabric); kernel: Linux IP forwarding "
                        "with the controller's routes as multipath kernel routes (L4 hash), no "
                        "XDP -- the baseline to compare with")


def check_dataplane(runtime: str, dataplane: str) -> None:
    if dataplane == "kernel" and runtime != "netns":
        raise UsageError("--dataplane kernel: only with the netns runtime "
                         "(not built for --runtime containerlab)")


def run(args) -> int:
    check_dataplane(args.runtime, args.dataplane)
    topo = load_topology(args.file)
    if args.name is not None:
        topo.name = check_lab_name(args.name)
    spec = labspec.build(topo, str(args.file), runtime=args.runtime, dataplane=args.dataplane)
    hosts = None
    if args.hosts:
        hosts = multihost.parse_hosts(args.hosts)
        result = hostdeploy.deploy(spec, hosts, multihost.place(topo, hosts))
    else:
        result = lifecycle.deploy(spec)
    if result.already_up:
        print(f"lab {spec.name} is already deployed; nothing to do")
        return 0
    switches = len(spec.switches)
    print(f"lab {spec.name} deployed in {result.seconds:.1f} s ({spec.runtime} runtime): "
          f"{len(spec.hosts)} hosts, {switches} switches ({spec.dataplane} forwarding), "
          f"{sum(len(n.interfaces) for n in spec.nodes) // 2} links (railab inspect {spec.name})"
          + (f" over {len(hosts)} machines" if hosts else ""))
    return 0
