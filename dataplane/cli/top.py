"""`railab top [LAB] [--interval 0.5] [--once] [--switch NAME] [--limit N]`: a live view of
the fabric's switch ports, busiest first.

Every poll asks the lab's agent for its counters; the rates, utilisation, queue and drop
columns and the order (busiest first) are computed in `dataplane.lab.ports` (see there).
`build_table` (pure) lays out the rows; `run` only polls and displays.
"""
from __future__ import annotations

import math
import time

from rich import box
from rich.live import Live
from rich.table import Table

from dataplane.cli.common import load_lab, output_console, single_lab
from dataplane.errors import UsageError
from dataplane.lab.ports import PortRow, compute_rows, poll
from dataplane.units import fmt_bps


def register(sub) -> None:
    p = sub.add_parser("top", help="live per-port utilisation, queues and drops, busiest first")
    p.add_argument("lab", nargs="?")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between polls (default 0.5)")
    p.add_argument("--once", action="store_true", help="poll twice, print one table and exit")
    p.add_argument("--switch", help="only this switch")
    p.add_argument("--limit", type=int, default=None,
                   help="show at most N ports (default: all with --once, what fits the terminal live)")
    p.set_defaults(func=run)


# ----------------------------------------------------------------------------- display

def _bps(v: float | None) -> str:
    return fmt_bps(v, short=True, small=".0f")


def _bar(frac: float | None, width: int = 6) -> str:
    if frac is None:
        return "-"
    full = max(0.0, min(frac, 1.0)) * width
    blocks = "█" * int(full) + ("▌" if full - int(full) >= 0.5 else "")
    style = "green" if frac < 0.5 else ("yellow" if frac < 0.8 else "bold red")
    return f"[{style}]{blocks:<{width}}[/] {frac:4.0%}"


def build_table(rows: list[PortRow], *, lab: str = "", interval: float | None = None,
                limit: int | None = None, stamp: str | None = None, clock: dict | None = None):

    shown = rows if not limit or limit <= 0 else rows[:limit]
    up = [r for r in rows if r.direction == "up"]
    drops = sum(r.drops_per_s for r in rows)
    title = f"railab top: lab {lab}" if lab else "railab top"
    if interval:
        title += f", every {interval:g}s"
    if stamp:
        title += f" ({stamp})"
    table = Table(title=title, title_justify="left", caption_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False)
    has_model = any(r.model_util is not None for r in rows)
    has_queue = any(r.queue_bytes is not None for r in rows)
    speeds = {(r.speed_bps, r.nominal_bps) for r in rows}
    one_speed = len(speeds) == 1
    columns = [("switch", "left"), ("port", "left"), ("peer", "left"), ("tx", "right"), ("rx", "right"),
               ("util", "left")]
    columns += [("model", "right")] if has_model else []
    columns += [("queue B", "right")] if has_queue else []
    columns += [("drops/s", "left"), ("ECN/s", "right")]
    has_pfc = any(r.paused is not None for r in rows)
    columns += [("paused", "right")] if has_pfc else []
    columns += [] if one_speed else [("speed emu/nom", "right")]
    # the columns that must stay readable in a narrow terminal; the others get cropped
    keep = {"switch": max([len(r.switch) for r in shown] + [6]), "port": max([len(r.port) for r in shown] + [4]),
            "tx": 5, "util": 6 + 5, "drops/s": 5}
    for column, justify in columns:
        table.add_column(column, justify=justify, no_wrap=True, min_width=keep.get(column))
    for r in shown:
        arrow = {"up": "↑", "down": "↓"}.get(r.direction, "")
        reasons = ",".join(sorted(r.drops_delta))
        cells = [r.switch, r.port, f"{arrow}{r.peer}", _bps(r.tx_bps), _bps(r.rx_bps), _bar(r.util)]
        if has_model:
            cells.append("-" if r.model_util is None else f"{r.model_util:.0%}")
        if has_queue:
            cells.append("-" if r.queue_bytes is None else f"{r.queue_bytes:,}")
        cells += [f"[bold red]{r.drops_per_s:,.0f}[/] {reasons}" if r.drops_per_s else "0",
                  f"{r.ecn_per_s:,.0f}"]
        if has_pfc:
            cells.append("-" if r.paused is None else f"{r.paused:.0%}" + (" ←" if r.pauses_received else ""))
        if not one_speed:
            cells.append(f"{_bps(r.speed_bps)}/{_bps(r.nominal_bps)}")
        table.add_row(*cells)
    total = sum(r.drops_total for r in rows)
    caption = (f"{len(rows)} ports; uplinks carry {_bps(sum(r.tx_bps for r in up))}b/s upward; "
               f"drops {drops:,.0f}/s ({total:,} since start). Rates in b/s from counter deltas; util = tx / emulated speed")
    if one_speed and rows:
        emulated, nominal = next(iter(speeds))
        caption += f" ({_bps(emulated)}b/s emulated, {_bps(nominal)}b/s nominal)" if emulated else \
            " (no port model)"
    caption += "; model = port model's own utilisation."
    if has_pfc:
        caption += (" paused = share of the interval the port kept its neighbour paused (PFC, "
                    "lossless priority); ← = the neighbour paused it.")
    if clock and clock.get("scale"):
        caption += (f" Clock: scale {clock['scale']:g}, 1 real-fabric us = {clock['stretch']:g} us wall; "
                    f"utilisation window {clock.get('window_wall_us', 0):g} us wall.")
    if len(shown) < len(rows):
        caption += f" {len(rows) - len(shown)} quieter ports not shown (--limit)."
    table.caption = caption
    return table


def run(args) -> int:
    if not (math.isfinite(args.interval) and 0 < args.interval <= 3600):
        raise UsageError(f"--interval {args.interval}: must be more than 0 and at most 3600 seconds")
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit {args.limit}: must be 1 or more")
    lab = single_lab(args.lab)
    spec = load_lab(lab).spec
    if args.switch is not None and args.switch not in {n.name for n in spec.switches}:
        raise UsageError(f"--switch {args.switch!r}: lab {lab} has no such switch")
    console = output_console()
    prev, t_prev = poll(lab, args.switch)
    if args.once:
        time.sleep(args.interval)
        cur, t_cur = poll(lab, args.switch)
        rows = compute_rows(prev, cur, t_cur - t_prev, spec)
        console.print(build_table(rows, lab=lab, interval=args.interval, limit=args.limit,
                                  clock=cur.clock))
        return 0
    def limit() -> int:
        return args.limit if args.limit is not None else max(5, console.size.height - 9)

    try:
        with Live(build_table([], lab=lab, interval=args.interval), console=console,
                  refresh_per_second=max(1.0, min(10.0, 2 / args.interval)), screen=False,
                  vertical_overflow="crop") as live:
            while True:
                time.sleep(args.interval)
                cur, t_cur = poll(lab, args.switch)
                rows = compute_rows(prev, cur, t_cur - t_prev, spec)
                live.update(build_table(rows, lab=lab, interval=args.interval, limit=limit(),
                                        stamp=time.strftime("%H:%M:%S"), clock=cur.clock))
                prev, t_prev = cur, t_cur
    except KeyboardInterrupt:
        return 0
