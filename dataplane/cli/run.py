"""`railab run EXPERIMENT.yml [--json]`: compare load-balancing modes on one workload."""
from __future__ import annotations

import json
import sys
from pathlib import Path


from dataplane.runtime import lifecycle
from dataplane.runtime.state import check_lab_name
from dataplane.cli.common import output_console
from dataplane.runtime.labspec import RUNTIMES


def register(sub) -> None:
    p = sub.add_parser("run", help="run an experiment file and write its results folder")
    p.add_argument("experiment", help="experiment file (YAML)")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.add_argument("--output", help="results folder (default: the file's output:, else ./results)")
    p.add_argument("--name", help="lab name, overriding the lab file's name: field")
    p.add_argument("--no-plots", action="store_true",
                   help="write results.json and table.txt only, no figures (seconds sooner per run)")
    p.add_argument("--runtime", choices=RUNTIMES, default="netns",
                   help="runtime for a lab the experiment deploys (a deployed lab keeps its own)")
    p.set_defaults(func=run)


def run(args) -> int:
    # the experiment and its report import numpy and rich's progress: only when running
    from dataplane.experiment import session, spec
    from dataplane.report import lesson, ranking

    exp = spec.load(args.experiment)      # every check happens before anything is deployed
    if args.name is not None:
        check_lab_name(args.name)
    if args.output:
        exp.output = Path(args.output)
    exp.plots = not args.no_plots
    session.check_output(exp.output)
    lifecycle.require_root()
    with session.progress_bar(not args.json and sys.stderr.isatty()) as progress:
        results, folder = session.run(exp, progress, lab_name=args.name,
                                      runtime=args.runtime)
    _warn_receiver_drops(results)
    _warn_undrained(results)
    _warn_stale(results)
    _warn_late_hosts(results)
    _warn_backlog_drops(results)
    if results.get("lab_mismatch"):
        print(f"railab: warning: lab {results['lab']} was deployed from another topology than "
              f"{exp.lab_file} ({results['lab_mismatch']}); the experiment ran on the lab as deployed",
              file=sys.stderr)
    if args.json:
        summary = {
            "experiment": results["experiment"], "folder": str(folder),
            "port_model": results["port_model"], "clock": results.get("clock"),
            "modes": {label: m["metrics"] for label, m in results["modes"].items()},
            "sweeps": {label: {**s["summary"], "idle_uplinks": s["idle_uplinks"]}
                       for label, s in results["sweeps"].items()},
            "plots": results.get("plots", []),
            "slowdown_ranking": ranking.by_bucket(session.report_view(results)),
            "lesson": lesson.lesson_lines(session.report_view(results)),
        }
        print(json.dumps(summary, indent=2))
        return 0
    table = session.table

    console = output_console()
    for one in table.tables(session.report_view(results), title=results["experiment"]):
        console.print(one)
    for line in _machine_lines(results):
        console.print(line)
    console.print(f"results: {folder}/results.json")
    for plot in results.get("plots", []):
        console.print(f"plot: {plot}")
    return 0


def _machine_lines(results: dict) -> list[str]:
    """A lab split over machines: each mode's switch packets sent and drops per machine."""
    lines = []
    for label, mode in results["modes"].items():
        machines = mode["runs"][0]["switches"].get("machines")
        if machines:
            lines.append(f"{label} per machine (switch packets sent, drops): " + ", ".join(
                f"{host} {m['tx_packets']:,}, {m['drops']:,}" for host, m in machines.items()))
    return lines


def _warn_receiver_drops(results: dict) -> None:
    runs = [r for m in results["modes"].values() for r in m["runs"]] + \
           [r for sw in results["sweeps"].values() for r in sw["runs"]]
    dropped = sum(int(r.get("receiver_drops") or 0) for r in runs)
    if dropped:
        print(f"railab: warning: the receivers fell behind and their sockets dropped {dropped:,} "
              "frames, counted as loss although the fabric delivered them; offer fewer packets "
              "per second", file=sys.stderr)


def _labelled_runs(results: dict, *, sweeps: bool) -> list[tuple[str, list[dict]]]:
    """(label, runs) of every mode, and of every sweep with `sweeps`."""
    groups = [*results["modes"].items(), *(results.get("sweeps", {}).items() if sweeps else [])]
    return [(label, group["runs"]) for label, group in groups]


def _engine(run: dict) -> dict:
    return (run.get("hosts") or {}).get("engine") or {}


def _warn_per_mode(results: dict, amount, say, *, total=sum, sweeps: bool = False) -> None:
    """One warning per mode (and sweep, with `sweeps`) whose runs' amount(run), summed (or
    `total`), is not 0; say(n) words it."""
    for label, runs in _labelled_runs(results, sweeps=sweeps):
        n = total(int(amount(r) or 0) for r in runs)
        if n:
            print(f"railab: warning: {label}: {say(n)}", file=sys.stderr)


def _warn_undrained(results: dict) -> None:
    _warn_per_mode(results, lambda r: r.get("undrained_bytes"), total=max, say=lambda n: (
        f"{n:,} bytes still queued in the fabric after the drain limit; they are counted as lost "
        "and may arrive in the next run"))


def _warn_stale(results: dict) -> None:
    _warn_per_mode(results, lambda r: r.get("stale_frames"), say=lambda n: (
        f"{n:,} data frames of an earlier run arrived during it (a queue held them past that "
        "run's end); they were not counted"))


# An engine's own pacing is late by tens of microseconds (p99) on an idle machine: at the
# fastest shipped scales (1 real-fabric us = 40 us wall) that alone exceeds the load
# window, and the warning is for an engine that fell behind, twenty times later.
ENGINE_BEHIND_NS = 1_000_000


def _warn_late_hosts(results: dict) -> None:
    """A send engine that falls behind catches up in bursts (the pacing rule's credit): once
    it is late by more than the switches' load window, the fabric saw another workload than
    the one scheduled, whatever the tables say (seen: 8 ms late in the demo's ECMP chunks
    with the forwarding on the engine's CPU, 20 ms at 320 Mb/s ports)."""
    for label, runs in _labelled_runs(results, sweeps=True):
        worst = None
        for r in runs:
            p99 = (_engine(r).get("lateness_ns") or {}).get("p99")
            clock = r.get("clock") or {}
            window_ns, stretch = 1000 * (clock.get("window_wall_us") or 0), clock.get("stretch") or 0
            if p99 and window_ns and stretch and p99 > max(window_ns, ENGINE_BEHIND_NS) \
                    and (worst is None or p99 > worst[0]):
                worst = (p99, stretch, window_ns)
        if worst:
            p99, stretch, window_ns = worst
            print(f"railab: warning: {label}: the send engine fell behind, p99 {p99 / 1e6:.3g} ms wall = "
                  f"{p99 / stretch / 1000:.3g} us of fabric time, more than the switches' load window "
                  f"({window_ns / stretch / 1000:.3g} us); the workload reached the fabric later and in "
                  "bursts: lower port_model.scale", file=sys.stderr)


def _warn_backlog_drops(results: dict) -> None:
    _warn_per_mode(results, lambda r: (_engine(r).get("steering") or {}).get("backlog_drops"), sweeps=True,
                   say=lambda n: (f"the kernel's input backlog dropped {n:,} frames on the forwarding CPUs "
                                  "(counted as loss, not the fabric's doing); offer fewer packets per second"))
