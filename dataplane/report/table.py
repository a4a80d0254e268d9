"""Result tables: one rich Table per experiment, one row per mode (label).

A mode with one run shows that run's numbers; a mode with several runs (a seed sweep)
shows mean ± std over them, and the table gets a line comparing the measured mean of
idle leaf uplinks with what uniform random hashing would leave idle.
Metric definitions: dataplane/report/metrics.py.
"""
from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from dataplane.report import metrics as m
from dataplane.report import closedloop, faultruns, lesson, ranking, rundata
from dataplane.units import fmt_bps, fmt_us  # noqa: F401 (the report's formatters)

# (metric key, column header, formatter kind)
COLUMNS = (
    ("goodput_bps", "goodput", "bps"),
    ("uplink_max_mean", "max/mean\nuplink", "ratio"),
    ("leaf_uplink_max_mean_settled", "max/mean\nsending leaf\nsettled", "ratio"),
    ("jain", "Jain", "jain"),
    ("idle_uplinks", "idle\nuplinks", "count"),
    ("loss_packets", "loss\npkts", "count"),
    ("reorder_pct", "reorder", "pct"),
    ("fct_p50_us", "FCT p50", "us"),
    ("fct_p99_us", "FCT p99", "us"),
    ("latency_mean_us", "latency\nmean", "us"),
    ("drops", "drops", "count"),
    ("ecn_marked", "ECN\nmarks", "count"),
)


# The fault table (runs with fault events): (metric key, header, kind); "ms" values are
# shown through fmt_us. Definitions: faultruns.fault_metrics.
FAULT_COLUMNS = (
    ("flows_on_failed", "flows on\nfailed", "count"),
    ("loss_on_failed", "lost\nthere", "count"),
    ("loss_elsewhere", "lost\nelsewhere", "count"),
    ("outage_ms", "outage\n(net)", "ms"),
    ("recovery_ms", "recovery\n(net)", "ms"),
    ("outage_elsewhere_ms", "outage\nelsewhere", "ms"),
    ("host_gap_on_failed_ms", "host gap\naffected", "ms"),
    ("host_gap_elsewhere_ms", "host gap\nothers", "ms"),
    ("failover_ms", "failover\n(agent)", "ms"),
    ("notice_ms", "notice\n(agent)", "ms"),
    ("reaction_ms", "reaction\n(wall)", "ms"),
    ("reaction_fabric_ms", "reaction\n(fabric)", "ms"),
)
FAULT_CAPTION = (
    "net: from the packets' send times -- outage = lost packets' send-time span + 1 packet "
    "interval, recovery = first lost -> next delivered (per fault event, worst flow); "
    "host gap: longest pause between deliveries at the receivers (includes host scheduling); "
    "failover: fault -> agent's mask write; notice: notice sent -> upstream map write; "
    "reaction: the data plane's first packet into the dead group -> an upstream's "
    "first packet avoiding it (wall, and real-fabric time at the lab's scale); "
    "- = unknown or none")
LATE_S = 0.1      # faults made later than this after their scheduled time are pointed out


def fmt_count(n: float | None) -> str:
    if n is None:
        return "-"
    if float(n).is_integer():
        return f"{int(n):,}"
    return f"{n:,.1f}"


def fmt_value(kind: str, value: float | None) -> str:
    if value is None:
        return "-"
    if kind == "bps":
        return fmt_bps(value)
    if kind == "us":
        return fmt_us(value)
    if kind == "ms":
        return fmt_us(value * 1000)
    if kind == "pct":
        return f"{value:.2f} %" if value < 10 else f"{value:.1f} %"
    if kind == "frac":
        return fmt_value("pct", value * 100)
    if kind == "ratio":
        return f"{value:.2f}"
    if kind == "jain":
        return f"{value:.3f}"
    return fmt_count(value)


def _fmt_spread(kind: str, dist: dict | None) -> str:
    """mean ± std in the column's unit."""
    if dist is None:
        return "-"
    mean = fmt_value(kind, dist["mean"])
    if kind == "count":
        return f"{dist['mean']:,.1f} ± {dist['std']:,.1f}"
    if kind == "pct":
        return f"{dist['mean']:.2f} ± {dist['std']:.2f} %"
    if kind in ("ratio", "jain"):
        digits = 2 if kind == "ratio" else 3
        return f"{dist['mean']:.{digits}f} ± {dist['std']:.{digits}f}"
    return f"{mean} ± {fmt_value(kind, dist['std'])}"


