"""`railab probe LAB [--json]`: UDP reachability between every pair of host NICs."""
from __future__ import annotations

import json
import time

from dataplane.cli.common import load_lab, single_lab


def register(sub) -> None:
    p = sub.add_parser("probe", help="probe reachability between every pair of host NICs")
    p.add_argument("lab", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _counter_totals(lab: str) -> dict[str, dict]:
    from dataplane.runtime import agent_client

    snapshot = agent_client.request(lab, "counters")["switches"]
    totals = {}
    for switch, data in snapshot.items():
        rx = sum(p.get("rx_packets", 0) for p in data["ports"].values())
        drops: dict[str, int] = {}
        for port in data["ports"].values():
            for reason, n in port.get("drops", {}).items():
                drops[reason] = drops.get(reason, 0) + n
        totals[switch] = {"rx": rx, "drops": drops}
    return totals


def make_tracer(spec):
    from dataplane.probe import send_once

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
    from dataplane.probe import run_probe

    lab = single_lab(args.lab)
    spec = load_lab(lab).spec
    result = run_probe(spec, tracer=make_tracer(spec))
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(f"lab {lab}: {result.ok}/{result.pairs} NIC pairs ok")
        for f in result.failed:
            print(f"  FAILED {f['a']} <-> {f['b']}: {f['direction']}: {f.get('died_at', '')}")
    return 0 if result.ok == result.pairs else 1
