"""`railab bench lab`: how many packets a whole lab delivers per wall second with the
kernel NIC and with the Python hosts, side by side in one run on one deployed lab.

The workload is the teaching demo's (experiments/ecmp-vs-spray.yml: collective chunks on
the rail-optimized lab) under one mode, at a port speed fast enough that the hosts, not
the emulated ports, set the pace: every host kind is offered the same packets per real
second, and what it delivers per wall second of sending is what it can carry. Loss is
reported beside it: a host kind that cannot keep up falls behind (open loop: it sends
late), it does not get to drop.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from dataplane.experiment import session
from dataplane.experiment import spec as experiment_spec
from dataplane.runtime import labspec, lifecycle
from dataplane.topology import clab

ROOT = Path(__file__).resolve().parent.parent.parent
DEMO = ROOT / "experiments" / "ecmp-vs-spray.yml"
HOST_KINDS = ("python", "kernel")


def _one(exp, lab_name: str) -> dict:
    t0 = time.monotonic()
    results, _folder = session.run(exp, lab_name=lab_name)
    total_s = time.monotonic() - t0
    run = next(iter(results["modes"].values()))["runs"][0]
    sent = sum(f["sent_packets"] for f in run["flows"])
    delivered = sum(f["packets"] for f in run["flows"])
    lost = sum(f["lost"] for f in run["flows"])
    return {"hosts": run["hosts"]["receive"], "send": run["hosts"]["send"], "why": run["hosts"]["why"],
            # send engines (one per CPU, dataplane.nic.shards); None: Python senders
            "engines": run["hosts"].get("engine", {}).get("shards"),
            "sent_packets": sent, "delivered_packets": delivered,
            "loss_pct": 100.0 * lost / sent if sent else 0.0,
            "sending_wall_s": run["wall_s"], "run_wall_s": total_s,
            "delivered_pps": delivered / run["wall_s"] if run["wall_s"] > 0 else 0.0}


def bench_lab(*, scale: float = 5e-5, duration_s: float | None = None, mode: str = "spray-rr",
              queue: str | None = None, experiment: Path = DEMO) -> dict:
    """Deploys the experiment's lab under a name of its own, runs the workload once per
    host kind, destroys the lab. Returns the rows and their ratio."""
    lifecycle.require_root()
    base = experiment_spec.load(experiment)
    topo = clab.read(base.lab_file)
    topo.name = f"benchlab{int(time.time()) % 100000}"
    spec = labspec.build(topo, str(base.lab_file))
    rows = []
    with tempfile.TemporaryDirectory(prefix="railab-benchlab-") as out:
        lifecycle.deploy(spec)
        try:
            for kind in HOST_KINDS:
                exp = experiment_spec.load(experiment, {
                    "modes": [next((m.options | {"mode": m.mode} for m in base.modes if m.label == mode),
                                   mode)],
                    "hosts": kind, "output": out, "reuse_lab": True,
                    "duration": duration_s or base.duration_s,
                    "port_model": {**base.port_model, "scale": scale, **({"queue": queue} if queue else {})}})
                rows.append({"asked": kind, **_one(exp, spec.name)})
        finally:
            lifecycle.destroy(spec.name)
    python, kernel = rows
    return {"experiment": str(experiment), "mode": mode, "scale": scale, "queue": queue or base.port_model.get("queue", "real"),
            "port_mbps": round(400e9 * scale / 1e6, 3), "duration_s": duration_s or base.duration_s,
            "rows": rows, "kernel_over_python": kernel["delivered_pps"] / python["delivered_pps"]
            if python["delivered_pps"] else None}
