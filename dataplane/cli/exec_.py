"""`railab exec LAB NODE -- CMD...`: run a command inside a node, like `containerlab exec`."""
from __future__ import annotations

import os

from dataplane.cli.common import load_lab
from dataplane.errors import RuntimeStateError


def register(sub) -> None:
    p = sub.add_parser("exec", help="run a command inside a lab node")
    p.add_argument("lab")
    p.add_argument("node")
    p.add_argument("command", nargs="+", help="command to run (put it after --)")
    p.set_defaults(func=run)


def run(args) -> int:
    spec = load_lab(args.lab).spec
    try:
        node = spec.node(args.node)
    except KeyError:
        names = ", ".join(n.name for n in spec.nodes)
        raise RuntimeStateError(f"lab {args.lab} has no node {args.node!r} (nodes: {names})")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    os.execvp("ip", ["ip", "netns", "exec", node.netns, *command])
