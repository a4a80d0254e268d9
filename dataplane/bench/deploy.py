"""Measure deploys: `railab bench deploy` (the shipped lab and the 56-node lab, with the
XDP object's cache cold and warm) and `railab bench deploy --scale [N,N,...]` (dual-plane labs of
N GPUs, by default 128 to 1,024, then the deploy time, memory and destroy time per node
and per link fitted over the sizes). Each row times what a user's `railab deploy FILE` does: reading the
file, resolving the lab, then lifecycle.deploy (its phases come from the deployer and the
agent), and `railab destroy`.

Cold means an empty XDP object cache (a fresh directory, as on a new machine); warm
means the same directory after that first deploy. Memory is what the lab costs the
machine: MemAvailable before the deploy minus MemAvailable with the lab up (agent and
kernel: namespaces, devices, maps), which other work on a shared machine also moves.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from dataplane.errors import RailabError
from dataplane.lab.probe import run_probe
from dataplane.runtime import labspec, lifecycle, state
from dataplane.topology import clab
from dataplane.topology.generate import generate
from dataplane.topology.model import Role
from dataplane.topology.sizing import get_switch, plan_rail_fabric

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "labs" / "rail-optimized" / "rail-optimized.clab.yml"
SCALE_GPUS = (128, 256, 512, 1024)
PROBE_SAMPLE = 1000


def _meminfo_kib(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, value = line.split(":", 1)
        if name == key:
            return int(value.split()[0])
    return 0


def _status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> float:
    return round(os.getloadavg()[0], 1)


@contextmanager
def bpf_cache(directory: str):
    """Point the agent (a child process: the environment) at this XDP object cache."""
    before = os.environ.get("RAILAB_BPF_CACHE")
    os.environ["RAILAB_BPF_CACHE"] = directory
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("RAILAB_BPF_CACHE", None)
        else:
            os.environ["RAILAB_BPF_CACHE"] = before


def dual_plane_file(gpus: int, directory: Path, largest: int = SCALE_GPUS[-1]) -> tuple[str, Path]:
    """A dual-plane lab of `gpus` GPUs (8 per server) written as a file: the planner's lab
    for `largest` GPUs (51.2T switches, 400G NICs split 2 x 200G, links at 200G since the
    generator builds one link speed), with fewer servers and as many uplinks as downlinks
    per leaf. (For small sizes the planner itself would put several rails on one leaf,
    which the generator does not build; the same design scaled down shows the growth.)"""
    plan = plan_rail_fabric(gpus=largest, switch=get_switch("51.2T"), planes=2, link_speed="200G")
    kind, params = plan.generator_params()
    servers = gpus // plan.gpus_per_server
    params.update(servers=servers,
                  links_per_spine=max(1, params["links_per_spine"] * servers // plan.servers))
    topo = generate(kind, name="bench", **params)
    path = directory / f"dual-plane-{gpus}.clab.yml"
    clab.write(topo, str(path), f"railab bench deploy --scale: {gpus} GPUs")
    switches = len(topo.nodes) - servers
    label = f"dual-plane {gpus} GPUs ({servers} x {plan.gpus_per_server}, {switches} switches)"
    return label, path


def planned_file(gpus: int, directory: Path) -> tuple[str, Path]:
    """The lab `railab plan dual-plane --gpus N -o FILE` writes (the planner's defaults);
    where the generator cannot build the planner's design (small sizes put several rails
    on one leaf), dual_plane_file's scaled-down design instead."""
    plan = plan_rail_fabric(gpus=gpus, switch=get_switch("51.2T"), planes=2)
    kind, params = plan.generator_params()
    topo = generate(kind, name="bench", **params)
    roles = [n.role for n in topo.nodes.values()]
    built = {"leaves": roles.count(Role.LEAF), "spines": roles.count(Role.SPINE),
             "cores": roles.count(Role.CORE), "hosts": roles.count(Role.HOST)}
    if built != plan.node_counts():
        return dual_plane_file(gpus, directory, largest=max(gpus, SCALE_GPUS[-1]))
    path = directory / f"plan-dual-plane-{gpus}.clab.yml"
    clab.write(topo, str(path), f"railab bench deploy --scale: railab plan dual-plane --gpus {gpus}")
    label = f"plan dual-plane {gpus} GPUs ({built['hosts']} hosts, {len(topo.nodes) - built['hosts']} switches)"
    return label, path


