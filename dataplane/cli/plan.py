"""`railab plan`: size a fabric before building it (BRIEF.md section 2).

    railab plan fat-tree --radix 64 --tiers 3
    railab plan dual-plane --gpus 16384
    railab plan rail-optimized --servers 128 --switch 12.8T
    railab plan rail-only --gpus 1024 --json
"""
from __future__ import annotations

import argparse
import json
import sys

from rich import box
from rich.console import Console
from rich.table import Table

from dataplane.cli.common import output_console
from dataplane.cli.topo import describe_nodes
from dataplane.errors import PlanError
from dataplane.topology import sizing, clab
from dataplane.topology.generate import command_line, generate
from dataplane.topology.model import Role, Topology
from dataplane.topology.sizing import FatTreePlan, RailPlan, format_speed

RAIL_DESIGNS = {
    "dual-plane": ("dual-plane rail-optimized: each NIC split over two identical planes", 2),
    "rail-optimized": ("rail-optimized: rail leaves plus a spine layer", 1),
    "rail-only": ("rail-only: one leaf per rail, no spines", 1),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="size a fabric: switches, links, cables",
        description="Sizing calculator: how many leaves, spines and links a fabric needs.",
    )
    designs = parser.add_subparsers(dest="design", metavar="DESIGN", required=True)

    ft = designs.add_parser(
        "fat-tree", help="largest non-blocking fat-tree of K-port switches",
        description="Full fat-tree of K-port switches: K^2/2 end ports in two tiers, "
                    "K^3/4 in three.",
    )
    ft.add_argument("--radix", "-k", type=int, required=True, metavar="K",
                    help="ports per switch (even)")
    ft.add_argument("--tiers", type=int, default=2, metavar="{2,3}",
                    help="2 = leaf-spine, 3 = core-spine-leaf (default 2)")
    ft.add_argument("--speed", default="400G", metavar="SPEED",
                    help="port speed of every link in a written lab (default 400G)")
    ft.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _output_args(ft)
    ft.set_defaults(func=run_fat_tree)

    for name, (help_text, planes) in RAIL_DESIGNS.items():
        p = designs.add_parser(name, help=help_text, description=help_text + ".")
        size = p.add_argument_group("size (one of)")
        size.add_argument("--gpus", type=int, metavar="N", help="GPUs in the cluster")
        size.add_argument("--servers", type=int, metavar="N", help="servers in the cluster")
        p.add_argument("--gpus-per-server", "-g", type=int, default=8, metavar="G",
                       help="GPUs (= NICs = rails) per server (default 8)")
        p.add_argument("--switch", metavar="NAME",
                       help=f"switch: {', '.join(sizing.SWITCHES)} or custom (default 51.2T)")
        p.add_argument("--ports", type=int, metavar="P", help="custom switch: native ports")
        p.add_argument("--port-speed", metavar="S", help="custom switch: native port speed")
        p.add_argument("--nic", default="400G", metavar="SPEED",
                       help="NIC speed, split evenly over the planes (default 400G)")
        p.add_argument("--planes", type=int, default=planes, metavar="N",
                       help=f"identical planes, one NIC port each (default {planes})")
        if name != "rail-only":
            p.add_argument("--link-speed", metavar="SPEED",
                           help="leaf-spine link speed (default: NIC speed, capped at the "
                                "switch's native port speed)")
            p.add_argument("--spines", type=int, metavar="N",
                           help="spines per plane (default: fewest that fit)")
            p.add_argument("--oversubscription", default="1:1", metavar="DOWN:UP",
                           help="leaf downlink:uplink bandwidth (default 1:1)")
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        _output_args(p)
        p.set_defaults(func=run_rail, rail_design=name)


def _output_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="also write the planned lab as a containerlab file (through the "
                             "topology generator; `railab topo check` and `railab deploy` read it)")
    parser.add_argument("--name", help="lab name in the written file (default: the design's)")


# --------------------------------------------------------------------------- runners


def run_fat_tree(args: argparse.Namespace) -> int:
    result = sizing.plan_fat_tree(args.radix, args.tiers)
    if args.json:
        _print_json(result.to_dict())
    else:
        _console().print(fat_tree_table(result))
    if args.output:
        _write(args, result, speed=args.speed)
    return 0


def run_rail(args: argparse.Namespace) -> int:
    switch = sizing.get_switch(args.switch, args.ports, args.port_speed)
    spined = args.rail_design != "rail-only"
    result = sizing.plan_rail_fabric(
        gpus=args.gpus, servers=args.servers, gpus_per_server=args.gpus_per_server,
        switch=switch, nic_speed=args.nic, planes=args.planes, spines=spined,
        link_speed=args.link_speed if spined else None,
        spines_per_plane=args.spines if spined else None,
        ratio=args.oversubscription if spined else (1, 1),
        design=None if spined else "rail-only",   # spined designs are named by plane count
    )
    if args.json:
        _print_json(result.to_dict())
    else:
        console = _console()
        console.print(rail_table(result))
        console.print(rail_details(result))
    if args.output:
        _write(args, result)
    return 0


def _write(args: argparse.Namespace, result: RailPlan | FatTreePlan, **options) -> None:
    topo = write_lab(result, args.output, args.name, **options)
    print(f"wrote {args.output}: {describe_nodes(topo)}, {len(topo.links)} links",
          file=sys.stderr if args.json else sys.stdout)


