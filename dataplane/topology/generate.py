"""Generators for the five fabric kinds of BRIEF.md section 1. Pure: parameters in, Topology out.

Sizing rules (the fat-tree arithmetic the tests check):
- Every switch has `leaf_ports` ports (the radix; one switch model for all tiers).
- A leaf splits its ports between downlinks D and uplinks U in the ratio
  `oversubscription` = D:U (default 1:1, non-blocking): at most leaf_ports*D/(D+U) downlinks.
- Servers are grouped in scalable units: one unit is what one leaf can take. Rail fabrics
  give every unit one leaf per rail; clos fabrics one leaf per unit (single-rail access:
  all NICs of a server on the same leaf).
- Uplinks are sized for a full unit: U = downlinks * up/down, spread over the spines
  with `links_per_spine` parallel links each (U = spines * links_per_spine).
- Giving --links-per-spine without --oversubscription fixes the uplinks; the resulting
  ratio is recorded. Giving both requires them to agree.
- A spine uses all its ports for leaves (two tiers); in clos3 half go down to the pod's
  leaves and half up to the cores (1:1 at the spine), spread evenly over the cores.

Naming (stable, short, readable; counted things are 1-based, hardware indices 0-based):
  hosts srv1.., NICs nic0.. (dual-plane nic0a = plane 0 port, nic0b = plane 1 port);
  clos2 leaf1.. spine1..; clos3 pod1-leaf1, pod1-spine1, core1..;
  rail fabrics leaf<unit>-r<rail> (leaf1-r0 = unit 1, rail 0), spine1..;
  dual-plane p0-leaf1-r0, p0-spine1; switch ports down1.. (towards hosts) and up1..
  (towards the next tier). Port numbers follow creation order: a leaf's down<k> is its
  k-th server (NIC); up<(s-1)*L+l> is link l to spine s; a spine's down ports go leaf by leaf.
"""
from __future__ import annotations

import math
import re

from dataplane import units
from dataplane.errors import TopologyError
from dataplane.topology.model import FABRIC_KINDS, TIER, Endpoint, Link, Node, Role, Topology

LAB_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9-._]*$")  # containerlab's `name` pattern
MAX_LINKS = 100_000  # a guard against typos like --servers 1000000, not a sizing rule

# Parameters each kind understands, and its defaults (small enough for a laptop).
KIND_PARAMS: dict[str, dict[str, object]] = {
    "clos2": dict(servers=8, rails=2, spines=2, links_per_spine=None, leaf_ports=64,
                  oversubscription=None, speed="400G", fabric_speed=None),
    "clos3": dict(servers=8, rails=2, pods=2, spines=2, cores=2, links_per_spine=None,
                  leaf_ports=64, oversubscription=None, speed="400G", fabric_speed=None,
                  core_wiring=None),
    "rail-only": dict(servers=8, rails=4, leaf_ports=64, speed="400G"),
    "rail-optimized": dict(servers=8, rails=4, spines=2, links_per_spine=None, leaf_ports=64,
                           oversubscription=None, speed="400G", fabric_speed=None),
    "dual-plane": dict(servers=4, rails=4, planes=2, spines=2, links_per_spine=None,
                       leaf_ports=64, oversubscription=None, speed="400G", fabric_speed=None),
}
ALL_PARAMS = ("servers", "rails", "pods", "spines", "cores", "links_per_spine", "planes",
              "leaf_ports", "oversubscription", "speed", "fabric_speed", "core_wiring")
# clos3 spine-to-core wiring: "mesh" (or unset) = every spine to every core; "groups" = the k-ary
# fat-tree's, spine s of every pod to core group s only (cores / spines cores per group)
CORE_WIRINGS = ("mesh", "groups")
INT_PARAMS = ("servers", "rails", "pods", "spines", "cores", "links_per_spine", "planes",
              "leaf_ports")



def flag(param: str) -> str:
    return "--" + param.replace("_", "-")