def measure(label: str, path: Path, runtime: str = "netns", *, probe_sample: int | None = None,
            keep_going: bool = False) -> dict:
    """Deploy the lab in `path` under a fresh name, measure, (probe,) destroy. keep_going:
    a deploy railab refuses becomes the row's `error` instead of an exception."""
    name = f"bench-{uuid.uuid4().hex[:6]}"
    load_before = load_average()
    available_before = _meminfo_kib("MemAvailable")
    cpu_before = time.process_time()
    started = time.monotonic()
    topo = clab.read(str(path))
    topo.name = name
    read_s = time.monotonic() - started
    spec = labspec.build(topo, str(path), runtime=runtime)
    resolve_s = time.monotonic() - started - read_s
    row: dict = {"lab": label, "runtime": runtime, "nodes": len(spec.nodes),
                 "links": sum(len(n.interfaces) for n in spec.nodes) // 2,
                 "load_before": load_before}
    try:
        result = lifecycle.deploy(spec)
        deploy_s = time.monotonic() - started
        agent = state.load(name).agent_pid
        row.update({
            "bpf_cache": result.bpf_cache,
            "deploy_s": round(deploy_s, 2),
            "cpu_s": round(time.process_time() - cpu_before + _cpu_seconds(agent), 2),
            "phases": {"read the topology file": round(read_s, 4),
                       "resolve the lab (addresses, routes)": round(resolve_s, 4), **result.phases},
            "agent_phases": result.agent_phases,
            "agent_rss_mib": round(_status_kib(agent, "VmRSS") / 1024),
            "agent_peak_mib": round(_status_kib(agent, "VmHWM") / 1024),
            "lab_memory_mib": round((available_before - _meminfo_kib("MemAvailable")) / 1024),
        })
        if probe_sample:
            probe_started = time.monotonic()
            try:
                probed = run_probe(spec, sample=probe_sample)
                row["probe"] = {"pairs": probed.pairs, "ok": probed.ok,
                                "s": round(time.monotonic() - probe_started, 2)}
            except RailabError as err:     # the lab is up, the probe could not run: the row says so
                row["probe"] = {"error": str(err)[:300]}
    except RailabError as err:
        if not keep_going:
            raise
        row["error"] = str(err)
    finally:
        t0 = time.monotonic()
        lifecycle.destroy(name)
        row["destroy_s"] = round(time.monotonic() - t0, 2)
    row["load_after"] = load_average()
    return row


def standard(runtimes: list[str], repeat: int = 1) -> list[dict]:
    """The shipped lab and the 56-node dual-plane lab, each cold then warm, per runtime."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="railab-bench-") as tmp:
        large = generate("dual-plane", name="bench", servers=32, rails=8, spines=4)
        large_path = Path(tmp) / "dual-plane-32x8.clab.yml"
        clab.write(large, str(large_path), "railab bench deploy")
        labs = [("rail-optimized (shipped)", SHIPPED), ("dual-plane 32x8, 4+4 spines", large_path)]
        for label, path in labs:
            for runtime in runtimes:
                for _ in range(repeat):
                    rows += cold_then_warm(label, path, runtime)
    return rows


def cold_then_warm(label: str, path: Path, runtime: str = "netns", probe_sample: int | None = None) -> list[dict]:
    cache = tempfile.mkdtemp(prefix="railab-bench-cache-")
    try:
        with bpf_cache(cache):
            return [measure(label, path, runtime, probe_sample=probe_sample) for _ in range(2)]
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def scale(sizes=SCALE_GPUS, probe_sample: int = PROBE_SAMPLE) -> list[dict]:
    """Each size once, with the machine's XDP object cache (what `railab deploy` uses;
    `bpf_cache` says whether bcc compiled): the planner's lab of that many GPUs."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="railab-bench-") as tmp:
        for gpus in sizes:
            label, path = planned_file(gpus, Path(tmp))
            rows.append({"gpus": gpus, **measure(label, path, probe_sample=probe_sample, keep_going=True)})
    return rows


FITTED = {"deploy_s": ("deploy", "ms", 1000.0), "lab_memory_mib": ("memory", "KiB", 1024.0),
          "destroy_s": ("destroy", "ms", 1000.0)}


def fit(rows: list[dict]) -> dict:
    """Least squares of each measure (deploy s, lab MiB, destroy s) as per_node * nodes +
    per_link * links over the rows, in ms or KiB. Labs of one design have nearly the same
    links per node, and then the two cannot be told apart: `per_link_all_in` (the measure
    over links alone, nodes' share included) is always given, per node and per link only
    when the rows' shapes differ enough (`separable`)."""
    pts = [(r["nodes"], r["links"], r) for r in rows if r.get("links") and "deploy_s" in r]
    out: dict = {"rows": len(pts)}
    if not pts:
        return out
    ratios = [links / nodes for nodes, links, _ in pts]
    nn = sum(n * n for n, _, _ in pts)
    ll = sum(x * x for _, x, _ in pts)
    nl = sum(n * x for n, x, _ in pts)
    det = nn * ll - nl * nl
    # relative spread of links per node: under 5 % the normal equations are ill-posed
    out["separable"] = len(pts) >= 2 and (max(ratios) - min(ratios)) / max(ratios) > 0.05 and det > 0
    for key, (name, unit, scale_) in FITTED.items():
        ys = [(n, x, r[key] * scale_) for n, x, r in pts if isinstance(r.get(key), (int, float))]
        if not ys:
            continue
        entry = {"unit": unit, "per_link_all_in": round(sum(x * y for _, x, y in ys) / ll, 3)}
        if out["separable"]:
            ny = sum(n * y for n, _, y in ys)
            ly = sum(x * y for _, x, y in ys)
            entry["per_node"] = round((ll * ny - nl * ly) / det, 3)
            entry["per_link"] = round((nn * ly - nl * ny) / det, 3)
        out[name] = entry
    return out
