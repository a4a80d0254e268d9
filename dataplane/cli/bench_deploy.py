"""`railab bench deploy [--scale N,N,...]`: the deploy benchmark's tables (the
measuring is dataplane.bench.deploy)."""
from __future__ import annotations

import argparse
import json
import os

from rich.table import Table

from dataplane.bench import deploy
from dataplane.cli.common import output_console
from dataplane.errors import UsageError
from dataplane.runtime import lifecycle


def gpu_sizes(text: str) -> list[int]:
    """--scale's "1024,4096,16384": GPU counts, each a positive multiple of 8."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: GPU counts separated by commas") from None
    if not sizes or any(n <= 0 or n % 8 for n in sizes):
        raise argparse.ArgumentTypeError(f"{text}: each size a positive multiple of 8 GPUs")
    return sizes


def run_deploy(args) -> int:
    lifecycle.require_root()
    if args.scale:
        if args.runtime != "netns":
            raise UsageError("--scale measures the netns runtime only (a 1,024-GPU lab is 152 "
                             "containers and 4,096 links under containerlab)")
        rows = deploy.scale(args.scale, probe_sample=args.sample)
    else:
        runtimes = ["netns"] + (["containerlab"] if args.runtime == "containerlab" else [])
        rows = deploy.standard(runtimes, args.repeat)
    machine = {"cpus": os.cpu_count(), "kernel": os.uname().release,
               "mem_total_mib": round(deploy._meminfo_kib("MemTotal") / 1024)}
    if args.json:
        result = {"bench": "deploy-scale" if args.scale else "deploy", "machine": machine, "rows": rows}
        if args.scale:
            result["fit"] = deploy.fit(rows)
        print(json.dumps(result, indent=2))
        return 0
    console = output_console()
    console.print(_deploy_table(rows, args.scale))
    for row in rows:
        if row.get("error"):
            console.print(f"{row['lab']}: not deployed: {row['error']}")
        if (row.get("probe") or {}).get("error"):
            console.print(f"{row['lab']}: not probed: {row['probe']['error']}")
    console.print(_phase_table(rows))
    if args.scale:
        console.print(_fit_table(deploy.fit(rows)))
    console.print(f"{machine['cpus']} CPUs, kernel {machine['kernel']}, {machine['mem_total_mib']:,} MiB; "
                  f"1-minute load average {min(r['load_before'] for r in rows)}-"
                  f"{max(r['load_after'] for r in rows)} during the run (the machine is shared: "
                  "'cpu s' is the work itself, deployer and agent)")
    return 0


def _deploy_table(rows: list[dict], scale: bool):

    table = Table(title="railab bench deploy" + (" --scale" if scale else ""))
    table.add_column("lab", no_wrap=True)
    if not scale:
        table.add_column("runtime", no_wrap=True)
    table.add_column("XDP object", no_wrap=True)
    columns = {"nodes": "nodes", "links": "links", "deploy_s": "deploy s", "cpu_s": "cpu s",
               "destroy_s": "destroy s", "lab_memory_mib": "lab MiB", "agent_peak_mib": "agent peak MiB"}
    for title in columns.values():
        table.add_column(title, justify="right", no_wrap=True)
    if scale:
        table.add_column("probe ok", justify="right", no_wrap=True)
    table.add_column("load", justify="right", no_wrap=True)
    for row in rows:
        cells = [row["lab"]] + ([] if scale else [row["runtime"]])
        cells.append({"warm": "cached", "cold": "compiled", "off": "compiled"}.get(row.get("bpf_cache"), "-"))
        cells += [f"{row[k]:,}" if isinstance(row.get(k), int) else str(row.get(k, "-")) for k in columns]
        if scale:
            probe = row.get("probe")
            cells.append(f"{probe['ok']:,}/{probe['pairs']:,}" if probe and "ok" in probe else "-")
        cells.append(f"{row['load_before']}")
        table.add_row(*cells)
    return table


def _phase_table(rows: list[dict]):
    """Seconds per phase, one column per row of the deploy table: the deployer's steps
    (they add up to the deploy time), then the agent's (in parallel with the deployer's
    until it waits for the namespaces)."""

    table = Table(title="where the deploy time goes (s)")
    table.add_column("phase", no_wrap=True)
    for i, row in enumerate(rows, start=1):
        table.add_column(f"{i}: {row['links']:,} links, {row.get('bpf_cache', '-')}", justify="right",
                         no_wrap=True)
    for who, key in (("deployer", "phases"), ("agent", "agent_phases")):
        names = list(dict.fromkeys(name for row in rows for name in row.get(key, {})))
        for name in names:
            table.add_row(f"{who}: {name}", *(f"{row.get(key, {}).get(name, 0):.2f}" for row in rows))
    return table


def _fit_table(fitted: dict):
    """Cost per node and per link, least squares over the sizes (deploy.fit)."""
    table = Table(title=f"fitted over {fitted['rows']} sizes: measure = per node x nodes + per link x links")
    for title in ("measure", "per node", "per link", "per link, nodes' share in"):
        table.add_column(title, justify="right" if title != "measure" else "left", no_wrap=True)
    for name in ("deploy", "memory", "destroy"):
        entry = fitted.get(name)
        if entry:
            unit = entry["unit"]
            cells = [f"{entry[k]:,.2f} {unit}" if k in entry else "-"
                     for k in ("per_node", "per_link", "per_link_all_in")]
            table.add_row(f"{name} ({unit})", *cells)
    if not fitted.get("separable"):
        table.caption = ("the sizes have the same links per node: nodes and links cannot be told "
                         "apart (add a size of another shape)")
    return table
