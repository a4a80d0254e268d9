"""`railab inspect [LAB] [--json]`: what a deployed lab consists of."""
from __future__ import annotations

import json

from dataplane.cli.common import load_lab, single_lab


def register(sub) -> None:
    p = sub.add_parser("inspect", help="show a deployed lab's nodes and interfaces")
    p.add_argument("lab", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def describe(spec) -> dict:
    return {
        "name": spec.name,
        "source": spec.source,
        "runtime": spec.runtime,
        "nodes": [
            {
                "name": n.name, "role": "external" if n.external else n.role, "netns": n.netns,
                "kind": n.kind,
                "interfaces": [
                    {"name": i.name, "address": i.address, "peer": i.peer, "mac": i.mac,
                     "ifindex": i.ifindex, "speed_bps": i.speed_bps}
                    for i in n.interfaces
                ],
            }
            for n in spec.nodes
        ],
    }


def run(args) -> int:
    lab_state = load_lab(single_lab(args.lab))
    data = describe(lab_state.spec)
    data["status"] = lab_state.status
    if lab_state.status == "up":
        from dataplane.runtime import lifecycle
        if not lifecycle.is_up(lab_state.spec.name):   # the agent died or namespaces went
            data["status"] = "broken"
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    from rich.table import Table

    from dataplane.cli.common import console

    title = f"lab {data['name']} ({data['status']}, {data['runtime']} runtime)"
    if data["status"] == "broken":
        title += f": its agent or namespaces are gone; railab destroy {data['name']}"
    table = Table(title=title)
    for column in ("node", "role", "netns", "interface", "address", "peer"):
        table.add_column(column)
    for node in data["nodes"]:
        for k, iface in enumerate(node["interfaces"]):
            first = k == 0
            table.add_row(node["name"] if first else "", node["role"] if first else "",
                          node["netns"] if first else "", iface["name"], iface["address"] or "-", iface["peer"])
    console().print(table)
    return 0