def _scaled_note(groups: dict[str, list[dict]]) -> str | None:
    """'ports emulated at 100 Mb/s (nominal 400 Gb/s)' when the runs say so."""
    for runs in groups.values():
        for run in runs:
            for up in rundata.uplinks(run):
                if up["scaled_bps"]:
                    note = f"ports emulated at {fmt_bps(up['scaled_bps'])}"
                    if up["speed_bps"]:
                        note += f" (nominal {fmt_bps(up['speed_bps'])})"
                    clock = run.get("clock") or {}
                    if clock.get("stretch"):
                        note += (f"; 1 real-fabric us = {clock['stretch']:g} us wall "
                                 f"(utilisation window {clock.get('window_wall_us', 0):g} us wall)")
                    return note
    return None


def idle_line(label: str, runs: list[dict]) -> str | None:
    """'ecmp sweep, 30 runs: idle leaf uplinks 2.9 ± 1.1 of 8 measured, 2.75 expected ...'."""
    s = m.idle_summary(runs)
    if s["measured_mean"] is None:
        return None
    text = (f"{label}, {s['runs']} runs: idle leaf uplinks {s['measured_mean']:.2f} ± "
            f"{s['measured_std']:.2f} of {s['leaf_uplinks']} measured")
    if s["expected_mean"] is not None:
        text += f", {s['expected_mean']:.2f} expected for uniform random hashing"
    return text


def _seed_text(runs: list[dict]) -> str:
    seeds = [r.get("seed") for r in runs]
    if all(s is None for s in seeds):
        return "-"
    if len(seeds) == 1:
        return str(seeds[0])
    ints = [s for s in seeds if isinstance(s, int)]
    if len(ints) == len(seeds) and sorted(ints) == list(range(min(ints), max(ints) + 1)):
        return f"{min(ints)}..{max(ints)}"
    return f"{len(set(map(str, seeds)))} seeds"


def build_table(results, title: str | None = None) -> Table:
    """The rich Table of an experiment (see module docstring)."""
    groups = rundata.group_runs(results)
    title = title or rundata.results_title(results)
    table = Table(title=title, title_justify="left", caption_justify="left")
    table.add_column("mode", justify="left", no_wrap=True)
    table.add_column("runs", justify="right")
    seeded = any(r.get("seed") is not None for runs in groups.values() for r in runs)
    if seeded:
        table.add_column("seed", justify="right")
    for _, header, _ in COLUMNS:
        table.add_column(header, justify="right")
    captions = []
    for label, runs in groups.items():
        if len(runs) == 1:
            met = m.run_metrics(runs[0])
            cells = [fmt_value(kind, met[key]) for key, _, kind in COLUMNS]
            count = "1"
        else:
            summary = m.mode_summary(runs)
            cells = [_fmt_spread(kind, summary[key]) for key, _, kind in COLUMNS]
            count = str(len(runs))
            line = idle_line(label, runs)
            if line:
                captions.append(line)
        seeds = [_seed_text(runs)] if seeded else []
        table.add_row(label, count, *seeds, *cells)
    note = _scaled_note(groups)
    if note:
        captions.insert(0, note + "; loads and goodput are at the emulated speed")
    if any(len(r) > 1 for r in groups.values()):
        captions.append("several runs: mean ± sample std over runs")
    captions += lesson.lesson_lines(results)
    if captions:
        table.caption = "\n".join(captions)
    return table


