"""Experiment files: which lab, which modes to compare, which workload, how long.

```yaml
name: ecmp-vs-spray
lab: ../labs/rail-optimized/rail-optimized.clab.yml   # relative to this file
duration: 2s
modes: [ecmp, {mode: spray-rr}, {mode: flowlet, flowlet_timeout_us: 200, role: leaf}]
workload: elephants.yml            # or the workload inline, as a mapping
port_model: {scale: 0.00025, buffer_bytes: 32768, ecn_bytes: 8192}   # optional; queue: real
                                    # unless `queue: virtual` (see EXPERIMENT_QUEUE)
sweep: {mode: ecmp, seeds: 30, first_seed: 1, role: leaf}           # optional
output: results                     # folder (from the current directory) for <name>-<time>/
arn_path: dataplane                 # optional: who makes and consumes link-down notices
                                    # (agent | dataplane; default: as the lab is set)
```
Everything is checked before anything is deployed; errors are one line naming the file
and the field.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import jsonschema

from dataplane import timescale, yamlfile
from dataplane.agent import arnpath
from dataplane.errors import RailabError
from dataplane.runtime import labspec
from dataplane.topology import clab
from dataplane.traffic import workload as wl
from dataplane.units import parse_speed
from dataplane.xdp import abi

# path navigation: the groups' mode (ecmp unless `base:` says) plus the lab's controller,
# which places the heavy flows it sees (nav) or the flows the senders announce (nav-host)
NAV_MODES = ("nav", "nav-host")
MODES = tuple(abi.LB_MODES) + NAV_MODES   # the data plane's modes: a new one is usable here at once


class ExperimentError(RailabError):
    pass


_PORT_MODEL = {
    "type": "object",
    "properties": {
        "scale": {"type": "number", "minimum": 0, "maximum": 1},
        "buffer_bytes": {"type": "integer", "minimum": 1},
        "ecn_bytes": {"type": "integer", "minimum": -1},
        "ecn_max_bytes": {"type": "integer", "minimum": -1},
        "ecn_pmax": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "pfc": {"enum": ["on", "off"]},
        "xoff_bytes": {"type": "integer", "minimum": 0},
        "xon_bytes": {"type": "integer", "minimum": 0},
        "headroom_bytes": {"type": "integer", "minimum": 0},
        "pfc_dscp": {"type": "integer", "minimum": 0, "maximum": 63},
        "pfc_priority": {"type": "integer", "minimum": 0, "maximum": 7},
        "pfc_quanta": {"type": "integer", "minimum": 1, "maximum": 65535},
        "pfc_watchdog_us": {"type": "number", "minimum": 0},
        "pfc_restore_us": {"type": "number", "minimum": 0},
        "window_us": {"type": "number", "exclusiveMinimum": 0},
        "queue": {"enum": ["virtual", "real"]},
    },
    "additionalProperties": False,
}

_MODE_OBJECT = {
    "type": "object",
    "required": ["mode"],
    "properties": {
        "mode": {"enum": list(MODES)},
        "label": {"type": "string"},
        "role": {"enum": ["leaf", "spine", "core"]},
        "switch": {"type": "string"},
        "seed": {"type": ["integer", "string"]},
        "hash_fields": {"type": "array", "items": {"type": "string"}},
        "flowlet_timeout_us": {"type": "number", "exclusiveMinimum": 0},
        "busy_util": {"type": "number", "minimum": 0, "maximum": 1},
        "busy_timeout_us": {"type": "number", "exclusiveMinimum": 0},
        "weights": {},
        "bandwidth": {"type": "boolean"},
        "interval_us": {"type": "number", "exclusiveMinimum": 0},
        "base": {"enum": list(abi.LB_MODES)},
        "port_model": _PORT_MODEL,     # this mode's changes over the experiment's port model
        "transport": {"enum": ["go-back-n", "selective-repeat"]},
        "dcqcn": {"type": "boolean"},   # on/off: the workload's DCQCN for this mode
    },
    "additionalProperties": False,
}

# Who plays the hosts' NICs. kernel: the XDP NIC (dataplane.nic) wherever it covers the
# run, Python elsewhere, and the run record says which and why; python: always Python.
HOSTS = ("kernel", "python")

SCHEMA = {
    "type": "object",
    "required": ["name", "lab", "modes", "workload"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$"},
        "lab": {"type": "string", "minLength": 1},
        "duration": {"type": ["string", "number"]},
        "modes": {"type": "array", "minItems": 1,
                  "items": {"anyOf": [{"enum": list(MODES)}, _MODE_OBJECT]}},
        "workload": {"type": ["string", "object"]},
        "port_model": _PORT_MODEL,
        "sweep": {
            "type": "object",
            "required": ["seeds"],
            "properties": {
                "mode": {"enum": list(abi.LB_MODES)},
                "seeds": {"type": "integer", "minimum": 1, "maximum": 10000},
                "first_seed": {"type": "integer", "minimum": 0},
                "role": {"enum": ["leaf", "spine", "core"]},
            },
            "additionalProperties": False,
        },
        "output": {"type": "string"},
        "reuse_lab": {"type": "boolean"},
        "hosts": {"enum": list(HOSTS)},
        "arn_path": {"enum": list(arnpath.PATHS)},
        "sample_interval": {"type": ["string", "number"]},
        "events": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["at", "fault"],
                "properties": {
                    "at": {"type": "number", "minimum": 0},
                    "for": {"type": "number", "exclusiveMinimum": 0},
                    "fault": {"enum": ["link-down", "link-up", "switch-down", "switch-up",
                                       "plane-down", "plane-up", "degrade", "restore"]},
                    "a": {"type": "string"}, "b": {"type": "string"},
                    "switch": {"type": "string"}, "plane": {"type": "integer", "minimum": 0},
                    "port": {"type": "string"}, "speed": {"type": ["string", "number"]},
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}


@dataclass
class ModeSpec:
    mode: str
    label: str
    options: dict = field(default_factory=dict)
    port_model: dict = field(default_factory=dict)   # over the experiment's, for this mode only
    transport: str | None = None     # the workload's closed-loop transport, switched for this mode
    dcqcn: bool | None = None        # DCQCN on/off for this mode (None: the workload's)


@dataclass
class Experiment:
    name: str
    source: Path
    lab_file: Path
    duration_s: float
    modes: list[ModeSpec]
    workload: wl.Workload
    port_model: dict
    sweep: dict | None
    output: Path
    reuse_lab: bool
    events: list[dict] = field(default_factory=list)
    sample_s: float = 0.1
    hosts: str = "kernel"            # kernel: the kernel NIC where it covers the run (HOSTS)
    arn_path: str | None = None      # link-down notices by (arnpath.PATHS); None: as the lab is
    plots: bool = True               # False (`railab run --no-plots`): results and table only


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def load(path: str | Path, overrides: dict | None = None) -> Experiment:
    """The experiment file at `path`; `overrides` replace its top-level keys (a bench
    runs a shipped experiment at another scale, say) before it is checked."""
    source = Path(path)
    doc = yamlfile.load(source, ExperimentError, "experiment file")
    if not isinstance(doc, dict):
        raise ExperimentError(f"{source}: an experiment is a mapping with name, lab, modes and workload")
    doc = {**doc, **(overrides or {})}
    errors = sorted(jsonschema.Draft7Validator(SCHEMA).iter_errors(doc), key=lambda e: e.path)
    if errors:
        err = errors[0]
        raise ExperimentError(f"{source}: {_where(err)}: {err.message}")

    base = source.parent
    lab_file = (base / doc["lab"]).resolve()
    if not lab_file.is_file():
        raise ExperimentError(f"{source}: lab: {doc['lab']} not found (looked at {lab_file})")
    try:
        duration = wl.parse_duration(doc.get("duration", "2s"))
    except ValueError:
        duration = -1.0
    if not 0 < duration <= 600:
        raise ExperimentError(f"{source}: duration: {doc.get('duration')!r} is not a duration "
                              "between 0 and 600 seconds (like 3s or 500ms)")

    raw_workload = doc["workload"]
    if isinstance(raw_workload, str):
        wpath = base / raw_workload
        if not wpath.is_file():
            raise ExperimentError(f"{source}: workload: {raw_workload} not found")
        workload = wl.load(wpath)
    else:
        workload = wl.load_dict({"duration": duration, **raw_workload}, f"{source}: workload")

    modes = []
    seen = set()
    for item in doc["modes"]:
        entry = {"mode": item} if isinstance(item, str) else dict(item)
        mode = entry.pop("mode")
        label = entry.pop("label", mode)
        mode_port_model = entry.pop("port_model", {})
        if label in seen:
            raise ExperimentError(f"{source}: modes: {label} appears twice (give each a distinct label)")
        seen.add(label)
        transport = entry.pop("transport", None)
        if transport and not workload.transport.closed_loop:
            raise ExperimentError(f"{source}: modes: {label}: transport: the workload's transport is "
                                  "open-loop; a mode may only switch between go-back-n and selective-repeat")
        dcqcn = entry.pop("dcqcn", None)
        if dcqcn is not None and not workload.transport.closed_loop:
            raise ExperimentError(f"{source}: modes: {label}: dcqcn: needs a closed-loop transport in "
                                  "the workload (go-back-n or selective-repeat)")
        modes.append(ModeSpec(mode, label, entry, mode_port_model, transport, dcqcn))
    _check_mode_targets(source, lab_file, modes)
    sweep = doc.get("sweep")
    if sweep is not None:
        sweep = {"mode": "ecmp", "first_seed": 1, **sweep}
    # Results go where the user runs the command, as containerlab's lab directories do.
    output = Path(doc.get("output", "results"))
    events = _check_events(source, lab_file, doc.get("events", []), duration)
    sample_s = wl.parse_duration(doc.get("sample_interval", 0.1))
    if not 0.01 <= sample_s <= 10:
        raise ExperimentError(f"{source}: sample_interval: must be between 10 ms and 10 s")
    port_model = doc.get("port_model", {})
    workload.stretch = timescale.stretch(port_model.get("scale"))   # its gaps are real-fabric time
    if port_model.get("queue") == "real" and port_model.get("scale") == 0:
        raise ExperimentError(f"{source}: port_model: a real queue needs the port model on (scale > 0)")
    _check_line_rate(source, lab_file, workload, port_model.get("scale"))
    return Experiment(doc["name"], source, lab_file, duration, modes, workload,
                      port_model, sweep, output, bool(doc.get("reuse_lab", False)),
                      events, sample_s, doc.get("hosts", "kernel"), doc.get("arn_path"))


def _check_mode_targets(source: Path, lab_file: Path, modes: list[ModeSpec]) -> None:
    """A mode's switch exists, its seed fits, its weights fit its groups: checked on the
    lab's plan, before anything is deployed."""
    if not any(m.options.get("switch") or m.options.get("weights") is not None
               or m.options.get("seed") is not None for m in modes):
        return

    spec = labspec.build(clab.read(lab_file), str(lab_file))
    roles = {n.name: n.role for n in spec.switches}
    for m in modes:
        where = f"{source}: modes: {m.label}"
        switch, role = m.options.get("switch"), m.options.get("role")
        if switch is not None and switch not in roles:
            raise ExperimentError(f"{where}: switch: {switch!r} is not a switch of the lab")
        seed = m.options.get("seed")
        if seed is not None and seed != "auto" and not (isinstance(seed, int) and 0 <= seed < 2**32):
            raise ExperimentError(f"{where}: seed: {seed!r} is not 'auto' or an integer 0 .. 2^32-1")
        weights = m.options.get("weights")
        if isinstance(weights, list):
            targets = [n for n in roles if (switch is None or n == switch) and (role is None or roles[n] == role)]
            sizes = {len(r.nexthops) for n in targets for r in spec.routes.get(n, [])}
            if len(weights) not in sizes:
                raise ExperimentError(f"{where}: weights: {len(weights)} given; the groups there have "
                                      f"{' or '.join(map(str, sorted(sizes))) or 'no'} members")


