"""`railab lb set|show LAB ...`: load-balancing mode of a running lab's switches,
changed live through the lab's agent (see dataplane/lab/fabric.py)."""
from __future__ import annotations

import json

from rich.table import Table

from dataplane.cli.common import single_lab, output_console
from dataplane.errors import UsageError
from dataplane.lab.fabric import Fabric
from dataplane.units import fmt_speed
from dataplane.xdp import abi


def register(sub) -> None:
    p = sub.add_parser("lb", help="show or change load-balancing modes of a running lab")
    which = p.add_subparsers(dest="lb_cmd", metavar="CMD", required=True)
    s = which.add_parser("set", help="set the mode/parameters of a switch's (or a role's) groups")
    s.add_argument("lab", nargs="?")
    sel = s.add_mutually_exclusive_group()
    sel.add_argument("--switch", help="one switch")
    sel.add_argument("--role", help="every switch of this role (leaf, spine, core, ...)")
    s.add_argument("--mode", choices=list(abi.LB_MODES))
    s.add_argument("--seed", help="hash seed (integer) or 'auto' (per-switch default)")
    s.add_argument("--hash-fields", help="comma list: 5tuple, src_ip, dst_ip, proto, src_port, "
                                         "dst_port, bth_dqp, ingress_port")
    s.add_argument("--flowlet-timeout-us", type=float)
    s.add_argument("--busy-util", type=float, help="flowlet: member utilisation (0..1) above which "
                                                   "the busy timeout applies")
    s.add_argument("--busy-timeout-us", type=float)
    w = s.add_mutually_exclusive_group()
    w.add_argument("--weights", help="wcmp weights: '1,3' (member order) or 'up1=1,up2=3'")
    w.add_argument("--bandwidth", action="store_true", help="wcmp weights from member link speeds")
    s.add_argument("--lbn", help="'auto' or 'down1=0,down2=1,...' (LBN values of ingress ports)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_set)
    pm = which.add_parser("port-model", help="emulated ports of the whole lab (resets their queues)")
    pm.add_argument("lab", nargs="?")
    pm.add_argument("--scale", type=float, help="emulated speed = nominal x scale (0 = no model); "
                                                "e.g. 0.00025 = 400G -> 100 Mb/s")
    pm.add_argument("--buffer-bytes", type=int)
    pm.add_argument("--ecn-bytes", type=int, help="mark CE above this backlog (-1 = never)")
    pm.add_argument("--ecn", metavar="KMIN,KMAX,PMAX",
                    help="RED marking as DCQCN expects: no mark below KMIN bytes, probability "
                         "rising to PMAX at KMAX, every frame above KMAX (one number: a step)")
    pm.add_argument("--window-us", type=float, help="utilisation averaging window "
                                                    "(real-fabric us at the nominal speed)")
    pm.add_argument("--queue", choices=("virtual", "real"),
                    help="virtual: drops and marks, no added delay (fast); real: frames also "
                         "wait in a shaper qdisc at the port's speed (delay, reordering)")
    pm.add_argument("--pfc", choices=("on", "off"),
                    help="PFC on the lossless priority (needs --queue real)")
    pm.add_argument("--xoff-bytes", type=int, help="PFC: pause the neighbour above this many bytes "
                                                   "buffered from one ingress port")
    pm.add_argument("--xon-bytes", type=int, help="PFC: resume it at or below this many")
    pm.add_argument("--headroom-bytes", type=int, help="PFC: room above XOFF for frames in flight")
    pm.add_argument("--pfc-dscp", type=int, help="PFC: DSCP of the lossless priority (default 26)")
    pm.add_argument("--pfc-priority", type=int, help="PFC: the lossless priority 0-7 (default 3)")
    pm.add_argument("--pfc-quanta", type=int, help="PFC: pause time of an XOFF, in 512-bit-time "
                                                   "quanta at the nominal speed (default 65535)")
    pm.add_argument("--pfc-watchdog-us", type=float, help="PFC watchdog (hosts): a priority "
                    "paused this long without a break (real-fabric us) is dropped instead")
    pm.add_argument("--pfc-restore-us", type=float, help="PFC watchdog: for this long (real-fabric us)")
    pm.set_defaults(func=run_port_model)
    sh = which.add_parser("show", help="modes, seeds, groups and port speeds")
    sh.add_argument("lab", nargs="?")
    sh.add_argument("--json", action="store_true")
    sh.set_defaults(func=run_show)


def _kv_or_list(option: str, text: str | None, conv=float):
    if text is None or text == "auto":
        return text
    try:
        if "=" in text:
            return {k: conv(v) for k, v in (item.split("=", 1) for item in text.split(",") if item)}
        return [conv(v) for v in text.split(",") if v]
    except ValueError:
        kind = "integers" if conv is int else "numbers"
        raise UsageError(f"{option} {text!r}: values must be {kind}") from None


def _seed(text: str | None):
    if text is None or text == "auto":
        return text
    try:
        seed = int(text, 0)
    except ValueError:
        raise UsageError(f"--seed {text!r}: an integer (0 .. 2^32-1) or 'auto'") from None
    if not 0 <= seed < 2**32:
        raise UsageError(f"--seed {text!r}: must be between 0 and 2^32-1")
    return seed


def run_set(args) -> int:

    lab = single_lab(args.lab)
    seed = _seed(args.seed)
    lbn = _kv_or_list("--lbn", args.lbn, int)
    if isinstance(lbn, list):
        raise UsageError("--lbn takes 'auto' or IFACE=VALUE pairs")
    if isinstance(lbn, dict) and any(v < 0 for v in lbn.values()):
        raise UsageError(f"--lbn {args.lbn!r}: LBN values are 0 or more")
    weights = _kv_or_list("--weights", args.weights)
    if weights is not None and args.mode not in (None, "wcmp"):
        raise UsageError(f"--weights applies to --mode wcmp, not {args.mode}")
    if args.hash_fields is not None:
        try:
            abi.expand_hash_fields(args.hash_fields)
        except ValueError as err:
            raise UsageError(f"--hash-fields: {err}") from None
    result = Fabric(lab).set_mode(args.mode, switch=args.switch, role=args.role, seed=seed,
                                  hash_fields=args.hash_fields, flowlet_timeout_us=args.flowlet_timeout_us,
                                  busy_util=args.busy_util, busy_timeout_us=args.busy_timeout_us,
                                  weights=weights, bandwidth=args.bandwidth, lbn=lbn)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"lab {lab}: {len(result['groups'])} groups on {', '.join(result['switches'])} updated")
    return 0