def build_fault_table(results, title: str | None = None) -> Table | None:
    """One row per run with fault events (FAULT_COLUMNS); None when no run had any."""
    rows = []
    for label, runs in rundata.group_runs(results).items():
        for i, run in enumerate(runs):
            met = m.run_metrics(run)
            if "flows_on_failed" in met:
                name = label if len(runs) == 1 else f"{label} #{i + 1}"
                rows.append((name, met, run))
    if not rows:
        return None
    table = Table(title=f"{title or rundata.results_title(results)}: faults", title_justify="left",
                  caption_justify="left", caption=FAULT_CAPTION)
    table.add_column("mode", justify="left", no_wrap=True)
    for _, header, _ in FAULT_COLUMNS:
        table.add_column(header, justify="right")
    for name, met, run in rows:
        cells = [fmt_value(kind, met.get(key)) for key, _, kind in FAULT_COLUMNS]
        if met.get("timing_unknown"):
            cells[[k for k, _, _ in FAULT_COLUMNS].index("outage_ms")] += f" ({met['timing_unknown']} unknown)"
        table.add_row(name, *cells)
        late, after_end = faultruns.fault_lateness_s(run)
        if late is not None and late > LATE_S:
            table.caption += f"\n{name}: faults made up to {late:.2f} s after their scheduled time"
            if after_end:
                table.caption += " (some after the senders had stopped: they could not lose anything)"
        if met.get("receiver_drops"):
            table.caption += (f"\n{name}: the receivers' sockets dropped {met['receiver_drops']:,} frames; "
                              "they look lost to the send-time figures too")
    return table


TRANSPORT_COLUMNS = (
    ("messages_done_pct", "messages\ndone", "pct"),
    ("retx_packets", "retx\npkts", "count"),
    ("retx_bytes", "retx\nbytes", "count"),
    ("naks", "NAKs", "count"),
    ("timeouts", "time-\nouts", "count"),
    ("cnps_sent", "CNPs\nsent", "count"),
    ("cnps_received", "CNPs\nrecv", "count"),
    ("slowdown_avg", "slowdown\navg", "ratio"),
    ("slowdown_p99", "slowdown\np99", "ratio"),
    ("qp_rate_min_max", "QP rate\nmin/max", "ratio"),
    ("host_queue_max_bytes", "last-hop\nqueue max", "count"),
    ("steady_queue_max_bytes", "queue max\nsteady", "count"),
    ("pause_frames", "pause\nframes", "count"),
    ("steady_pause_frames", "pauses\nsteady", "count"),
)


def _bucket_header(lo: int, hi: int | None) -> str:
    kib = lambda n: f"{n // 1024}K" if n >= 1024 else str(n)   # noqa: E731
    return f">= {kib(lo)}" if hi is None else f"< {kib(hi)}" if lo == 0 else f"{kib(lo)}-{kib(hi)}"


def build_transport_table(results, title: str | None = None) -> Table | None:
    """Closed-loop runs: reliability counters, then FCT slowdown avg / p99 per message
    size bucket, one row per run; None when every run was open loop."""
    rows = []
    for label, runs in rundata.group_runs(results).items():
        for i, run in enumerate(runs):
            met = m.run_metrics(run)
            if met.get("messages_done_pct") is not None:
                name = label if len(runs) == 1 else f"{label} #{i + 1}"
                rows.append((name, met, closedloop.slowdown_buckets(run)))
    if not rows:
        return None
    table = Table(title=f"{title or rundata.results_title(results)}: transport and FCT slowdown",
                  title_justify="left", caption_justify="left",
                  caption="slowdown = completion time / the message's frames at line rate "
                          "(avg / p99; n = messages in the bucket)")
    table.add_column("mode", justify="left", no_wrap=True)
    for _, header, _ in TRANSPORT_COLUMNS:
        table.add_column(header, justify="right")
    for b in rows[0][2]:
        table.add_column(_bucket_header(b["lo"], b["hi"]), justify="right")
    for name, met, buckets in rows:
        cells = [fmt_value(kind, met.get(key)) for key, _, kind in TRANSPORT_COLUMNS]
        cells += ["-" if not b["count"] else f"{b['avg']:.1f} / {b['p99']:.1f} (n={b['count']})"
                  for b in buckets]
        table.add_row(name, *cells)
    return table


