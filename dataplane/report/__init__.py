"""Results of experiments as numbers, tables and pictures.

metrics     definitions of every number (run_metrics, mode_summary, ...), computed in:
rundata     accessors of the RUN dicts (uplinks, flows, grouping by mode)
stats       statistics over lists of numbers (max/mean, Jain, percentiles, distributions)
idlemodel   idle uplinks measured and expected under uniform random hashing
closedloop  closed-loop transport: retransmissions, FCT slowdown, steady state
faultruns   fault runs: outages, recovery, the data plane's reaction
collective  a collective's completion against its ideal
table       rich tables and their plain-text rendering
plots       PNG pictures (write_plots)
sweep       seed-sweep distributions and the idle-uplink histogram
Input everywhere: the runner's RUN dicts (see metrics' docstring), grouped by mode.
"""
from __future__ import annotations

from dataplane.report.idlemodel import expected_idle
from dataplane.report.metrics import mode_summary, run_metrics
from dataplane.report.rundata import group_runs
from dataplane.report.table import render_text


def write_plots(results, folder):
    """plots.write_plots, imported lazily (matplotlib is slow to import)."""
    from dataplane.report.plots import write_plots as _write

    return _write(results, folder)


__all__ = ["expected_idle", "group_runs", "mode_summary", "run_metrics", "write_plots", "render_text"]
