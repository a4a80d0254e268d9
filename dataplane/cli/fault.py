"""`railab fault LAB ACTION ...`: fault injection on a running lab (dataplane/lab/faults.py).

    railab fault LAB link-down A:IF [B:IF]      railab fault LAB link-up A:IF [B:IF]
    railab fault LAB switch-down NAME           railab fault LAB switch-up NAME
    railab fault LAB plane-down N               railab fault LAB plane-up N
    railab fault LAB degrade A:IF --speed 100G  railab fault LAB restore A:IF
    railab fault LAB clear                      railab fault LAB status
    railab fault LAB arn [--on|--off] [--notify/--no-notify] [--util U] [--queue-bytes B]
                         [--hold-ms MS] [--interval-ms MS] [--granularity prefix|flow]
                         [--arn-path agent|dataplane] [--arn-capture|--no-arn-capture]
"""
from __future__ import annotations

import json
import sys

from dataplane.cli.common import load_lab
from dataplane.lab import faults


def register(sub) -> None:
    p = sub.add_parser("fault", help="inject faults (links, switches, planes, port speed) and "
                                     "configure failure/congestion notifications")
    p.add_argument("lab")
    which = p.add_subparsers(dest="fault_cmd", metavar="ACTION", required=True)
    for name in ("link-down", "link-up"):
        s = which.add_parser(name, help=f"{name.replace('-', ' ')} between A:IF and its peer")
        s.add_argument("a", metavar="A:IF")
        s.add_argument("b", metavar="B:IF", nargs="?")
    for name in ("switch-down", "switch-up"):
        s = which.add_parser(name, help="all ports of a switch " + name.split("-")[1]
                             + (" (state reset first)" if name.endswith("up") else ""))
        s.add_argument("switch")
    for name in ("plane-down", "plane-up"):
        s = which.add_parser(name, help=f"every switch of plane N {name.split('-')[1]} (lab's plane labels)")
        s.add_argument("plane", type=int)
    s = which.add_parser("degrade", help="lower an emulated port speed (nominal; the port-model scale applies)")
    s.add_argument("port", metavar="A:IF")
    s.add_argument("--speed", required=True, help="e.g. 100G")
    s = which.add_parser("restore", help="undo degrade")
    s.add_argument("port", metavar="A:IF")
    which.add_parser("clear", help="undo every active fault")
    s = which.add_parser("status", help="active faults, notification counters, exclusions")
    s.add_argument("--json", action="store_true")
    s = which.add_parser("arn", help="configure FGLB link-down notices and ARN on congestion")
    onoff = s.add_mutually_exclusive_group()
    onoff.add_argument("--on", dest="arn", action="store_true", default=None)
    onoff.add_argument("--off", dest="arn", action="store_false")
    notify = s.add_mutually_exclusive_group()
    notify.add_argument("--notify", dest="notify", action="store_true", default=None)
    notify.add_argument("--no-notify", dest="notify", action="store_false")
    s.add_argument("--util", type=float, dest="arn_util", help="utilisation limit 0..1")
    s.add_argument("--queue-bytes", type=int, dest="arn_queue_bytes")
    s.add_argument("--hold-ms", type=float)
    s.add_argument("--interval-ms", type=float)
    s.add_argument("--poll-ms", type=float)
    s.add_argument("--granularity", help="congestion reaction: prefix (avoid the spine for the "
                   "whole prefix; default) or flow (move only the flows the spine caught)")
    s.add_argument("--arn-path", help="who makes and consumes link-down notices: agent (default) "
                   "or dataplane (the switches' XDP programs)")
    capture = s.add_mutually_exclusive_group()
    capture.add_argument("--arn-capture", dest="arn_capture", action="store_true", default=None,
                         help="dataplane path: consumed notices also go up the receiving switch's "
                              "stack, so that tcpdump on its port sees them")
    capture.add_argument("--no-arn-capture", dest="arn_capture", action="store_false")
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        return _run(args)
    except (ValueError, KeyError) as err:
        print(f"railab: error: {err}", file=sys.stderr)
        return 2


def _run(args) -> int:
    cmd = args.fault_cmd
    lab = args.lab
    load_lab(lab)
    if cmd == "status":
        st = faults.status(lab)
        if args.json:
            print(json.dumps(st, indent=2))
            return 0
        f = st["faults"]
        print(f"lab {lab}: links down: {', '.join(f['links_down']) or '-'}; switches down: "
              f"{', '.join(f['switches_down']) or '-'}; degraded: "
              f"{', '.join(f'{k}={v / 1e9:g}G' for k, v in f['degraded'].items()) or '-'}")
        cfg = st["config"]
        print(f"notify={'on' if cfg['notify'] else 'off'} arn={'on' if cfg['arn'] else 'off'} "
              f"util>={cfg['arn_util']} queue>={cfg['arn_queue_bytes']}B hold={cfg['hold_ms']}ms real-fabric time "
              f"granularity={cfg['granularity']} arn_path={cfg.get('arn_path', 'agent')}")
        for sw, c in sorted(st["counters"].items()):
            print(f"  {sw}: " + " ".join(f"{k}={v}" for k, v in sorted(c.items())))
        moved = {k: v for k, v in st.get("dataplane_notices", {}).items() if v}
        if moved:   # the switches' programs, all together: notices, malformed ones, the link watch
            print("  data plane: " + " ".join(f"{k}={v}" for k, v in moved.items()))
        for e in st["exclusions"]:
            print(f"  exclusion {e['switch']} {e['prefix']}: avoid {', '.join(e['reporters'])}")
        for m in st.get("flow_moves", []):
            src, dst, sport, dport, proto = m["flow"]
            print(f"  flow moved {m['switch']} {src}:{sport}->{dst}:{dport}/{proto}: out {m['egress']} "
                  f"(avoid {m['avoid']})")
        return 0
    if cmd == "arn":
        cfg = faults.notifications(lab, notify=args.notify, arn=args.arn, arn_util=args.arn_util,
                                   arn_queue_bytes=args.arn_queue_bytes, hold_ms=args.hold_ms,
                                   interval_ms=args.interval_ms, poll_ms=args.poll_ms,
                                   granularity=args.granularity, arn_path=args.arn_path,
                                   arn_capture=args.arn_capture)
        print(json.dumps(cfg))
        return 0
    event = {"fault": cmd}
    if cmd in ("link-down", "link-up"):
        event.update(a=args.a, b=args.b)
    elif cmd in ("switch-down", "switch-up"):
        event["switch"] = args.switch
    elif cmd in ("plane-down", "plane-up"):
        event["plane"] = args.plane
    elif cmd == "degrade":
        event.update(port=args.port, speed=args.speed)
    elif cmd == "restore":
        event["port"] = args.port
    res = faults.apply(lab, event)
    print(json.dumps(res))
    return 0
