"""`railab nav LAB start|stop|status [--interval US] [--json]`: the lab's path-navigation
controller (dataplane/agent/nav.py), which places the heavy flows on paths for the whole
fabric at once and installs them as dynamic traffic-matrix entries."""
from __future__ import annotations

import json

from rich.table import Table

from dataplane.cli.common import load_lab, output_console, single_lab
from dataplane.lab.fabric import Fabric
from dataplane.units import fmt_speed


def register(sub) -> None:
    p = sub.add_parser("nav", help="path navigation: a global controller for the heavy flows")
    p.add_argument("lab")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--interval", type=float, metavar="US",
                   help="controller interval in real-fabric microseconds (default 2)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    lab = single_lab(args.lab)
    load_lab(lab)
    fabric = Fabric(lab)
    if args.action == "start":
        status = fabric.nav_start(args.interval)
    elif args.action == "stop":
        status = fabric.nav_stop()
    else:
        status = fabric.nav_status()
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    console = output_console()
    console.print(f"nav on {lab}: {'running' if status['running'] else 'stopped'}, interval "
                  f"{status['interval_us']:g} us real = {status['interval_wall_s']:.3g} s wall "
                  f"(scale {status['scale']:g}); {status['plans']} plans, {status['moves']} moves"
                  + (f"; last error: {status['error']}" if status.get("error") else ""))
    entries = ", ".join(f"{s}={n}" for s, n in sorted(status["entries_per_switch"].items())) or "none"
    console.print(f"entries per switch: {entries}")
    if status["flows"]:
        table = Table(title="placed flows")
        for column in ("src", "dst", "sport", "dport", "rate", "announced", "path", "moves"):
            table.add_column(column)
        for f in status["flows"]:
            table.add_row(f["src"], f["dst"], str(f["sport"]), str(f["dport"]), fmt_speed(f["rate_bps"]),
                          "yes" if f["announced"] else "no", " ".join(f["path"]), str(f["moves"]))
        console.print(table)
    return 0
