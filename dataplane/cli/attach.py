"""`railab attach LAB`: run railab's XDP switches in a lab that containerlab deployed
(from a file `railab topo images` rewrote); every other verb then works on it."""
from __future__ import annotations

from dataplane.cli.deploy import add_dataplane_option, check_dataplane
from dataplane.runtime import clabattach, lifecycle
from dataplane.runtime.state import check_lab_name


def register(sub) -> None:
    p = sub.add_parser("attach", help="run railab's switches in a lab containerlab deployed",
                       description=__doc__)
    p.add_argument("lab", help="the containerlab lab's name (containerlab inspect --all)")
    p.add_argument("-t", "--topology", metavar="FILE",
                   help="the file the lab was deployed from (default: the one containerlab "
                        "recorded on its containers)")
    add_dataplane_option(p)
    p.set_defaults(func=run)


def run(args) -> int:
    check_dataplane("containerlab", args.dataplane)
    lifecycle.require_root()
    spec = clabattach.build_spec(check_lab_name(args.lab), args.topology, args.dataplane)
    result = lifecycle.deploy(spec)
    if result.already_up:
        print(f"lab {spec.name} is already attached; nothing to do")
        return 0
    print(f"lab {spec.name} attached in {result.seconds:.1f} s: {len(spec.hosts)} hosts, "
          f"{len(spec.switches)} switches ({spec.dataplane} forwarding) in containerlab's "
          f"containers (railab destroy {spec.name} removes the lab with its containers)")
    return 0
