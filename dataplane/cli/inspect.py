"""`railab inspect [LAB] [--json]`: what a deployed lab consists of; without LAB and with
several labs up, every lab, one line each (as `containerlab inspect --all` lists them)."""
from __future__ import annotations

import json

from rich.table import Table

from dataplane.cli.common import load_lab, single_lab
from dataplane.runtime import lifecycle, splitstate, state
from dataplane.cli.common import output_console


def register(sub) -> None:
    p = sub.add_parser("inspect", help="show a deployed lab's nodes and interfaces")
    p.add_argument("lab", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def describe(spec) -> dict:
    record = splitstate.load(spec.name)
    host_of = {n: p["host"] for p in record["parts"] for n in p["nodes"]} if record else {}
    data = {
        "name": spec.name,
        "source": spec.source,
        "runtime": spec.runtime,
        "attached": spec.attached,      # containerlab deployed it; `railab attach` took it
        "dataplane": spec.dataplane,
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
    if record:      # a lab split over machines: which machine runs each node
        data["machines"] = [{"host": p["host"], "address": p["address"], "part": p["part"],
                             "agent": f"{p['address']}:{p['port']}" if p.get("port") else None}
                            for p in record["parts"]]
        for node in data["nodes"]:
            node["host"] = host_of.get(node["name"])
    return data


def _status(lab_state) -> str:
    if lab_state.status == "up" and not lifecycle.is_up(lab_state.spec.name):
        return "broken"       # the agent died or namespaces went
    return lab_state.status


def run_all(labs: list[str], as_json: bool) -> int:
    """Every lab: name, status, kind, nodes, links, source file."""
    described = []
    for lab in labs:
        lab_state = state.load(lab)
        if lab_state is None:      # only namespaces or pinned objects are left
            described.append({"name": lab, "status": "leftovers", "nodes": [], "source": None, "kind": None,
                              "runtime": None})
            continue
        data = describe(lab_state.spec)
        data.update(status=_status(lab_state), kind=lab_state.spec.kind)
        described.append(data)
    if as_json:
        print(json.dumps(described, indent=2))
        return 0
    table = Table(title=f"{len(labs)} labs (railab inspect LAB for one lab's nodes)")
    for column in ("lab", "status", "runtime", "kind", "switches", "hosts", "links", "source"):
        table.add_column(column, justify="right" if column in ("switches", "hosts", "links") else "left")
    for data in described:
        nodes = data["nodes"]
        links = sum(len(n["interfaces"]) for n in nodes) // 2
        switches = sum(1 for n in nodes if n["role"] != "host")
        status = data["status"] + (f": railab destroy {data['name']}" if data["status"] in ("broken", "leftovers") else "")
        table.add_row(data["name"], status, data["runtime"] or "-", data["kind"] or "-", str(switches), str(len(nodes) - switches),
                      str(links), data["source"] or "-")
    output_console().print(table)
    return 0


def run(args) -> int:
    if not args.lab:
        labs = state.known_labs()
        if len(labs) > 1:
            return run_all(labs, args.json)
    lab_state = load_lab(single_lab(args.lab))
    data = describe(lab_state.spec)
    data["status"] = _status(lab_state)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    runtime = f"{data['runtime']} runtime" + (", attached" if data.get("attached") else "")
    title = f"lab {data['name']} ({data['status']}, {runtime}, {data['dataplane']} forwarding)"
    if data["status"] == "broken":
        title += f": its agent or namespaces are gone; railab destroy {data['name']}"
    machines = data.get("machines")
    if machines:
        title += " over " + ", ".join(f"{m['host']} (agent {m['agent']})" for m in machines)
    table = Table(title=title)
    for column in ("node", "role", *(["host"] if machines else []), "netns", "interface", "address", "peer"):
        table.add_column(column)
    for node in data["nodes"]:
        for k, iface in enumerate(node["interfaces"]):
            first = k == 0
            table.add_row(node["name"] if first else "", node["role"] if first else "",
                          *([node["host"] if first else ""] if machines else []), node["netns"] if first else "", iface["name"], iface["address"] or "-", iface["peer"])
    output_console().print(table)
    return 0
