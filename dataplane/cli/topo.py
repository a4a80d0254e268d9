"""`railab topo gen KIND ...` writes a containerlab file; `railab topo check FILE` reads one;
`railab topo images FILE` rewrites one to railab's container images (for a plain
`containerlab deploy` followed by `railab attach`); `railab topo split FILE --hosts ...`
writes one such file per machine, joined by vxlan-stitch links."""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import yaml

from dataplane import yamlfile
from dataplane.errors import TopologyError
from dataplane.runtime.containerlab import node_image, switch_image
from dataplane.topology import clab, clabimages, multihost
from dataplane.topology.addressing import plan_addresses
from dataplane.topology.generate import ALL_PARAMS, command_line, flag, generate
from dataplane.topology.infer import natural_key
from dataplane.topology.model import FABRIC_KINDS, TIER, Role, Topology

PARAM_HELP = {
    "servers": "number of servers (default per kind, e.g. 8)",
    "rails": "GPUs = NICs per server; rail fabrics get one leaf per rail",
    "pods": "clos3: number of pods (servers are split equally)",
    "spines": "spines (per pod in clos3, per plane in dual-plane)",
    "cores": "clos3: number of core (super-spine) switches",
    "links_per_spine": "parallel links per leaf-spine pair (default: what the ratio needs)",
    "planes": "dual-plane: number of planes (must be 2)",
    "leaf_ports": "ports per switch, the radix (default 64); more servers than a leaf can "
                  "take form several scalable units",
    "oversubscription": "leaf downlink:uplink bandwidth, e.g. 1:1 (default) or 3:1",
    "speed": "port speed of host links (and of every link without --fabric-speed), e.g. "
             "400G (default), 100G, 1.6T",
    "fabric_speed": "port speed of switch-to-switch links (default: --speed)",
    "core_wiring": "clos3: mesh (every spine to every core, default) or groups (the k-ary "
                   "fat-tree's: spine s of each pod to core group s)",
}


def register(subparsers) -> None:
    topo = subparsers.add_parser("topo", help="generate or check containerlab topology files",
                                 description=__doc__)
    actions = topo.add_subparsers(dest="topo_action", metavar="ACTION", required=True)

    gen = actions.add_parser(
        "gen", help="generate a fabric as a containerlab file",
        description="Generate a fabric of KIND (" + ", ".join(FABRIC_KINDS) + ") as a "
                    "containerlab topology file.")
    gen.add_argument("kind", metavar="KIND", help="one of " + ", ".join(FABRIC_KINDS))
    for param in ALL_PARAMS:
        # Values are checked by the generator, so a bad one is a one-line error naming it.
        gen.add_argument(flag(param), dest=param, metavar="N" if param not in
                         ("oversubscription", "speed", "fabric_speed", "core_wiring") else "X", help=PARAM_HELP[param])
    gen.add_argument("--name", help="lab name (default: the kind)")
    gen.add_argument("-o", "--output", metavar="FILE", help="file to write (default: stdout)")
    gen.set_defaults(func=run_gen)

    check = actions.add_parser("check", help="read a containerlab file and say what railab sees",
                               description="Read any containerlab file; print its fabric.")
    check.add_argument("file", metavar="FILE")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(func=run_check)

    images = actions.add_parser(
        "images", help="rewrite a containerlab file to railab's node and switch images",
        description="Rewrite a containerlab file so that a plain `containerlab deploy` builds "
                    "it from railab's images (switches railab-switch, hosts railab-node, links "
                    "MTU 1500); then `railab attach LAB` runs railab's XDP switches in it.")
    images.add_argument("file", metavar="FILE")
    images.add_argument("-o", "--output", metavar="FILE", help="file to write (default: stdout)")
    images.set_defaults(func=run_images)

    split = actions.add_parser(
        "split", help="split a lab over machines: one containerlab file per host",
        description="Write one containerlab file per host (on railab's images), the links "
                    "between hosts as vxlan-stitch links. Nodes labelled railab.host run on "
                    "that host; the others are placed by the rule in docs/cli/topo.md.")
    split.add_argument("file", metavar="FILE")
    split.add_argument("--hosts", required=True, metavar="NAME=ADDRESS,...",
                       help="the machines and their underlay addresses, e.g. a=192.0.2.1,b=192.0.2.2")
    split.add_argument("--underlay-mtu", type=int, default=1500, metavar="BYTES",
                       help="MTU of the network between the hosts (default 1500); VXLAN needs "
                            "the fabric's 1500 plus 50")
    split.add_argument("-o", "--output", metavar="DIR", default=".", help="folder to write to (default: .)")
    split.set_defaults(func=run_split)


def run_gen(args: argparse.Namespace) -> int:
    topo = generate(args.kind, name=args.name, **{p: getattr(args, p) for p in ALL_PARAMS})
    header = f"railab {topo.kind} fabric. Made by: {command_line(topo)}"
    if args.output in (None, "-"):
        sys.stdout.write(clab.dumps(topo, header))
        return 0
    clab.write(topo, args.output, header)
    print(f"wrote {args.output}: {describe_nodes(topo)}, {len(topo.links)} links")
    return 0