def run_show(args) -> int:

    lab = single_lab(args.lab)
    data = Fabric(lab).show()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0

    pm = data["port_model"]
    clock = data.get("clock") or {}
    console = output_console()
    if data.get("dataplane") == "kernel":
        console.print(f"lab {lab}: kernel forwarding (--dataplane kernel): multipath routes hashed "
                      "per flow (ECMP only), no port model")
    else:
        console.print(port_model_text(lab, pm, clock))
    table = Table(title=f"lab {lab}: load balancing")
    for col in ("switch", "role", "seed", "group", "prefixes", "mode", "members (emulated/nominal speed)", "params"):
        table.add_column(col)
    for name, sw in data["switches"].items():
        for gid, g in sw["groups"].items():
            members = ", ".join(f"{m} ({fmt_speed(sw['ports'][m]['speed_bps'])}/"
                                f"{fmt_speed(sw['ports'][m]['nominal_speed_bps'])})" for m in g["members"])
            params = []
            if g["mode"] == "flowlet":
                params.append(f"timeout {real_wall(g, 'flowlet_timeout_us')}")
                if g["busy_util"]:
                    params.append(f"busy>{g['busy_util']:g}: {real_wall(g, 'busy_timeout_us')}")
            if g["weights"]:
                params.append("weights " + ":".join(f"{w:g}" for w in g["weights"]))
            table.add_row(name, sw["role"], str(sw["hash_seed"]), gid, " ".join(g["prefixes"][:3])
                          + (" ..." if len(g["prefixes"]) > 3 else ""), g["mode"], members, " ".join(params))
    console.print(table)
    return 0