def host_line_bps(lab_file: Path, scale: float) -> float:
    """The slowest host NIC's emulated line rate (nominal speed x scale), bits/s."""
    topo = clab.read(lab_file)
    hosts = {n.name for n in topo.hosts}
    speeds = [l.speed_bps for l in topo.links if l.a.node in hosts or l.b.node in hosts]
    return min(speeds) * scale if speeds else 0.0


def _check_line_rate(source: Path, lab_file: Path, workload: wl.Workload, scale: float | None) -> None:
    """A closed-loop transport or a `load` needs the NICs' line rate (the port model's
    scale); `load` becomes the senders' rate; no rate may exceed the line rate."""
    flows = workload.pattern.get("flows", []) or []
    needs = (workload.transport.closed_loop or workload.load is not None
             or any("load" in f for f in flows))
    if not scale or scale <= 0:
        if needs:
            raise ExperimentError(f"{source}: port_model: scale: a closed-loop transport or a workload "
                                  "(or flow) load needs the port model's scale (the NICs' line rate is nominal x scale)")
        return
    line = host_line_bps(lab_file, scale)
    if line <= 0:
        return
    if workload.load is not None:
        workload.rate = wl.Rate(workload.load * line, "bps")
    for flow in flows:
        if "load" in flow and "rate" not in flow:
            flow["rate"] = f"{flow['load'] * line:.0f}bps"
    frame = workload.mtu_frame_bytes
    uses_rate = workload.pattern["type"] != "flows" or any("rate" not in f for f in flows)
    rates = [("workload: rate", workload.rate.bps(frame))] if uses_rate else []
    for i, flow in enumerate(flows):
        if "rate" in flow:
            rates.append((f"workload: pattern.flows.{i}.rate", wl.parse_rate(flow["rate"]).bps(frame)))
    for where, bps in rates:
        if bps > line * 1.000001:
            raise ExperimentError(f"{source}: {where}: {bps / 1e6:g} Mb/s is above the NICs' line rate "
                                  f"{line / 1e6:g} Mb/s (nominal x port_model.scale)")