def run_images(args: argparse.Namespace) -> int:
    text = yamlfile.read_text(args.file, TopologyError, "topology file")
    out = clabimages.rewrite(text, args.file, node_image(), switch_image())
    if args.output in (None, "-"):
        sys.stdout.write(out)
        return 0
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(out)
    except OSError as err:
        raise TopologyError(f"{args.output}: cannot write: {err.strerror}") from None
    print(f"wrote {args.output}: deploy it with `containerlab deploy -t {args.output}`, "
          f"then `railab attach {clab.parse(out, args.output).topology.name}`")
    return 0


def run_split(args: argparse.Namespace) -> int:
    hosts = multihost.parse_hosts(args.hosts)
    multihost.check_underlay_mtu(args.underlay_mtu)
    text = yamlfile.read_text(args.file, TopologyError, "topology file")
    rewritten = clabimages.rewrite(text, args.file, node_image(), switch_image())
    loaded = clab.parse(rewritten, args.file)
    where = multihost.place(loaded.topology, hosts)
    parts = multihost.split(clab.load_yaml(rewritten, args.file), loaded.topology, hosts, where)
    folder = Path(args.output)
    if not folder.is_dir():
        raise TopologyError(f"{folder}: no such folder")
    for host in hosts:
        part = parts[host.name]
        path = folder / f"{part['name']}.clab.yml"
        text = (f"# {args.file}, the part on host {host.name} ({host.address}): "
                f"containerlab deploy -t {path.name} there\n"
                + yaml.dump(part, Dumper=clabimages.CompactDumper, sort_keys=False, width=200))
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as err:
            raise TopologyError(f"{path}: cannot write: {err.strerror}") from None
        links = part["topology"]["links"]
        stitched = sum(1 for link in links if link.get("type") == "vxlan-stitch")
        print(f"wrote {path}: {sum(1 for n in part['topology']['nodes'] if where.get(n) == host.name)} "
              f"nodes, {len(links) - stitched} links inside, {stitched} to other hosts")
    return 0


def run_check(args: argparse.Namespace) -> int:
    loaded = clab.load(args.file)
    plan_addresses(loaded.topology)      # what deploy would refuse, check refuses too
    for warning in loaded.warnings:
        print(f"railab: warning: {warning}", file=sys.stderr)
    report = summary(loaded, args.file)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
    return 0


def link_class(topo: Topology, link) -> str:
    ends = sorted((topo.nodes[link.a.node].role, topo.nodes[link.b.node].role), key=TIER.get)
    return f"{ends[0].value}-{ends[1].value}"


def summary(loaded: clab.Loaded, path: str) -> dict:
    topo = loaded.topology
    roles = Counter(n.role.value for n in topo.nodes.values())
    return {
        "file": str(path),
        "name": topo.name,
        "kind": topo.kind,
        "params": topo.params,
        "nodes": {role.value: roles.get(role.value, 0) for role in Role},
        "roles": {role.value: sorted((n.name for n in topo.nodes.values() if n.role is role),
                                     key=natural_key) for role in Role},
        "node_kinds": dict(Counter(n.kind for n in topo.nodes.values())),
        "links": len(topo.links),
        "link_classes": dict(Counter(link_class(topo, l) for l in topo.links)),
        "rails": topo.rails(),
        "planes": topo.planes(),
        "pods": sorted({n.pod for n in topo.nodes.values() if n.pod is not None}),
        "renamed_interfaces": [{"node": n, "file": f, "linux": l} for n, f, l in loaded.renamed],
        "skipped_nodes": loaded.skipped,
        "warnings": loaded.warnings,
    }


def describe_nodes(topo: Topology) -> str:
    roles = Counter(n.role for n in topo.nodes.values())
    plural = {Role.HOST: "hosts", Role.LEAF: "leaves", Role.SPINE: "spines", Role.CORE: "cores"}
    return ", ".join(f"{roles[r]} {r.value if roles[r] == 1 else plural[r]}" for r in Role if roles[r])


def _names(names: list[str], shown: int = 12) -> str:
    if len(names) <= shown:
        return " ".join(names)
    return " ".join(names[:shown]) + f" ... ({len(names) - shown} more)"


def _numbers(values: list[int]) -> str:
    return " ".join(map(str, values)) if values else "none"


def render(report: dict) -> str:
    kind = report["kind"] or "not a railab-generated fabric (kind unknown)"
    nodes = ", ".join(f"{count} {role}" for role, count in report["nodes"].items() if count)
    classes = ", ".join(f"{count} {name}" for name, count in report["link_classes"].items())
    lines = [
        f"lab     {report['name']} ({report['file']})",
        f"kind    {kind}",
        f"nodes   {sum(report['nodes'].values())}: {nodes}",
        *(f"  {role:<6}{_names(names)}" for role, names in report["roles"].items() if names),
        f"links   {report['links']}: {classes}",
        f"rails   {_numbers(report['rails'])}",
        f"planes  {_numbers(report['planes'])}",
    ]
    if report["pods"]:
        lines.append(f"pods    {_numbers(report['pods'])}")
    if report["params"]:
        lines.append("params  " + " ".join(f"{k}={v}" for k, v in report["params"].items()))
    if report["renamed_interfaces"]:
        lines.append(f"renamed {len(report['renamed_interfaces'])} interfaces to Linux names, "
                     f"e.g. {report['renamed_interfaces'][0]['node']}:"
                     f"{report['renamed_interfaces'][0]['file']} -> "
                     f"{report['renamed_interfaces'][0]['linux']}")
    return "\n".join(lines)
