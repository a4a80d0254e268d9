"""`railab counters LAB [--switch NAME] [--json] [--links]`: switch port and group counters,
read live from the data plane through the lab's agent, and the lab-wide XDP verdicts and
drops by reason (drops no port owns, such as unknown_port, show only there)."""
from __future__ import annotations

import json

from rich.table import Table

from dataplane.agent import client
from dataplane.agent.protocol import CounterSnapshot
from dataplane.cli.common import load_lab, output_console, single_lab
from dataplane.lab.fabric import Fabric
from dataplane.units import fmt_speed


def register(sub) -> None:
    p = sub.add_parser("counters", help="show switch port and group counters")
    p.add_argument("lab", nargs="?")
    p.add_argument("--switch", help="only this switch")
    p.add_argument("--json", action="store_true")
    p.add_argument("--links", action="store_true", help="packets per link and direction")
    p.add_argument("--flows", action="store_true",
                   help="the heaviest flows per egress port over a window (flow visibility)")
    p.add_argument("--window-us", type=float, help="with --flows: window in real-fabric us (default 10)")
    p.add_argument("--top", type=int, help="with --flows: flows per port (default 8)")
    p.set_defaults(func=run)


def link_rows(spec, counters: CounterSnapshot) -> list[tuple[str, str, int, int]]:
    """(end a, end b, packets a->b, packets b->a) per link, from the switch side(s)."""
    rows, seen = [], set()
    for node in spec.nodes:
        for iface in node.interfaces:
            here = f"{node.name}:{iface.name}"
            key = frozenset((here, iface.peer))
            if key in seen:
                continue
            seen.add(key)
            mine = counters.port(node.name, iface.name)
            theirs = counters.port(iface.peer_node, iface.peer_if)
            forward = mine.tx_packets if mine else (theirs.rx_packets if theirs else 0)
            backward = theirs.tx_packets if theirs else (mine.rx_packets if mine else 0)
            rows.append((here, iface.peer, forward, backward))
    return rows


def lab_wide_table(lab: str, counters: CounterSnapshot) -> Table:
    """Every XDP verdict of the lab's program and its drops by reason, all switches."""
    table = Table(title=f"lab {lab}: all switches, every frame")
    for column in ("verdict / drop reason", "packets", "bytes"):
        table.add_column(column, justify="left" if column.startswith("verdict") else "right")
    for verdict, c in counters.verdicts.items():
        table.add_row(verdict, f"{c.get('packets', 0):,}", f"{c.get('bytes', 0):,}")
    for reason, n in counters.drops.items():
        table.add_row(f"drop: {reason}", f"{n:,}", "")
    return table


def run_flows(lab: str, args) -> int:
    flows = Fabric(lab).flows(args.switch, args.window_us, args.top)
    if args.json:
        print(json.dumps(flows, indent=2))
        return 0
    table = Table(title=f"lab {lab}: heaviest flows per egress port")
    for column in ("switch", "port", "src", "dst", "sport", "dport", "proto", "rate", "of port", "bytes"):
        table.add_column(column, justify="right" if column in ("rate", "of port", "bytes", "sport", "dport") else "left")
    for f in flows:
        table.add_row(f["switch"], f["port"], f["src"], f["dst"], str(f["sport"]), str(f["dport"]),
                      str(f["proto"]), fmt_speed(f["rate_bps"]), f"{f['share']:.0%}", f"{f['bytes']:,}")
    output_console().print(table)
    return 0


def run(args) -> int:
    lab = single_lab(args.lab)
    spec = load_lab(lab).spec
    if args.flows:
        return run_flows(lab, args)
    counters = client.counters(lab, args.switch)
    if args.json:
        print(json.dumps(counters.to_wire(), indent=2))
        return 0
    console = output_console()
    if args.links:
        table = Table(title=f"lab {lab}: packets per link")
        for column, justify in (("a", "left"), ("b", "left"), ("a->b", "right"), ("b->a", "right")):
            table.add_column(column, justify=justify)
        for a, b, fwd, back in link_rows(spec, counters):
            table.add_row(a, b, str(fwd), str(back))
        console.print(table)
        return 0
    real = any(c.shaper is not None for _, _, c in counters.ports())
    if spec.dataplane == "kernel":
        title = f"lab {lab}: switch ports (kernel forwarding: the kernel's link counters, no port model)"
    else:
        title = (f"lab {lab}: switch ports (speed: emulated/nominal; queue: "
                 f"{'bytes waiting in each port shaper (real queues)' if real else 'virtual backlog'})")
    table = Table(title=title)
    for column in ("switch", "port", "speed", "rx pkts", "tx pkts", "tx bytes", "ecn", "util", "queue B",
                   "drops"):
        table.add_column(column, justify="left" if column in ("switch", "port", "drops") else "right")
    for switch, port, c in counters.ports():
        drops = ", ".join(f"{k}={v}" for k, v in c.drops.items() if v) or "-"
        speed = f"{fmt_speed(c.speed_bps)}/{fmt_speed(c.nominal_speed_bps)}"
        queue = c.shaper.get("backlog_bytes", c.queue_bytes) if c.shaper is not None else c.queue_bytes
        table.add_row(switch, port, speed, str(c.rx_packets), str(c.tx_packets), str(c.tx_bytes),
                      str(c.ecn_marked), f"{c.utilization:.0%}", str(queue), drops)
    console.print(table)
    console.print(lab_wide_table(lab, counters))
    return 0
