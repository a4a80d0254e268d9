"""`railab bench deploy|...`: benchmarks that print tables (targets are checked by eye
and reported in the README, never asserted as timings in tests)."""
from __future__ import annotations

import resource
import time
import uuid
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("bench", help="run a benchmark and print its table")
    which = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    d = which.add_parser("deploy", help="deploy/destroy time and peak memory, small and large lab")
    d.add_argument("--repeat", type=int, default=1)
    d.set_defaults(func=run_deploy)


def _mem_used_kib() -> int:
    fields = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0])
    return fields["MemTotal"] - fields["MemAvailable"]


def _vm_hwm_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _labs():
    from dataplane.topology.clab import read as load_topology
    from dataplane.topology.generate import generate

    root = Path(__file__).resolve().parents[2]
    small = load_topology(root / "labs" / "rail-optimized" / "rail-optimized.clab.yml")
    large = generate("dual-plane", name="bench-large", servers=32, rails=8, spines=4)
    return [("rail-optimized (shipped)", small), ("dual-plane 32x8, 4+4 spines", large)]


def run_deploy(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from dataplane.runtime import labspec, lifecycle, state

    lifecycle.require_root()
    table = Table(title="railab bench deploy")
    table.add_column("lab", no_wrap=True)
    for column in ("nodes", "links", "deploy s", "destroy s", "agent peak MiB",
                   "deployer peak MiB", "system delta MiB"):
        table.add_column(column, justify="right")
    for label, topo in _labs():
        for _ in range(args.repeat):
            topo.name = f"bench-{uuid.uuid4().hex[:6]}"
            spec = labspec.build(topo, "bench")
            before = _mem_used_kib()
            t0 = time.monotonic()
            try:
                lifecycle.deploy(spec)
                deploy_s = time.monotonic() - t0
                after = _mem_used_kib()
                agent_pid = state.load(spec.name).agent_pid
                agent_kib = _vm_hwm_kib(agent_pid)
            finally:
                t1 = time.monotonic()
                lifecycle.destroy(spec.name)
                destroy_s = time.monotonic() - t1
            self_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            table.add_row(label, str(len(spec.nodes)), str(sum(len(n.interfaces) for n in spec.nodes) // 2),
                          f"{deploy_s:.2f}", f"{destroy_s:.2f}", f"{agent_kib / 1024:.0f}",
                          f"{self_kib / 1024:.0f}", f"{(after - before) / 1024:.0f}")
    Console().print(table)
    return 0