def run_port_model(args) -> int:

    red = parse_ecn(args.ecn) if args.ecn is not None else {}
    if red and args.ecn_bytes is not None:
        raise UsageError("--ecn and --ecn-bytes both set the ECN threshold: give one")
    lab = single_lab(args.lab)
    ecn_bytes = red.pop("ecn_bytes", args.ecn_bytes)
    pm = Fabric(lab).set_port_model(scale=args.scale, buffer_bytes=args.buffer_bytes,
                                    ecn_bytes=ecn_bytes, window_us=args.window_us,
                                    queue=args.queue, pfc=args.pfc, xoff_bytes=args.xoff_bytes,
                                    xon_bytes=args.xon_bytes, headroom_bytes=args.headroom_bytes,
                                    pfc_dscp=args.pfc_dscp, pfc_priority=args.pfc_priority,
                                    pfc_quanta=args.pfc_quanta, pfc_watchdog_us=args.pfc_watchdog_us,
                                    pfc_restore_us=args.pfc_restore_us, **red)
    clock = Fabric(lab).show().get("clock") or {}
    print(port_model_text(lab, pm, clock))
    return 0


def parse_ecn(text: str) -> dict:
    """'KMIN' or 'KMIN,KMAX,PMAX' -> set_port_model's ecn_bytes, ecn_max_bytes, ecn_pmax."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        if len(parts) == 1:
            return {"ecn_bytes": int(parts[0]), "ecn_max_bytes": -1, "ecn_pmax": 1.0}
        if len(parts) == 3:
            kmin, kmax, pmax = int(parts[0]), int(parts[1]), float(parts[2])
            return {"ecn_bytes": kmin, "ecn_max_bytes": kmax, "ecn_pmax": pmax}
    except ValueError:
        pass
    raise UsageError(f"--ecn {text!r}: give KMIN or KMIN,KMAX,PMAX (bytes, bytes, a probability), "
                     "e.g. 5000,200000,0.01")


def ecn_text(pm: dict) -> str:
    if pm["ecn_bytes"] < 0:
        return "no ECN"
    if pm.get("ecn_max_bytes", -1) > pm["ecn_bytes"]:
        return (f"ECN RED from {pm['ecn_bytes']} B to {pm['ecn_max_bytes']} B "
                f"(Pmax {pm['ecn_pmax']:g}, all above)")
    return f"ECN above {pm['ecn_bytes']} B"


def port_model_text(lab: str, pm: dict, clock: dict) -> str:
    """One line: the port model with its times as real-fabric and wall-clock values."""
    window = f"{pm['window_us']:g} us real"
    if "window_wall_us" in clock:
        window += f" = {clock['window_wall_us']:g} us wall"
    return (f"lab {lab}: port model speed x {pm['scale']:g} (1 real-fabric us = "
            f"{clock.get('stretch', 1):g} us of wall-clock time), buffer {pm['buffer_bytes']} B, "
            f"{ecn_text(pm)}, utilisation window {window}, {queue_text(pm)}, {pfc_text(pm)}")


def pfc_text(pm: dict) -> str:
    if pm.get("pfc") != "on":
        return "PFC off"
    return (f"PFC on (DSCP {pm['pfc_dscp']} -> priority {pm['pfc_priority']}: XOFF {pm['xoff_bytes']} B, "
            f"XON {pm['xon_bytes']} B, headroom {pm['headroom_bytes']} B, {pm['pfc_quanta']} quanta)")


def real_wall(group: dict, key: str) -> str:
    """'200us real = 8000us wall' for a group's time (real-fabric and as the lab waits it)."""
    wall = group.get(key.replace("_us", "_wall_us"))
    return f"{group[key]:g}us real" + (f" = {wall:g}us wall" if wall is not None else "")


def queue_text(pm: dict) -> str:
    if pm.get("queue") == "real":
        return "real queue (frames wait in a shaper at the port's speed)"
    return "virtual queue (drops and marks, no added delay)"