MIN_SPEED = 1_000_000               # 1M
MAX_SPEED = 100_000_000_000_000     # 100T


def parse_speed(text: object, what: str = "--speed") -> int:
    """'400G' -> 400_000_000_000 bits/s. Accepts K/M/G/T suffixes, optional 'bps', or a number."""
    if isinstance(text, int) and not isinstance(text, bool) and MIN_SPEED <= text <= MAX_SPEED:
        return text
    try:
        value, unit = units.speed_parts(text)
    except ValueError:
        raise TopologyError(f"{what} {text!r} is not a port speed like 100G, 400G or 1.6T") from None
    bps = value * units.SPEED_UNITS[unit]
    if bps <= 0 or bps.denominator != 1:
        raise TopologyError(f"{what} {text!r} is not a whole, positive number of bits/s")
    if not MIN_SPEED <= bps <= MAX_SPEED:
        raise TopologyError(f"{what} {text!r} is outside the port speeds railab models "
                            f"({format_speed(MIN_SPEED)} to {format_speed(MAX_SPEED)})")
    return int(bps)


format_speed = units.format_speed
format_ratio = units.format_ratio


def parse_ratio(text: object) -> tuple[int, int]:
    """'2:1' -> (2, 1): downlink bandwidth : uplink bandwidth of a leaf."""
    try:
        down, up = units.parse_ratio(text)
    except ValueError:
        down = up = 0
    if down == 0 or up == 0:
        raise TopologyError(
            f"--oversubscription {text!r} is not a ratio like 1:1 or 3:1 (downlink:uplink)")
    return units.reduce_ratio(down, up)


def _as_int(param: str, value: object, minimum: int = 1) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise TopologyError(f"{flag(param)} {value!r} is not a whole number") from None
    if isinstance(number, bool) or number < minimum:
        raise TopologyError(f"{flag(param)} {value} must be at least {minimum}")
    return number


def resolve_params(kind: str, given: dict[str, object]) -> dict[str, object]:
    """Defaults filled in, types checked, parameters foreign to the kind refused."""
    if kind not in FABRIC_KINDS:
        raise TopologyError(f"unknown fabric kind {kind!r}; choose one of {', '.join(FABRIC_KINDS)}")
    known = KIND_PARAMS[kind]
    for param, value in given.items():
        if param not in ALL_PARAMS:
            raise TopologyError(f"unknown generator parameter {param!r}")
        if value is not None and param not in known:
            raise TopologyError(f"{flag(param)} does not apply to {kind} ({_why_not(kind, param)})")
    params = dict(known)
    params.update({k: v for k, v in given.items() if v is not None})
    for param in INT_PARAMS:
        if params.get(param) is not None:
            params[param] = _as_int(param, params[param], 2 if param == "leaf_ports" else 1)
    params["speed"] = format_speed(parse_speed(params["speed"]))
    if params.get("fabric_speed") is not None:
        params["fabric_speed"] = format_speed(parse_speed(params["fabric_speed"], "--fabric-speed"))
        if params["fabric_speed"] == params["speed"]:
            params["fabric_speed"] = None       # one speed: the file says it once
    if params.get("core_wiring") is not None and params["core_wiring"] not in CORE_WIRINGS:
        raise TopologyError(f"--core-wiring {params['core_wiring']!r}: choose one of {', '.join(CORE_WIRINGS)}")
    if params.get("oversubscription") is not None:
        params["oversubscription"] = format_ratio(*parse_ratio(params["oversubscription"]))
    if kind == "dual-plane" and params["planes"] != 2:
        raise TopologyError(f"--planes {params['planes']}: a dual-plane fabric has exactly 2 planes")
    return params


def _why_not(kind: str, param: str) -> str:
    if kind == "rail-only" and param in ("spines", "links_per_spine", "oversubscription", "cores",
                                         "fabric_speed"):
        return "it has no spines"
    if param in ("pods", "cores", "core_wiring"):
        return "only clos3 has pods and cores"
    if param == "planes":
        return "only dual-plane has planes"
    return "not one of its parameters"