def write_lab(result: RailPlan | FatTreePlan, path: str, name: str | None = None,
              **options) -> Topology:
    """The planned fabric as a containerlab file, built by the topology generator; refused
    if what the generator builds differs from the plan (counts of hosts and switches)."""
    kind, params = result.generator_params(**options)
    planned = result.node_counts()
    topo = generate(kind, name=name, **params)
    roles = [n.role for n in topo.nodes.values()]
    built = {"leaves": roles.count(Role.LEAF), "spines": roles.count(Role.SPINE),
             "cores": roles.count(Role.CORE), "hosts": roles.count(Role.HOST)}
    if built != planned:
        raise PlanError(f"the generator builds {built} where the plan has {planned}; not written")
    header = f"railab {topo.kind} fabric, as planned by railab plan. Same as: {command_line(topo)}"
    clab.write(topo, path, header)
    return topo


# --------------------------------------------------------------------------- rendering


def _console() -> Console:
    return output_console()


def _print_json(data: dict) -> None:
    print(json.dumps(data, indent=2))


def fat_tree_table(p: FatTreePlan) -> Table:
    k, half = p.radix, p.radix // 2
    shape = "leaf-spine" if p.tiers == 2 else "core-spine-leaf"
    table = Table(title=f"fat-tree, {p.tiers} tiers ({shape}), {k}-port switches",
                  box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_column("how", style="dim")
    table.add_row("end ports (max)", f"{p.max_end_ports:,}",
                  "K^2/2" if p.tiers == 2 else "K^3/4")
    if p.tiers == 3:
        table.add_row("pods", f"{p.pods:,}", "K")
    table.add_row("leaves", f"{p.leaves:,}",
                  f"K, each {half} down + {half} up" if p.tiers == 2
                  else f"K^2/2 = {half} per pod, each {half} down + {half} up")
    table.add_row("spines", f"{p.spines:,}",
                  "K/2, all K ports to leaves" if p.tiers == 2
                  else f"K^2/2 = {half} per pod, {half} to leaves + {half} to cores")
    if p.tiers == 3:
        table.add_row("cores", f"{p.cores:,}", "K^2/4, one link to each pod")
    table.add_row("switches", f"{p.switches:,}", "")
    table.add_row("links per leaf-spine pair", str(p.links_per_leaf_spine),
                  "every leaf to every spine" + (" of its pod" if p.tiers == 3 else ""))
    table.add_row("host links", f"{p.host_links:,}", "")
    table.add_row("fabric links", f"{p.fabric_links:,}",
                  "leaf-spine" if p.tiers == 2 else
                  f"{p.leaf_spine_links:,} leaf-spine + {p.spine_core_links:,} spine-core")
    return table


def rail_table(p: RailPlan) -> Table:
    """Switch and cable counts, per plane and in total."""
    n = p.planes
    host = format_speed(p.host_port_speed)
    link = format_speed(p.link_speed) if p.link_speed else ""
    title = f"{p.design}: {p.gpus:,} GPUs = {p.servers:,} servers x {p.gpus_per_server}"
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("")
    if n > 1:
        table.add_column("per plane", justify="right")
        table.add_column(f"total ({n} planes)", justify="right")
    else:
        table.add_column("count", justify="right")

    def row(label: str, per_plane: int) -> None:
        cells = [f"{per_plane:,}", f"{per_plane * n:,}"] if n > 1 else [f"{per_plane:,}"]
        table.add_row(label, *cells)

    row("leaves", p.leaves_per_plane)
    if p.spine_ports:
        row("spines", p.spines_per_plane)
    row(f"host cables (NIC-leaf, {host})", p.host_ports_per_plane)
    if p.spines_per_plane:
        row(f"fabric cables (leaf-spine, {link})", p.fabric_cables_per_plane)
    row("optics (2 per cable)", 2 * (p.host_ports_per_plane + p.fabric_cables_per_plane))
    row("switch ports used", p.switch_ports_used_per_plane)
    return table


def rail_details(p: RailPlan) -> Table:
    """What each switch looks like, and the design's limit."""
    host = format_speed(p.host_port_speed)
    link = format_speed(p.link_speed) if p.link_speed else ""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("switch", p.switch.describe())
    split = f" = {p.planes} x {host}, one port per plane" if p.planes > 1 else ""
    grid.add_row("NIC", f"{format_speed(p.nic_speed)}{split}")
    rails = (f"{p.leaves_per_rail} leaves per rail ({p.rails} rails)" if p.leaves_per_rail > 1
             else f"{p.rails_per_leaf} rail{'s' if p.rails_per_leaf > 1 else ''} per leaf "
             f"({p.rails} rails)")
    grid.add_row("rails", rails)
    leaf = f"{p.leaf_downlinks_used_max} of {p.leaf_downlinks} x {host} down"
    if p.leaf_uplinks:
        leaf += f", {p.leaf_uplinks} x {link} up ({p.ratio[0]}:{p.ratio[1]})"
    grid.add_row("each leaf", leaf)
    if p.spines_per_plane:
        grid.add_row("each leaf-spine pair", f"{p.links_per_leaf_spine} x {link}")
        grid.add_row("each spine", f"{p.spine_ports_used} of {p.spine_ports} x {link} to leaves")
    limit = "rail-only max" if not p.spine_ports else "two-tier max"
    grid.add_row(limit, f"{p.max_gpus:,} GPUs ({p.max_servers:,} servers)")
    for note in p.notes:
        grid.add_row("note", note)
    return grid
