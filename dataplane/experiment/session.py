"""One `railab run`: deploy (or reuse) the lab, run every mode and sweep, write results.

The results folder holds results.json (every run and every metric), the plots, and the
table as text. A lab this run deployed is destroyed at the end unless the experiment says
`reuse_lab: true`; a lab that was already up is left as it was found.
"""
from __future__ import annotations

import json
import os
import time
from contextlib import nullcontext
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from dataplane.experiment import runner
from dataplane.errors import RuntimeStateError
from dataplane.experiment.spec import Experiment, ExperimentError, ModeSpec
from dataplane.kernel.netns import load_iproute
from dataplane.lab import faults
from dataplane.lab.fabric import Fabric
from dataplane.report import metrics, sweep, table
from dataplane.runtime import labspec, lifecycle, state
from dataplane.topology import clab
from dataplane.traffic import workload as wl


# Experiments measure what traffic experiences, so their ports queue for real (delay,
# reordering across paths) unless the experiment asks for `queue: virtual`.
EXPERIMENT_QUEUE = "real"


def experiment_port_model(requested: dict, current: dict) -> dict:
    """The port model an experiment runs with: what it asks for, over the lab's current
    settings, with a real queue by default -- not when the model is off (scale 0)."""
    model = dict(requested)
    if model.get("scale", current.get("scale", 0)) > 0:
        model.setdefault("queue", EXPERIMENT_QUEUE)
    return model


def _steps(exp: Experiment) -> int:
    return len(exp.modes) + (exp.sweep["seeds"] if exp.sweep else 0)


def topology_difference(wanted, deployed) -> str | None:
    """How the deployed lab differs from the experiment's lab file (nodes, links), or None."""
    def shape(spec):
        nodes = {n.name for n in spec.nodes}
        links = {frozenset((f"{n.name}:{i.name}", i.peer)) for n in spec.nodes for i in n.interfaces}
        return nodes, links

    (w_nodes, w_links), (d_nodes, d_links) = shape(wanted), shape(deployed)
    parts = []
    if w_nodes != d_nodes:
        missing, extra = sorted(w_nodes - d_nodes), sorted(d_nodes - w_nodes)
        parts.append(f"nodes missing: {', '.join(missing[:3]) or '-'}; not in the file: {', '.join(extra[:3]) or '-'}")
    elif w_links != d_links:
        parts.append(f"{len(w_links ^ d_links)} links differ")
    return "; ".join(parts) or None


def _arn_path(lab: str) -> str | None:
    """Who makes the lab's link-down notices (arnpath.PATHS); None for a lab without the
    fabric monitor (its switches then send none)."""
    try:
        return faults.status(lab)["config"].get("arn_path", "agent")
    except RuntimeStateError:
        return None