def generate(kind: str, name: str | None = None, **given: object) -> Topology:
    """Build a fabric of `kind`. Raises TopologyError naming the parameter that cannot work."""
    params = resolve_params(kind, given)
    name = kind if name is None else name
    if not LAB_NAME_RE.match(name):
        raise TopologyError(
            f"--name {name!r}: a lab name starts with a letter or digit and has only letters, "
            "digits, '-', '_' and '.'")
    speed = parse_speed(params["speed"])
    fabric_speed = parse_speed(params["fabric_speed"]) if params.get("fabric_speed") else speed
    builder = _Builder(Topology(name=name, kind=kind, params=params), speed, fabric_speed)
    if kind in ("clos2", "clos3"):
        _build_clos(builder, params, pods=params.get("pods"))
    else:
        _build_rail(builder, params, kind)
    topo = builder.topo
    # what the file records and reads back: parameters left unset stay out
    topo.params = {k: v for k, v in topo.params.items() if v is not None}
    # Hosts first, then leaves, spines, cores (stable within a tier): files read bottom up.
    topo.nodes = dict(sorted(topo.nodes.items(), key=lambda item: TIER[item[1].role]))
    return topo


class _Builder:
    """Adds nodes and links, numbering each switch's down/up ports in creation order."""

    def __init__(self, topo: Topology, speed_bps: int, fabric_speed_bps: int):
        self.topo = topo
        self.speed = speed_bps
        self.fabric_speed = fabric_speed_bps
        self.ports: dict[tuple[str, str], int] = {}

    def node(self, name: str, role: Role, **facts) -> str:
        self.topo.add_node(Node(name=name, role=role, **facts))
        return name

    def port(self, node: str, direction: str) -> str:
        key = (node, direction)
        self.ports[key] = self.ports.get(key, 0) + 1
        return f"{direction}{self.ports[key]}"

    def link(self, a: Endpoint, b: Endpoint, rail=None, plane=None, speed=None) -> None:
        self.topo.add_link(Link(a=a, b=b, speed_bps=speed or self.speed, rail=rail, plane=plane))

    def uplink(self, lower: str, upper: str, plane=None) -> None:
        self.link(Endpoint(lower, self.port(lower, "up")), Endpoint(upper, self.port(upper, "down")),
                  plane=plane, speed=self.fabric_speed)


def _leaf_uplinks(params: dict, downlinks: int) -> int:
    """Links per spine for a leaf with `downlinks` used ports; records the ratio in params."""
    spines, leaf_ports = params["spines"], params["leaf_ports"]
    given_links, given_ratio = params.get("links_per_spine"), params.get("oversubscription")
    # the ratio is of bandwidth: with faster fabric links, fewer uplinks carry the same
    speed_down = parse_speed(params["speed"])
    speed_up = parse_speed(params["fabric_speed"]) if params.get("fabric_speed") else speed_down
    if given_ratio is None and given_links is not None:
        uplinks = spines * given_links
        params["oversubscription"] = format_ratio(downlinks * speed_down, uplinks * speed_up)
    else:
        down, up = parse_ratio(given_ratio or "1:1")
        params["oversubscription"] = format_ratio(down, up)
        if (downlinks * speed_down * up) % (down * speed_up):
            raise TopologyError(
                f"--oversubscription {down}:{up} does not divide the {downlinks} downlinks of a "
                f"leaf into whole uplinks")
        uplinks = downlinks * speed_down * up // (down * speed_up)
        if uplinks % spines:
            raise TopologyError(
                f"--spines {spines} cannot share the {uplinks} uplinks of a leaf ({down}:{up} with "
                f"{downlinks} downlinks) equally; use a number of spines that divides {uplinks}")
        if given_links is not None and given_links * spines != uplinks:
            raise TopologyError(
                f"--links-per-spine {given_links} gives {given_links * spines} uplinks per leaf, "
                f"but {down}:{up} with {downlinks} downlinks needs {uplinks}")
    if downlinks + uplinks > leaf_ports:
        raise TopologyError(
            f"--leaf-ports {leaf_ports} is too few for {downlinks} downlinks and {uplinks} uplinks")
    params["links_per_spine"] = uplinks // spines
    return uplinks // spines


