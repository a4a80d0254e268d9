"""`railab bench arn [--runs N] [--busy] [--json]`: the link-down notice path of the agent
against the data plane's, side by side (the measuring is dataplane.bench.arn)."""
from __future__ import annotations

import json
import os
import sys

from rich.table import Table

from dataplane.cli.common import output_console, positive
from dataplane.runtime import lifecycle


def register(which) -> None:
    a = which.add_parser("arn", help="link-down notices by the agent vs by the data plane: the reaction "
                                     "(first packet into the dead group -> upstream's first packet "
                                     "avoiding it) and packets lost per affected flow")
    a.add_argument("--runs", type=positive(int), default=3, help="runs of the experiment per path (default 3)")
    a.add_argument("--busy", action="store_true",
                   help="then the same again while a spinner process keeps one core busy")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=run_arn)


def run_arn(args) -> int:
    from dataplane.bench.arn import bench_arn   # deferred: it imports the experiment runner (scapy, numpy)

    lifecycle.require_root()
    result = bench_arn(runs=args.runs, busy=args.busy, log=lambda text: print(text, file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    table = Table(title=f"railab bench arn: {os.path.basename(result['experiment'])}, {result['runs']} run(s) "
                        f"per path, {os.cpu_count()} CPUs")
    for col in ("core busy", "arn path", "mode", "reaction p50", "reaction max", "excluded max",
                "cut -> avoided p50 / max",
                "lost per affected flow (worst flow, each run)", "affected flows", "target met"):
        table.add_column(col, justify="right" if col.startswith(("reaction", "excluded", "cut")) else "left",
                         no_wrap=True)
    for r in result["summary"]:
        missing = f" ({r['reaction_missing']} without)" if r["reaction_missing"] else ""
        met = "" if "met" not in r else ("yes" if r["met"] else "[red]NO[/red]")
        table.add_row("yes" if r["busy"] else "no", r["arn_path"] or "-", r["mode"],
                      _ms(r["reaction_p50_ms"]), _ms(r["reaction_max_ms"]) + missing, _ms(r["excluded_max_ms"]),
                      f"{_ms(r['cut_to_avoided_p50_ms'])} / {_ms(r['cut_to_avoided_max_ms'])}",
                      ", ".join(map(str, r["lost_per_flow_by_run"])),
                      ", ".join(map(str, sorted(set(r["affected_flows"])))), met)
    output_console().print(table)
    t = result["targets"]
    print(f"targets (issue 27, data-plane path): reaction <= {t['dataplane_reaction_ms']:g} ms wall, "
          f"<= {t['dataplane_lost_per_flow']} packets lost per affected flow in every run; reaction = the "
          "spine's first packet into the dead group -> the first upstream's first packet avoiding it, "
          "from the data plane's own stamps (it includes the wait for that upstream's next packet there); "
          "excluded = the same start -> the first exclusion installed (data-plane path only); "
          "cut -> avoided = the last cut made -> the first packet an upstream steered around it (both paths)")
    return 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} ms"
