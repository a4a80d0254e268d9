"""`railab tm add|del|list LAB ...`: static traffic-matrix entries (5-tuple -> egress
interface of one switch), overriding every load-balancing mode."""
from __future__ import annotations

import json

from dataplane.cli.common import single_lab
from dataplane.errors import UsageError
from dataplane.lab.fabric import Fabric


def register(sub) -> None:
    p = sub.add_parser("tm", help="static traffic-matrix entries of a running lab")
    which = p.add_subparsers(dest="tm_cmd", metavar="CMD", required=True)
    for name, help_ in (("add", "pin a 5-tuple to an egress interface"), ("del", "remove an entry")):
        s = which.add_parser(name, help=help_)
        s.add_argument("lab", nargs="?")
        s.add_argument("--switch", required=True)
        s.add_argument("--src", required=True)
        s.add_argument("--dst", required=True)
        s.add_argument("--sport", type=int, default=0)
        s.add_argument("--dport", type=int, default=0)
        s.add_argument("--proto", default="udp", help="udp, tcp, icmp or a number")
        if name == "add":
            s.add_argument("--egress", required=True, help="egress interface of the switch")
        s.set_defaults(func=run_add if name == "add" else run_del)
    ls = which.add_parser("list", help="entries and their match counters")
    ls.add_argument("lab", nargs="?")
    ls.add_argument("--switch")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)


def _flow(args) -> dict:
    proto = int(args.proto) if str(args.proto).isdigit() else args.proto
    return dict(src=args.src, dst=args.dst, sport=args.sport, dport=args.dport, proto=proto)


def run_add(args) -> int:
    lab = single_lab(args.lab)
    Fabric(lab).tm_add(args.switch, egress=args.egress, **_flow(args))
    print(f"lab {lab}: {args.switch}: {args.src}:{args.sport} -> {args.dst}:{args.dport} {args.proto} "
          f"via {args.egress}")
    return 0


def run_del(args) -> int:
    lab = single_lab(args.lab)
    found = Fabric(lab).tm_del(args.switch, **_flow(args))
    if not found:
        raise UsageError(f"lab {lab}: {args.switch} has no traffic-matrix entry "
                         f"{args.src}:{args.sport} -> {args.dst}:{args.dport} {args.proto}")
    print(f"lab {lab}: entry deleted")
    return 0


def run_list(args) -> int:
    lab = single_lab(args.lab)
    entries = Fabric(lab).tm_list(args.switch)
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    for e in entries:
        print(f"{e['switch']}: {e['src']}:{e['sport']} -> {e['dst']}:{e['dport']} proto {e['proto']} "
              f"via {e['egress']}  packets {e['packets']} bytes {e['bytes']}")
    if not entries:
        print(f"lab {lab}: no traffic-matrix entries")
    return 0