def build_ranking_table(results, title: str | None = None) -> Table | None:
    """Modes ranked by average FCT slowdown over all messages and per size bucket, tied
    where the data cannot tell them apart (dataplane.report.ranking); None with fewer
    than two closed-loop modes."""
    rows = [r for r in ranking.by_bucket(results) if r["ranking"]]
    if not rows:
        return None
    table = Table(title=f"{title or rundata.results_title(results)}: modes ranked by average FCT slowdown",
                  title_justify="left", caption_justify="left",
                  caption=f"'=': the {ranking.CONFIDENCE:.0%} bootstrap interval of the difference "
                          "of the two averages includes 0 (every run of a mode pooled)")
    table.add_column("messages", justify="left", no_wrap=True)
    table.add_column("best < ... < worst", justify="left")
    for r in rows:
        name = "all" if r["lo"] == 0 and r["hi"] is None and r is rows[0] else _bucket_header(r["lo"], r["hi"])
        table.add_row(name, ranking.text(r["ranking"]))
    return table


PFC_COLUMNS = (
    ("lossless_lost", "lossless\nlost", "count"),
    ("lossy_lost", "lossy\nlost", "count"),
    ("headroom_drops", "headroom\ndrops", "count"),
    ("pause_frames", "pause\nframes", "count"),
    ("pause_fraction", "most\npaused", "frac"),
    ("held_fraction", "most\nheld", "frac"),
    ("mice_goodput_bps", "mice\ngoodput", "bps"),
)


def build_pfc_table(results, title: str | None = None) -> Table | None:
    """Runs with PFC on: losses per priority, pauses sent, the largest share of the run a
    port paused its neighbour / held its lossless priority for one, the mice's goodput
    (the victims of head-of-line blocking) and the ports that paused; None without PFC."""
    rows = []
    for label, runs in rundata.group_runs(results).items():
        for i, run in enumerate(runs):
            if run.get("pfc_ports"):
                name = label if len(runs) == 1 else f"{label} #{i + 1}"
                rows.append((name, m.run_metrics(run)))
    if not rows:
        return None
    table = Table(title=f"{title or rundata.results_title(results)}: PFC", title_justify="left",
                  caption_justify="left",
                  caption="most paused / held: the largest share of the run one port kept its "
                          "neighbour paused / held its lossless priority for a pausing neighbour")
    table.add_column("mode", justify="left", no_wrap=True)
    for _, header, _ in PFC_COLUMNS:
        table.add_column(header, justify="right")
    table.add_column("ports that paused", justify="left")
    for name, met in rows:
        cells = [fmt_value(kind, met.get(key)) for key, _, kind in PFC_COLUMNS]
        table.add_row(name, *cells, _port_ranges(met.get("paused_ports") or []))
    return table


def _port_ranges(ports: list[str]) -> str:
    """'leaf1-r0:down1..down8, spine2:down2' from a list of switch:port names."""
    by_switch: dict[str, list[str]] = {}
    for p in ports:
        switch, _, port = p.partition(":")
        by_switch.setdefault(switch, []).append(port)
    parts = []
    for switch, names in by_switch.items():
        names.sort(key=lambda n: (n.rstrip("0123456789"), int(n[len(n.rstrip("0123456789")):] or 0)))
        parts.append(f"{switch}:{names[0]}" + (f"..{names[-1]}" if len(names) > 2 else
                                               f", {switch}:{names[1]}" if len(names) == 2 else ""))
    return ", ".join(parts) or "-"


def tables(results, title: str | None = None) -> list[Table]:
    """Every table of an experiment: the comparison, then the PFC, transport and fault
    tables when there is something to show."""
    extra = [build_pfc_table(results, title), build_transport_table(results, title),
             build_ranking_table(results, title), build_fault_table(results, title)]
    return [build_table(results, title)] + [t for t in extra if t is not None]


def render_text(results, title: str | None = None, width: int = 1000) -> str:
    """The tables as plain text (no colours, no terminal needed), for logs and files: as
    wide as their cells need (up to `width`), never a value cut to fit."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False,
                      legacy_windows=False)
    for one in tables(results, title):
        console.print(one)
    return buf.getvalue()


def print_results(results, title: str | None = None, console: Console | None = None) -> None:
    """Print the table to a terminal (rich colours) or plain text when not a TTY."""
    console = console or Console()
    for one in tables(results, title):
        console.print(one)
