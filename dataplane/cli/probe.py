"""`railab probe LAB [--json]`: UDP reachability between every pair of host NICs."""
from __future__ import annotations

import json
import time

from dataplane.agent import client
from dataplane.cli.common import load_lab, positive, single_lab
from dataplane.lab.probe import run_probe, send_once


def register(sub) -> None:
    p = sub.add_parser("probe", help="probe reachability between every pair of host NICs")
    p.add_argument("lab", nargs="?")
    p.add_argument("--sample", type=positive(int), metavar="N",
                   help="not every pair: one pair for every two leaves (both planes), then "
                        "random pairs up to N in all (for labs with a million pairs)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _counter_totals(lab: str) -> dict[str, dict]:
    """Per switch: packets received and drops by reason, over all its ports."""
    totals: dict[str, dict] = {}
    for switch, _, c in client.counters(lab).ports():
        total = totals.setdefault(switch, {"rx": 0, "drops": {}})
        total["rx"] += c.rx_packets
        for reason, n in c.drops.items():
            total["drops"][reason] = total["drops"].get(reason, 0) + n
    return totals


def make_tracer(spec):
    def trace(src, dst) -> str:
        before = _counter_totals(spec.name)
        send_once(spec, src, dst)
        time.sleep(0.3)
        after = _counter_totals(spec.name)
        saw, dropped = [], []
        for switch, now in after.items():
            if now["rx"] > before[switch]["rx"]:
                saw.append(switch)
            for reason, n in now["drops"].items():
                if n > before[switch]["drops"].get(reason, 0):
                    dropped.append(f"{switch} ({reason})")
        if dropped:
            return "dropped at " + ", ".join(dropped)
        if not saw:
            return f"never reached a switch from {src.host}:{src.port}"
        return f"lost after {', '.join(saw)} (no drop counted; the host {dst.host} did not deliver it)"

    return trace


def run(args) -> int:
    lab = single_lab(args.lab)
    spec = load_lab(lab).spec
    result = run_probe(spec, tracer=make_tracer(spec), sample=args.sample)
    if args.json:
        print(json.dumps({**result.to_json(), "sampled": args.sample is not None}, indent=2))
    else:
        how = f" (sampled: every leaf pair, then random, {args.sample} asked)" if args.sample else ""
        print(f"lab {lab}: {result.ok}/{result.pairs} NIC pairs ok{how}")
        for f in result.failed:
            print(f"  FAILED {f['a']} <-> {f['b']}: {f['direction']}: {f.get('died_at', '')}")
    return 0 if result.ok == result.pairs else 1
