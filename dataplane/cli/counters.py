"""`railab counters LAB [--switch NAME] [--json] [--links]`: switch port and group counters,
read live from the data plane through the lab's agent."""
from __future__ import annotations

import json

from dataplane.cli.common import load_lab, single_lab


def register(sub) -> None:
    p = sub.add_parser("counters", help="show switch port and group counters")
    p.add_argument("lab", nargs="?")
    p.add_argument("--switch", help="only this switch")
    p.add_argument("--json", action="store_true")
    p.add_argument("--links", action="store_true", help="packets per link and direction")
    p.set_defaults(func=run)


def link_rows(spec, counters: dict) -> list[tuple[str, str, int, int]]:
    """(end a, end b, packets a->b, packets b->a) per link, from the switch side(s)."""
    switches = counters["switches"]
    rows, seen = [], set()
    for node in spec.nodes:
        for iface in node.interfaces:
            here = f"{node.name}:{iface.name}"
            key = frozenset((here, iface.peer))
            if key in seen:
                continue
            seen.add(key)
            peer_node, peer_if = iface.peer.split(":", 1)
            mine = switches.get(node.name, {}).get("ports", {}).get(iface.name)
            theirs = switches.get(peer_node, {}).get("ports", {}).get(peer_if)
            forward = mine["tx_packets"] if mine else (theirs["rx_packets"] if theirs else 0)
            backward = theirs["tx_packets"] if theirs else (mine["rx_packets"] if mine else 0)
            rows.append((here, iface.peer, forward, backward))
    return rows


def run(args) -> int:
    from dataplane.runtime import agent_client

    lab = single_lab(args.lab)
    spec = load_lab(lab).spec
    counters = agent_client.request(lab, "counters", switch=args.switch)
    if args.json:
        print(json.dumps(counters, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if args.links:
        table = Table(title=f"lab {lab}: packets per link")
        for column, justify in (("a", "left"), ("b", "left"), ("a->b", "right"), ("b->a", "right")):
            table.add_column(column, justify=justify)
        for a, b, fwd, back in link_rows(spec, counters):
            table.add_row(a, b, str(fwd), str(back))
        console.print(table)
        return 0
    from dataplane.cli.lb import fmt_speed

    real = any("shaper" in c for d in counters["switches"].values() for c in d["ports"].values())
    table = Table(title=f"lab {lab}: switch ports (speed: emulated/nominal; queue: "
                        f"{'bytes waiting in each port shaper (real queues)' if real else 'virtual backlog'})")
    for column in ("switch", "port", "speed", "rx pkts", "tx pkts", "tx bytes", "ecn", "util", "queue B",
                   "drops"):
        table.add_column(column, justify="left" if column in ("switch", "port", "drops") else "right")
    for switch, data in counters["switches"].items():
        for port, c in data["ports"].items():
            drops = ", ".join(f"{k}={v}" for k, v in c.get("drops", {}).items() if v) or "-"
            speed = f"{fmt_speed(c.get('speed_bps', 0))}/{fmt_speed(c.get('nominal_speed_bps', 0))}"
            table.add_row(switch, port, speed, str(c["rx_packets"]), str(c["tx_packets"]), str(c["tx_bytes"]),
                          str(c.get("ecn_marked", 0)), f"{c.get('utilization', 0):.0%}",
                          str((c.get("shaper") or {}).get("backlog_bytes", c.get("queue_bytes", 0))), drops)
    console.print(table)
    return 0