_EVENT_NEEDS = {"link-down": ("a",), "link-up": ("a",), "switch-down": ("switch",),
                "switch-up": ("switch",), "plane-down": ("plane",), "plane-up": ("plane",),
                "degrade": ("port", "speed"), "restore": ("port",)}


def _check_events(source: Path, lab_file: Path, events: list[dict], duration: float) -> list[dict]:
    """Events name real endpoints, switches and planes of the lab, inside the run."""
    if not events:
        return []
    topo = clab.read(lab_file)
    endpoints = {f"{l.a.node}:{l.a.interface}" for l in topo.links} | \
                {f"{l.b.node}:{l.b.interface}" for l in topo.links}
    pairs = {frozenset((f"{l.a.node}:{l.a.interface}", f"{l.b.node}:{l.b.interface}")) for l in topo.links}
    speeds = {f"{e.node}:{e.interface}": l.speed_bps for l in topo.links for e in (l.a, l.b)}
    switches = {n.name for n in topo.switches}
    planes = set(topo.planes())
    for i, event in enumerate(events):
        where = f"{source}: events.{i}"
        for key in _EVENT_NEEDS[event["fault"]]:
            if key not in event:
                raise ExperimentError(f"{where}: {event['fault']} needs {key!r}")
        for key in ("a", "b", "port"):
            if key in event and event[key] not in endpoints:
                raise ExperimentError(f"{where}: {key}: {event[key]!r} is not an interface of the lab (node:interface)")
        if "switch" in event and event["switch"] not in switches:
            raise ExperimentError(f"{where}: switch: {event['switch']!r} is not a switch of the lab")
        if "a" in event and "b" in event and \
                frozenset((event["a"], event["b"])) not in pairs:
            raise ExperimentError(f"{where}: {event['a']} and {event['b']} are not the two ends of a link")
        if event["fault"] in ("degrade",):
            try:
                speed = parse_speed(event["speed"])
            except ValueError as err:
                raise ExperimentError(f"{where}: speed: {err}") from None
            nominal = speeds[event["port"]]
            if not 0 < speed <= nominal:
                raise ExperimentError(f"{where}: speed: {event['speed']!r} must be more than 0 and at "
                                      f"most the port's {nominal / 1e9:g}G")
        if "plane" in event and event["plane"] not in planes:
            raise ExperimentError(f"{where}: plane: the lab has no plane {event['plane']} (planes: {sorted(planes) or 'none'})")
        if event["at"] >= duration:
            raise ExperimentError(f"{where}: at: {event['at']} s is not inside the {duration} s run")
    return sorted(events, key=lambda e: e["at"])