def run(exp: Experiment, progress=None, lab_name: str | None = None,
        runtime: str = "netns") -> tuple[dict, Path]:
    topo = clab.read(exp.lab_file)
    if lab_name:
        topo.name = lab_name
    spec = labspec.build(topo, str(exp.lab_file), runtime=runtime)
    task = progress.add_task(f"{exp.name}: deploying {spec.name}", total=_steps(exp) + 1) if progress else None

    def advance(text: str) -> None:
        if progress:
            progress.update(task, advance=1, description=f"{exp.name}: {text}")

    deployed_here = not lifecycle.is_up(spec.name)
    mismatch = None
    if deployed_here:
        lifecycle.deploy(spec)
    else:
        wanted, spec = spec, state.load(spec.name).spec
        mismatch = topology_difference(wanted, spec)
    fabric = Fabric(spec.name)
    found = fabric.show()          # load balancing and port model as the lab is now
    found_arn_path = None
    try:
        if exp.arn_path:
            found_arn_path = _arn_path(spec.name)
            faults.notifications(spec.name, arn_path=exp.arn_path)
        fabric.set_port_model(**experiment_port_model(exp.port_model, found["port_model"]))
        flows = wl.generate(exp.workload, runner.workload_hosts(spec))
        advance(f"{len(flows)} flows")
        shown = fabric.show()
        results: dict = {
            "experiment": exp.name, "lab": spec.name, "lab_file": str(exp.lab_file),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "duration_s": exp.duration_s,
            "flows": len(flows), "port_model": shown.get("port_model"), "clock": shown.get("clock"),
            "modes": {}, "sweeps": {}, "lab_mismatch": mismatch,
            "arn_path": _arn_path(spec.name),
        }
        if exp.events:      # the scheduled faults' netlink on time, not after its import
            load_iproute()
        per_mode_ports = any(m.port_model for m in exp.modes)
        for mode in exp.modes:
            if per_mode_ports:      # e.g. PFC on vs off: each mode's model, PFC off unless asked
                fabric.set_port_model(**experiment_port_model(
                    {"pfc": "off", **exp.port_model, **mode.port_model}, found["port_model"]))
            runner.apply_mode(fabric, mode)
            advance(f"running {mode.label}")
            try:
                one = runner.run_once(spec, exp, flows, mode.label, None, mode.mode, mode.transport,
                                      mode.dcqcn)
            finally:
                runner.end_mode(fabric, mode)
            one["clock"] = results["clock"]
            one["port_model"] = fabric.show()["port_model"] if per_mode_ports else results["port_model"]
            results["modes"][mode.label] = {"mode": mode.mode, "options": mode.options, "runs": [one],
                                            "metrics": metrics.run_metrics(one)}
        if exp.sweep:
            sweep = exp.sweep
            options = {"role": sweep["role"]} if sweep.get("role") else {}
            mode = ModeSpec(sweep["mode"], f"{sweep['mode']} sweep", options)
            runs = []
            for seed in range(sweep["first_seed"], sweep["first_seed"] + sweep["seeds"]):
                runner.apply_mode(fabric, mode, seed)
                advance(f"{mode.label}: seed {seed}")
                runs.append({**runner.run_once(spec, exp, flows, mode.label, seed, mode.mode),
                             "clock": results["clock"]})
            results["sweeps"][mode.label] = {"mode": mode.mode, "runs": runs,
                                             "summary": metrics.mode_summary(runs),
                                             "idle_uplinks": metrics.idle_summary(runs)}
    finally:
        if deployed_here and not exp.reuse_lab:
            lifecycle.destroy(spec.name)
        elif lifecycle.is_up(spec.name):
            # Leave the lab's load balancing and ports as the experiment found them.
            fabric.restore(found)
            if found_arn_path and found_arn_path != exp.arn_path:
                faults.notifications(spec.name, arn_path=found_arn_path)
    folder = write(results, exp)
    return results, folder


def report_view(results: dict) -> dict[str, list[dict]]:
    """What dataplane.report reads: label -> runs (several runs = a seed sweep)."""
    view = {label: m["runs"] for label, m in results["modes"].items()}
    view.update({label: s["runs"] for label, s in results["sweeps"].items()})
    return view


def check_output(folder: Path) -> None:
    """Make the results folder now, so a bad one is said before anything is deployed."""
    if folder.exists() and not folder.is_dir():
        raise ExperimentError(f"output folder {folder}: is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ExperimentError(f"output folder {folder}: {err.strerror}") from None
    if not os.access(folder, os.W_OK):
        raise ExperimentError(f"output folder {folder}: not writable")


def write(results: dict, exp: Experiment) -> Path:
    folder = exp.output / f"{exp.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    view = report_view(results)
    text = table.render_text(view, title=exp.name)
    if results["sweeps"]:
        text += "\n" + sweep.render_sweep_text(view)
    (folder / "table.txt").write_text(text)
    # the figures cost seconds a run (matplotlib's layout): a scripted batch may go without
    results["plots"] = []
    if exp.plots:
        # matplotlib takes half a second to import: not for a batch without figures
        from dataplane.report import plots

        results["plots"] = [str(p) for p in plots.write_plots(view, folder)]
    (folder / "results.json").write_text(json.dumps(results, indent=1))    # once, complete
    return folder


def progress_bar(enabled: bool):
    if not enabled:
        return nullcontext(None)

    return Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True)
