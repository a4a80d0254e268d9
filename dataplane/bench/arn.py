"""`railab bench arn`: the link-down notice made and consumed by the agent against the
data plane (issue 27), side by side on one deployed lab.

Each run is the shipped experiments/link-failure-spine.yml (spine1 loses every link to
one leaf, so it cannot route around the cut itself; steady traffic across the fabric)
under one `arn_path`, the two paths taking turns. Per path (and mode) it reports:
  reaction: the data plane's own stamps, the first packet that met the dead group on the
            spine -> the first upstream's first packet that avoided it (wall ms;
            dataplane.report.faultruns.reaction_from_stamps), p50 and max over the runs;
            with the spine's first notice and the upstream's first exclusion (data-plane
            path: how long the data plane itself took) beside it;
  cut -> avoided: the last cut made -> the first packet an upstream steered around it
            (both paths, every run: the agent path's WITHDRAW usually leaves before any
            packet meets the dead group, so the reaction has no start there);
  lost:     packets lost per affected flow (flows whose path crossed the cut), the worst
            flow of each run.
With busy, the same again while a spinner process this bench starts keeps one core busy.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dataplane.agent import arnpath
from dataplane.experiment import session
from dataplane.experiment import spec as experiment_spec
from dataplane.report import faultruns
from dataplane.runtime import labspec, lifecycle
from dataplane.topology import clab

ROOT = Path(__file__).resolve().parent.parent.parent
EXPERIMENT = ROOT / "experiments" / "link-failure-spine.yml"
TARGET_REACTION_MS = 1.0      # issue 27: the data-plane path, wall time
TARGET_LOST_PER_FLOW = 2      # issue 27: the data-plane path, link-failure-spine, every run


def _one(exp, lab_name: str) -> list[dict]:
    """One experiment run: per mode, its reaction and its losses."""
    results, _folder = session.run(exp, lab_name=lab_name)
    out = []
    for label, mode in results["modes"].items():
        run = mode["runs"][0]
        reactions = [r for e in run.get("events") or [] if (r := faultruns.reaction_from_stamps(e.get("stamps")))]
        hit = [f for f in run["flows"] if f.get("on_failed_element")]
        lost = [int(f.get("lost") or 0) for f in hit]
        out.append({"mode": label, "arn_path": results.get("arn_path"),
                    "reaction_ms": max(r["reaction_us"] for r in reactions) / 1000 if reactions else None,
                    "notice_ms": next((r["notice_us"] / 1000 for r in reactions if r["notice_us"] is not None), None),
                    "excluded_ms": _excluded_ms(run),
                    "cut_to_avoided_ms": _cut_to_avoided_ms(run),
                    "upstreams": sorted({u for r in reactions for u in r["per_upstream_us"]}),
                    "affected_flows": len(hit), "lost_per_flow_max": max(lost, default=0),
                    "lost_per_flow_mean": statistics.fmean(lost) if lost else 0.0,
                    "error": run.get("event_error")})
    return out


def _cut_to_avoided_ms(run: dict) -> float | None:
    """The last failure made (the cut that killed the group) -> the first packet an upstream
    steered around it, wall ms: the same figure for both paths in every run."""
    failures = [e for e in run.get("events") or [] if e.get("stamps") is not None and e.get("t_ns")]
    if not failures:
        return None
    us = faultruns.avoided_after_us(max(failures, key=lambda e: int(e["t_ns"])))
    return None if us is None else us / 1000


def _excluded_ms(run: dict) -> float | None:
    """The reporter's first dead packet -> the first exclusion an upstream installed (the
    data-plane path's own work, before any packet of the upstream's traffic comes by)."""
    for e in run.get("events") or []:
        stamps = e.get("stamps") or {}
        dead = [s["dead_ns"] for s in stamps.values() if s.get("dead_ns")]
        excl = [s["excl_ns"] for s in stamps.values() if dead and s.get("excl_ns", 0) >= min(dead)]
        if excl:
            return (min(excl) - min(dead)) / 1e6
    return None


def _spinner() -> subprocess.Popen:
    """A process that keeps one core busy until killed (the bench's own child)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _summary(rows: list[dict]) -> list[dict]:
    """Per (busy, path, mode): reaction p50 / max and the worst flow's loss, over the runs."""
    keys = sorted({(r["busy"], r["arn_path"], r["mode"]) for r in rows},
                  key=lambda k: (k[0], arnpath.PATHS.index(k[1]) if k[1] in arnpath.PATHS else 9, k[2]))
    out = []
    for busy, path, mode in keys:
        mine = [r for r in rows if (r["busy"], r["arn_path"], r["mode"]) == (busy, path, mode)]
        reactions = [r["reaction_ms"] for r in mine if r["reaction_ms"] is not None]
        lost = [r["lost_per_flow_max"] for r in mine]
        row = {"busy": busy, "arn_path": path, "mode": mode, "runs": len(mine),
               **_p50_max("reaction", reactions),
               "reaction_missing": len(mine) - len(reactions),
               "excluded_max_ms": max((r["excluded_ms"] for r in mine if r["excluded_ms"] is not None), default=None),
               **_p50_max("cut_to_avoided", [r["cut_to_avoided_ms"] for r in mine if r["cut_to_avoided_ms"] is not None]),
               "lost_per_flow_by_run": lost, "affected_flows": [r["affected_flows"] for r in mine]}
        if path == "dataplane":
            row["met"] = (bool(reactions) and not row["reaction_missing"]
                          and max(reactions) <= TARGET_REACTION_MS and max(lost) <= TARGET_LOST_PER_FLOW)
        out.append(row)
    return out


def _p50_max(name: str, values: list[float]) -> dict:
    return {f"{name}_p50_ms": statistics.median(values) if values else None,
            f"{name}_max_ms": max(values) if values else None}


def bench_arn(*, runs: int = 3, busy: bool = False, experiment: Path = EXPERIMENT, log=None) -> dict:
    """Deploys the experiment's lab under a name of its own, runs the experiment `runs`
    times per notice path (alternating; then again with a core kept busy if busy),
    destroys the lab. Returns every run and the summary per path and mode."""
    lifecycle.require_root()
    base = experiment_spec.load(experiment)
    topo = clab.read(base.lab_file)
    topo.name = f"bencharn{int(time.time()) % 100000}"
    spec = labspec.build(topo, str(base.lab_file))
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="railab-bencharn-") as out:
        lifecycle.deploy(spec)
        try:
            for loaded in ((False, True) if busy else (False,)):
                spinner = _spinner() if loaded else None
                try:
                    for i in range(runs):
                        for path in arnpath.PATHS:
                            exp = experiment_spec.load(experiment, {"arn_path": path, "output": out,
                                                                    "reuse_lab": True})
                            got = _one(exp, spec.name)
                            rows += [{**r, "run": i + 1, "busy": loaded} for r in got]
                            if log:
                                log(f"run {i + 1}/{runs} {path}{' (core busy)' if loaded else ''}: " + "; ".join(
                                    f"{r['mode']} reaction {_ms(r['reaction_ms'])}, worst flow lost "
                                    f"{r['lost_per_flow_max']}" for r in got))
                finally:
                    if spinner is not None:
                        spinner.kill()
                        spinner.wait()
        finally:
            lifecycle.destroy(spec.name)
    return {"experiment": str(experiment), "runs": runs, "busy": busy, "rows": rows, "summary": _summary(rows),
            "targets": {"dataplane_reaction_ms": TARGET_REACTION_MS,
                        "dataplane_lost_per_flow": TARGET_LOST_PER_FLOW}}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} ms"