def _max_downlinks(params: dict) -> int:
    """Downlink ports of one leaf: its share of the radix under the requested ratio."""
    leaf_ports = params["leaf_ports"]
    if params.get("oversubscription") is None and params.get("links_per_spine") is not None:
        return leaf_ports - params["spines"] * params["links_per_spine"]
    down, up = parse_ratio(params.get("oversubscription") or "1:1")
    speed_down = parse_speed(params["speed"])
    speed_up = parse_speed(params["fabric_speed"]) if params.get("fabric_speed") else speed_down
    # ports D (down) and U (up) with D*speed_down : U*speed_up = down : up and D + U = leaf_ports
    return leaf_ports * down * speed_up // (down * speed_up + up * speed_down)


def _check_spine_ports(params: dict, needed: int, what: str) -> None:
    if needed > params["leaf_ports"]:
        raise TopologyError(
            f"--leaf-ports {params['leaf_ports']}: each spine needs {needed} ports ({what}); "
            "use more --spines, fewer servers or a larger radix")


def _check_size(params: dict, links: int) -> None:
    if links > MAX_LINKS:
        raise TopologyError(f"--servers {params['servers']}: the lab would have {links} links, "
                            f"more than the {MAX_LINKS} railab generates")


def _build_clos(b: _Builder, params: dict, pods: int | None) -> None:
    servers, rails, spines = params["servers"], params["rails"], params["spines"]
    pod_count = pods or 1
    if servers % pod_count:
        raise TopologyError(f"--servers {servers} cannot be split equally into --pods {pod_count}")
    per_pod = servers // pod_count
    max_down = _max_downlinks(params)
    per_leaf = min(per_pod, max_down // rails)
    if per_leaf < 1:
        raise TopologyError(
            f"--leaf-ports {params['leaf_ports']}: a leaf has {max_down} downlink ports, fewer "
            f"than the {rails} NICs of one server (--rails) that single-rail access puts on it")
    links_per_spine = _leaf_uplinks(params, per_leaf * rails)
    leaves_per_pod = math.ceil(per_pod / per_leaf)
    spine_down = leaves_per_pod * links_per_spine
    core_links, grouped, reach = 0, False, 0
    if pods:
        cores = params["cores"]
        grouped = params.get("core_wiring") == "groups"
        if grouped and cores % spines:
            raise TopologyError(f"--core-wiring groups: --cores {cores} cannot be split into one "
                                f"group per spine of a pod (--spines {spines})")
        reach = cores // spines if grouped else cores    # cores one spine connects to
        if spine_down % reach:
            raise TopologyError(
                f"--cores {cores} cannot share the {spine_down} uplinks of a spine equally "
                f"(a spine has as many core links as leaf links); use a divisor of {spine_down}")
        core_links = spine_down // reach
        _check_spine_ports(params, 2 * spine_down, f"{spine_down} to leaves, {spine_down} to cores")
        on_core = pods * (1 if grouped else spines) * core_links
        _check_spine_ports(params, on_core, f"on the cores: {pods} pods x "
                           f"{'1 spine' if grouped else f'{spines} spines'} x {core_links} links")
    else:
        _check_spine_ports(params, spine_down, f"{leaves_per_pod} leaves x {links_per_spine} links")
    _check_size(params, servers * rails + pod_count * spines * spine_down * (2 if pods else 1))

    cores = [b.node(f"core{c}", Role.CORE, index=c) for c in range(1, params["cores"] + 1)] if pods else []
    server = 0
    for pod in range(1, pod_count + 1):
        prefix, pod_label = (f"pod{pod}-", pod) if pods else ("", None)
        leaves = [b.node(f"{prefix}leaf{i}", Role.LEAF, pod=pod_label, index=i)
                  for i in range(1, leaves_per_pod + 1)]
        tops = [b.node(f"{prefix}spine{s}", Role.SPINE, pod=pod_label, index=s)
                for s in range(1, spines + 1)]
        for i in range(per_pod):
            server += 1
            host = b.node(f"srv{server}", Role.HOST, index=server, gpus=rails, pod=pod_label)
            leaf = leaves[i // per_leaf]
            for rail in range(rails):
                b.link(Endpoint(host, f"nic{rail}"), Endpoint(leaf, b.port(leaf, "down")), rail=rail)
        for leaf in leaves:
            for spine in tops:
                for _ in range(links_per_spine):
                    b.uplink(leaf, spine)
        for s, spine in enumerate(tops):
            group = cores[s * reach:(s + 1) * reach] if grouped else cores
            for core in group:
                for _ in range(core_links):
                    b.uplink(spine, core)


def _build_rail(b: _Builder, params: dict, kind: str) -> None:
    servers, rails = params["servers"], params["rails"]
    if kind == "rail-only":
        max_down = params["leaf_ports"]  # no spines: every port faces a server
        if servers > max_down:
            raise TopologyError(
                f"--servers {servers}: rail-only has no spines, so each rail is one leaf of "
                f"--leaf-ports {max_down}; use rail-optimized or a larger radix")
        per_leaf, links_per_spine, spines = servers, 0, 0
    else:
        spines = params["spines"]
        max_down = _max_downlinks(params)
        if max_down < 1:
            raise TopologyError(f"--leaf-ports {params['leaf_ports']} leaves no downlink ports")
        per_leaf = min(servers, max_down)
        links_per_spine = _leaf_uplinks(params, per_leaf)
    leaf_units = math.ceil(servers / per_leaf)
    _check_spine_ports(params, rails * leaf_units * links_per_spine,
                       f"{rails * leaf_units} leaves x {links_per_spine} links")
    planes = [0, 1] if kind == "dual-plane" else [None]
    _check_size(params, len(planes) * rails * (servers + leaf_units * spines * links_per_spine))

    fabric: dict[object, tuple[dict, list[str]]] = {}
    for plane in planes:
        prefix = "" if plane is None else f"p{plane}-"
        leaves = {(u, r): b.node(f"{prefix}leaf{u}-r{r}", Role.LEAF, rail=r, plane=plane, index=u)
                  for u in range(1, leaf_units + 1) for r in range(rails)}
        tops = [b.node(f"{prefix}spine{s}", Role.SPINE, plane=plane, index=s)
                for s in range(1, spines + 1)]
        fabric[plane] = (leaves, tops)
    for server in range(1, servers + 1):
        host = b.node(f"srv{server}", Role.HOST, index=server, gpus=rails)
        unit = (server - 1) // per_leaf + 1
        for rail in range(rails):
            for plane in planes:
                nic = f"nic{rail}" if plane is None else f"nic{rail}{'ab'[plane]}"
                leaf = fabric[plane][0][unit, rail]
                b.link(Endpoint(host, nic), Endpoint(leaf, b.port(leaf, "down")), rail=rail, plane=plane)
    for plane in planes:
        leaves, tops = fabric[plane]
        for leaf in leaves.values():
            for spine in tops:
                for _ in range(links_per_spine):
                    b.uplink(leaf, spine, plane=plane)


def command_line(topo: Topology) -> str:
    """The `railab topo gen` command that makes `topo` again (all parameters spelled out)."""
    words = ["railab", "topo", "gen", str(topo.kind)]
    for param in ALL_PARAMS:
        if topo.params.get(param) is not None:
            words += [flag(param), str(topo.params[param])]
    if topo.name != topo.kind:
        words += ["--name", topo.name]
    return " ".join(words)
