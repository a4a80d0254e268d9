"""Sizing calculator behind `railab plan` (BRIEF.md section 2). Pure arithmetic, no I/O.

Two families of designs:

* `plan_fat_tree(radix, tiers)`: the textbook fat-tree built from K-port switches.
  Two tiers: K leaves (K/2 ports down, K/2 up), K/2 spines (all K ports to leaves, one
  link to every leaf), K^2/2 end ports. Three tiers: K pods, each K/2 leaves (edge) and
  K/2 spines (aggregation); K^2/4 cores, each with one link to every pod; K^3/4 end ports.

* `plan_rail_fabric(...)`: rail-optimized, dual-plane rail-optimized and rail-only
  fabrics, sized by the white-paper rule:

  - every GPU has one NIC; its speed is split over the planes (a 400G NIC on two planes
    has two 200G ports), one port to each plane; the planes are identical;
  - a leaf gives half its capacity to downlinks (broken out to the NIC port speed) and
    half to uplinks (at the fabric link speed), or another split if asked (`ratio`);
  - rail alignment: GPU i of every server goes to a rail-i leaf.  With more servers than
    a leaf has downlinks, each rail gets ceil(servers / downlinks) leaves of its own;
    with fewer, one leaf takes whole rails, floor(downlinks / servers) of them;
  - within a plane every leaf links to every spine with the same number p of parallel
    links; a spine's ports all face leaves, so leaves x p <= spine ports.  The planner
    takes the fewest spines that carry every leaf uplink: spines = the smallest divisor
    of the leaf's uplink count that is >= leaves x uplinks / spine ports, and
    p = uplinks / spines.  When the design is full (leaves x uplinks = a multiple of
    spine ports) every spine port is used, as in the white paper.
  - A plane that needs more leaves than a spine has ports does not fit in two tiers.

  Worked BRIEF rows (51.2T switch, 400G NIC split 2 x 200G, leaf = 128 x 200G down +
  64 x 400G up, spine = 128 x 400G): 64 servers -> 64 ports per rail per plane, so one
  leaf takes 2 rails: 4 leaves per plane; 4 x 64 uplinks / 128 = 2 spines per plane,
  p = 64 / 2 = 32 links of 400G; in total 8 leaves and 4 spines.  2048 servers -> 16
  leaves per rail, 128 leaves per plane; 128 x 64 / 128 = 64 spines per plane, p = 1;
  in total 256 leaves and 128 spines (and this is the largest two-tier dual plane).
  The white paper's leaf and spine counts are therefore totals over both planes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dataplane import units
from dataplane.errors import PlanError

# Ways one switch port may be broken out: 1 x native, 2 x half, 4 x quarter speed.
BREAKOUTS = (1, 2, 4)


# --------------------------------------------------------------------------- units


def parse_speed(text: str | int, what: str = "speed") -> int:
    """'400G', '400', '1.6T', '51.2T', '200Gb/s' -> Gb/s as an int (a bare number is Gb/s)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = float(text)
    else:
        try:
            number, unit = units.speed_parts(text)
        except ValueError:
            unit = "?"
        if unit not in ("", "G", "T"):
            raise PlanError(f"{what} {text!r} is not a speed like 400G or 51.2T")
        value = float(number * (1000 if unit == "T" else 1))
    if value <= 0 or value != int(value):
        raise PlanError(f"{what} {text!r} must be a whole, positive number of Gb/s")
    return int(value)


def format_speed(gbps: int) -> str:
    """400 -> '400G', 51200 -> '51.2T'."""
    if gbps >= 1000 and gbps % 100 == 0:
        return f"{gbps / 1000:g}T"
    return f"{gbps}G"


def parse_ratio(text: str | tuple[int, int]) -> tuple[int, int]:
    """'1:1' or '3:1' (downlink : uplink bandwidth on a leaf) -> (3, 1)."""
    if isinstance(text, tuple):
        down, up = text
    else:
        try:
            down, up = units.parse_ratio(text)
        except ValueError:
            raise PlanError(f"oversubscription {text!r} is not a ratio like 1:1 or 3:1") from None
    if down < 1 or up < 1:
        raise PlanError(f"oversubscription {down}:{up} needs both sides >= 1")
    if down < up:
        raise PlanError(
            f"oversubscription {down}:{up} gives leaves more uplink than downlink bandwidth; "
            "use 1:1 or more downlink (e.g. 3:1)"
        )
    return units.reduce_ratio(down, up)


# --------------------------------------------------------------------------- switches


@dataclass(frozen=True)
class Switch:
    """A switch as `ports` native ports of `port_speed` Gb/s, each breakable 1/2/4 ways."""

    name: str
    ports: int
    port_speed: int

    def __post_init__(self) -> None:
        if self.ports < 1:
            raise PlanError(f"switch {self.name}: needs at least one port, got {self.ports}")
        if self.port_speed < 1:
            raise PlanError(f"switch {self.name}: port speed must be positive")

    @property
    def capacity(self) -> int:
        return self.ports * self.port_speed

    @property
    def speeds(self) -> tuple[int, ...]:
        """Port speeds the switch can run, fastest first."""
        return tuple(self.port_speed // n for n in BREAKOUTS if self.port_speed % n == 0)

    def ports_at(self, speed: int) -> int:
        """How many ports of `speed` the whole switch has (native ports x breakout)."""
        if speed not in self.speeds:
            raise PlanError(
                f"a {self.describe()} switch cannot run {format_speed(speed)} ports "
                f"(it breaks out to {', '.join(format_speed(s) for s in self.speeds)})"
            )
        return self.ports * (self.port_speed // speed)

    def describe(self) -> str:
        return f"{format_speed(self.capacity)} ({self.ports} x {format_speed(self.port_speed)})"


SWITCHES: dict[str, Switch] = {
    "51.2T": Switch("51.2T", 64, 800),
    "25.6T": Switch("25.6T", 64, 400),
    "12.8T": Switch("12.8T", 32, 400),
}


def get_switch(name: str | None = None, ports: int | None = None,
               port_speed: str | int | None = None) -> Switch:
    """A preset by name, or a custom switch from ports and port speed."""
    custom = ports is not None or port_speed is not None
    if name is None:
        name = "custom" if custom else "51.2T"
    if name.lower() == "custom":
        if ports is None or port_speed is None:
            raise PlanError("a custom switch needs both --ports and --port-speed")
        if ports < 1:
            raise PlanError(f"--ports must be >= 1, got {ports}")
        speed = parse_speed(port_speed, "--port-speed")
        return Switch(f"{ports}x{format_speed(speed)}", ports, speed)
    if custom:
        raise PlanError(f"--ports/--port-speed describe a custom switch; drop --switch {name} "
                        "or use --switch custom")
    key = name.upper() if name.upper() in SWITCHES else name
    if key not in SWITCHES:
        raise PlanError(f"unknown switch {name!r}: choose {', '.join(SWITCHES)} or custom "
                        "(with --ports and --port-speed)")
    return SWITCHES[key]


# --------------------------------------------------------------------------- fat-tree


@dataclass(frozen=True)
class FatTreePlan:
    radix: int
    tiers: int
    max_end_ports: int
    leaves: int
    spines: int
    cores: int
    pods: int
    leaf_downlinks: int          # per leaf
    leaf_uplinks: int            # per leaf
    links_per_leaf_spine: int    # parallel links between a leaf and each spine it reaches
    host_links: int
    leaf_spine_links: int
    spine_core_links: int

    @property
    def switches(self) -> int:
        return self.leaves + self.spines + self.cores

    @property
    def fabric_links(self) -> int:
        return self.leaf_spine_links + self.spine_core_links

    def node_counts(self) -> dict[str, int]:
        return {"leaves": self.leaves, "spines": self.spines, "cores": self.cores,
                "hosts": self.max_end_ports}

    def generator_params(self, speed: str = "400G") -> tuple[str, dict[str, Any]]:
        """(kind, parameters) of the `railab topo gen` call that builds this fat-tree: one
        NIC per end port, every switch of K ports; three tiers wire each pod's spine s to
        core group s, as the k-ary fat-tree does."""
        params: dict[str, Any] = {"servers": self.max_end_ports, "rails": 1,
                                  "spines": self.spines // (self.pods or 1),
                                  "links_per_spine": self.links_per_leaf_spine,
                                  "leaf_ports": self.radix, "speed": speed}
        if self.tiers == 2:
            return "clos2", params
        params.update(pods=self.pods, cores=self.cores, core_wiring="groups")
        return "clos3", params

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "design": "fat-tree",
            "radix": self.radix,
            "tiers": self.tiers,
            "max_end_ports": self.max_end_ports,
            "leaves": self.leaves,
            "spines": self.spines,
        }
        if self.tiers == 3:
            d["cores"] = self.cores
            d["pods"] = self.pods
        d.update(
            switches=self.switches,
            leaf_downlinks=self.leaf_downlinks,
            leaf_uplinks=self.leaf_uplinks,
            links_per_leaf_spine=self.links_per_leaf_spine,
            host_links=self.host_links,
            leaf_spine_links=self.leaf_spine_links,
            spine_core_links=self.spine_core_links,
            cables=self.host_links + self.fabric_links,
        )
        return d


MAX_RADIX = 4096


def plan_fat_tree(radix: int, tiers: int) -> FatTreePlan:
    """Full non-blocking fat-tree of `radix`-port switches in 2 or 3 tiers."""
    if isinstance(radix, bool) or not isinstance(radix, int):
        raise PlanError(f"radix must be a whole number of ports, got {radix!r}")
    if tiers not in (2, 3):
        raise PlanError(f"tiers must be 2 or 3, got {tiers}")
    if radix < 2:
        raise PlanError(f"radix {radix} is too small: a fat-tree switch needs at least 2 ports")
    if radix % 2:
        raise PlanError(f"radix {radix} is odd: a non-blocking fat-tree switch gives half its "
                        "ports to each side, so K must be even")
    if radix > MAX_RADIX:
        raise PlanError(f"radix {radix} is more ports than any switch has (at most {MAX_RADIX})")
    k, half = radix, radix // 2
    if tiers == 2:
        # K leaves x K/2 hosts; every leaf's K/2 uplinks go one to each of K/2 spines,
        # and each spine's K ports take one link from each of the K leaves.
        return FatTreePlan(
            radix=k, tiers=2, max_end_ports=k * k // 2, leaves=k, spines=half, cores=0,
            pods=1, leaf_downlinks=half, leaf_uplinks=half, links_per_leaf_spine=1,
            host_links=k * half, leaf_spine_links=k * half, spine_core_links=0,
        )
    # K pods of K/2 leaves and K/2 spines (a K/2 x K/2 full bipartite graph); each spine
    # sends K/2 uplinks to its own group of K/2 cores, so (K/2)^2 cores each reach every pod once.
    return FatTreePlan(
        radix=k, tiers=3, max_end_ports=k ** 3 // 4, leaves=k * half, spines=k * half,
        cores=half * half, pods=k, leaf_downlinks=half, leaf_uplinks=half,
        links_per_leaf_spine=1, host_links=k * half * half,
        leaf_spine_links=k * half * half, spine_core_links=k * half * half,
    )


# --------------------------------------------------------------------------- rail fabrics


@dataclass(frozen=True)
class RailPlan:
    """A rail-aligned fabric; per-plane numbers, totals as properties."""

    design: str                    # "dual-plane", "rail-optimized", "rail-only"
    switch: Switch
    servers: int
    gpus_per_server: int           # = rails
    planes: int
    nic_speed: int                 # Gb/s per NIC
    host_port_speed: int           # Gb/s per NIC port = per leaf downlink
    link_speed: int | None         # Gb/s per leaf-spine link; None without spines
    ratio: tuple[int, int]         # leaf downlink : uplink bandwidth
    leaf_downlinks: int            # downlink ports per leaf (available)
    leaf_uplinks: int              # uplink ports per leaf (0 without spines)
    spine_ports: int               # spine ports at link speed (0 without spines)
    rails_per_leaf: int
    leaves_per_rail: int
    leaves_per_plane: int
    spines_per_plane: int
    links_per_leaf_spine: int
    max_servers: int               # largest server count this design fits in two tiers
    notes: tuple[str, ...] = field(default=())

    # -- sizes
    @property
    def rails(self) -> int:
        return self.gpus_per_server

    @property
    def gpus(self) -> int:
        return self.servers * self.gpus_per_server

    @property
    def max_gpus(self) -> int:
        return self.max_servers * self.gpus_per_server

    @property
    def leaves(self) -> int:
        return self.leaves_per_plane * self.planes

    @property
    def spines(self) -> int:
        return self.spines_per_plane * self.planes

    @property
    def switches_per_plane(self) -> int:
        return self.leaves_per_plane + self.spines_per_plane

    @property
    def switches(self) -> int:
        return self.switches_per_plane * self.planes

    # -- ports and cables, per plane
    @property
    def host_ports_per_plane(self) -> int:
        """NIC ports in one plane = GPUs (one port of each NIC per plane)."""
        return self.gpus

    @property
    def leaf_downlinks_used_max(self) -> int:
        """Downlinks in use on the fullest leaf."""
        if self.leaves_per_rail > 1:
            return self.leaf_downlinks
        return min(self.leaf_downlinks, self.rails_per_leaf * self.servers)

    @property
    def fabric_cables_per_plane(self) -> int:
        return self.leaves_per_plane * self.spines_per_plane * self.links_per_leaf_spine

    @property
    def spine_ports_used(self) -> int:
        """Ports in use on each spine."""
        return self.leaves_per_plane * self.links_per_leaf_spine if self.spines_per_plane else 0

    @property
    def switch_ports_used_per_plane(self) -> int:
        return self.host_ports_per_plane + 2 * self.fabric_cables_per_plane

    @property
    def host_cables(self) -> int:
        return self.host_ports_per_plane * self.planes

    @property
    def fabric_cables(self) -> int:
        return self.fabric_cables_per_plane * self.planes

    @property
    def cables(self) -> int:
        return self.host_cables + self.fabric_cables

    @property
    def optics(self) -> int:
        """One transceiver at each end of every cable (no DACs, no breakout cables)."""
        return 2 * self.cables

    @property
    def leaf_downlink_capacity(self) -> int:
        return self.leaf_downlinks * self.host_port_speed

    @property
    def leaf_uplink_capacity(self) -> int:
        return self.leaf_uplinks * (self.link_speed or 0)

    def per_plane(self) -> dict[str, int]:
        return {
            "gpus": self.gpus,
            "host_ports": self.host_ports_per_plane,
            "leaves": self.leaves_per_plane,
            "spines": self.spines_per_plane,
            "switches": self.switches_per_plane,
            "host_cables": self.host_ports_per_plane,
            "fabric_cables": self.fabric_cables_per_plane,
            "switch_ports_used": self.switch_ports_used_per_plane,
        }

    def node_counts(self) -> dict[str, int]:
        return {"leaves": self.leaves, "spines": self.spines, "cores": 0, "hosts": self.servers}

    def generator_params(self) -> tuple[str, dict[str, Any]]:
        """(kind, parameters) of the `railab topo gen` call that builds this plan, or a
        PlanError saying what the generator cannot express."""
        kind = {1: "rail-only" if not self.spines_per_plane else "rail-optimized",
                2: "dual-plane"}.get(self.planes)
        if kind is None or (kind == "dual-plane" and not self.spines_per_plane):
            raise PlanError(f"{self.design}: {self.planes} plane(s)"
                            f"{'' if self.spines_per_plane else ' without spines'}; the generator "
                            "builds one plane, or two with spines (dual-plane)")
        if self.rails_per_leaf > 1:
            raise PlanError(f"{self.rails_per_leaf} rails share a leaf in this plan; the generator "
                            "gives every rail its own leaves")
        params: dict[str, Any] = {"servers": self.servers, "rails": self.gpus_per_server,
                                  "leaf_ports": self.leaf_downlinks + self.leaf_uplinks,
                                  "speed": f"{self.host_port_speed}G"}
        if self.link_speed and self.link_speed != self.host_port_speed:
            params["fabric_speed"] = f"{self.link_speed}G"
        if self.spines_per_plane:
            params.update(spines=self.spines_per_plane, links_per_spine=self.links_per_leaf_spine)
        if kind == "dual-plane":
            params["planes"] = 2
        return kind, params

    def to_dict(self) -> dict[str, Any]:
        return {
            "design": self.design,
            "switch": {"name": self.switch.name, "ports": self.switch.ports,
                       "port_speed_gbps": self.switch.port_speed,
                       "capacity_gbps": self.switch.capacity},
            "gpus": self.gpus,
            "servers": self.servers,
            "gpus_per_server": self.gpus_per_server,
            "rails": self.rails,
            "planes": self.planes,
            "nic_speed_gbps": self.nic_speed,
            "host_port_speed_gbps": self.host_port_speed,
            "link_speed_gbps": self.link_speed,
            "oversubscription": f"{self.ratio[0]}:{self.ratio[1]}",
            "leaves": self.leaves,
            "spines": self.spines,
            "switches": self.switches,
            "links_per_leaf_spine": self.links_per_leaf_spine,
            "leaf_downlinks": self.leaf_downlinks,
            "leaf_downlinks_used_max": self.leaf_downlinks_used_max,
            "leaf_uplinks": self.leaf_uplinks,
            "spine_ports": self.spine_ports,
            "spine_ports_used": self.spine_ports_used,
            "rails_per_leaf": self.rails_per_leaf,
            "leaves_per_rail": self.leaves_per_rail,
            "host_cables": self.host_cables,
            "fabric_cables": self.fabric_cables,
            "cables": self.cables,
            "optics": self.optics,
            "switch_ports_used": self.switch_ports_used_per_plane * self.planes,
            "max_gpus": self.max_gpus,
            "max_servers": self.max_servers,
            "per_plane": self.per_plane(),
            "notes": list(self.notes),
        }


def leaf_layout(servers: int, rails: int, downlinks: int) -> tuple[int, int, int]:
    """Rail-aligned leaves for one plane: (leaves, rails_per_leaf, leaves_per_rail).

    A rail holds one port of every server. A rail too big for one leaf is spread over
    ceil(servers / downlinks) leaves of its own; small rails share a leaf, whole rails only.
    """
    if servers >= downlinks:
        per_rail = -(-servers // downlinks)
        return rails * per_rail, 1, per_rail
    rails_per_leaf = min(rails, downlinks // servers)
    return -(-rails // rails_per_leaf), rails_per_leaf, 1


def _spine_count(leaves: int, uplinks: int, spine_ports: int) -> int:
    """Fewest spines that take every leaf's uplinks in equal bundles (a divisor of uplinks)."""
    need = -(-leaves * uplinks // spine_ports)
    for spines in range(max(need, 1), uplinks + 1):
        if uplinks % spines == 0:
            return spines
    raise AssertionError("unreachable when leaves <= spine ports")  # pragma: no cover


def _max_servers(rails: int, downlinks: int, max_leaves: int) -> int:
    """Largest server count whose rail-aligned leaves fit `max_leaves` (0 if none)."""
    lo, hi = 0, downlinks * max_leaves
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if leaf_layout(mid, rails, downlinks)[0] <= max_leaves:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _int_arg(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{name} must be a whole number, got {value!r}")
    return value


def plan_rail_fabric(
    *,
    gpus: int | None = None,
    servers: int | None = None,
    gpus_per_server: int = 8,
    switch: Switch | str = "51.2T",
    nic_speed: int | str = 400,
    planes: int = 2,
    spines: bool = True,
    link_speed: int | str | None = None,
    ratio: tuple[int, int] | str = (1, 1),
    spines_per_plane: int | None = None,
    design: str | None = None,
) -> RailPlan:
    """Size a rail-aligned fabric; see the module docstring for the rule.

    `spines=False` is rail-only (one leaf per rail, all leaf ports face hosts).
    `spines_per_plane` overrides the derived spine count (then checked, not chosen).
    """
    gps = _int_arg(gpus_per_server, "gpus per server")
    if gps < 1:
        raise PlanError(f"gpus per server must be >= 1, got {gps}")
    planes = _int_arg(planes, "planes")
    if planes < 1:
        raise PlanError(f"planes must be >= 1, got {planes}: every NIC needs a plane to attach to")
    if gpus is None and servers is None:
        raise PlanError("say how big: --gpus N or --servers N")
    if gpus is not None:
        gpus = _int_arg(gpus, "gpus")
        if gpus < 1:
            raise PlanError(f"gpus must be >= 1, got {gpus}")
        if gpus % gps:
            options = sorted({gpus // gps * gps or gps, (gpus // gps + 1) * gps})
            raise PlanError(f"{gpus} GPUs is not a multiple of {gps} GPUs per server "
                            f"(nearest: {' or '.join(map(str, options))})")
        if servers is not None and servers * gps != gpus:
            raise PlanError(f"{gpus} GPUs != {servers} servers x {gps} GPUs per server")
        servers = gpus // gps
    servers = _int_arg(servers, "servers")
    if servers < 1:
        raise PlanError(f"servers must be >= 1, got {servers}")
    sw = switch if isinstance(switch, Switch) else get_switch(switch)
    nic = parse_speed(nic_speed, "NIC speed")
    if nic % planes:
        raise PlanError(f"a {format_speed(nic)} NIC does not split evenly into {planes} plane ports")
    host_speed = nic // planes
    if host_speed not in sw.speeds:
        raise PlanError(
            f"{format_speed(nic)} NIC over {planes} plane(s) needs {format_speed(host_speed)} leaf "
            f"ports, which a {sw.describe()} switch cannot break out to "
            f"(it runs {', '.join(format_speed(s) for s in sw.speeds)})"
        )
    down, up = parse_ratio(ratio)
    if design is None:
        design = "rail-only" if not spines else ("dual-plane" if planes == 2 else
                                                 "rail-optimized" if planes == 1 else
                                                 f"{planes}-plane rail-optimized")
    notes: list[str] = []

    if not spines:
        if link_speed is not None or spines_per_plane is not None:
            raise PlanError("rail-only fabrics have no spines: drop --link-speed/--spines")
        if (down, up) != (1, 1):
            raise PlanError("rail-only leaves have no uplinks, so there is no oversubscription")
        ports = sw.ports_at(host_speed)
        if servers > ports:
            raise PlanError(
                f"rail-only tops out at {ports} servers ({ports * gps} GPUs): each rail is one "
                f"leaf with {ports} x {format_speed(host_speed)} ports and there are no spines; "
                f"{servers} servers need rail-optimized (add spines)"
            )
        notes.append("one leaf per rail and plane; cross-rail traffic relays over NVLink (PXN)")
        return RailPlan(
            design=design, switch=sw, servers=servers, gpus_per_server=gps, planes=planes,
            nic_speed=nic, host_port_speed=host_speed, link_speed=None, ratio=(1, 1),
            leaf_downlinks=ports, leaf_uplinks=0, spine_ports=0, rails_per_leaf=1,
            leaves_per_rail=1, leaves_per_plane=gps, spines_per_plane=0,
            links_per_leaf_spine=0, max_servers=ports, notes=tuple(notes),
        )

    # Link speed of the leaf-spine links: the NIC speed unless the switch's ports are slower.
    lspeed = (parse_speed(link_speed, "--link-speed") if link_speed is not None
              else min(nic, sw.port_speed))
    spine_ports = sw.ports_at(lspeed)
    down_cap, up_cap = sw.capacity * down, sw.capacity * up
    if down_cap % ((down + up) * host_speed) or up_cap % ((down + up) * lspeed):
        raise PlanError(
            f"a {down}:{up} split of {format_speed(sw.capacity)} does not give whole "
            f"{format_speed(host_speed)} downlinks and {format_speed(lspeed)} uplinks"
        )
    downlinks = down_cap // ((down + up) * host_speed)
    uplinks = up_cap // ((down + up) * lspeed)
    if downlinks < 1 or uplinks < 1:
        raise PlanError(f"a {down}:{up} leaf split leaves no room for "
                        f"{'downlinks' if downlinks < 1 else 'uplinks'}")

    leaves, rails_per_leaf, leaves_per_rail = leaf_layout(servers, gps, downlinks)
    max_servers = _max_servers(gps, downlinks, spine_ports)
    if leaves > spine_ports:
        reach = (f"reach at most {max_servers} servers ({max_servers * gps} GPUs)" if max_servers
                 else "cannot hold even one server")
        raise PlanError(
            f"{leaves} leaves per plane exceed the {spine_ports} x {format_speed(lspeed)} ports "
            f"of a spine: two tiers of {sw.describe()} switches {reach} at "
            f"{gps} GPUs per server; use three tiers (core-spine-leaf, see "
            f"`railab plan fat-tree --tiers 3`) or more planes"
        )

    if spines_per_plane is not None:
        n = _int_arg(spines_per_plane, "--spines")
        if n < 1:
            raise PlanError(f"--spines must be >= 1, got {n}")
        if uplinks % n:
            raise PlanError(
                f"each leaf's {uplinks} x {format_speed(lspeed)} uplinks do not divide evenly "
                f"over {n} spines (links per leaf-spine pair must be a whole number >= 1; "
                f"try a divisor of {uplinks})"
            )
        per_pair = uplinks // n
        if leaves * per_pair > spine_ports:
            raise PlanError(
                f"{n} spines are too few: {leaves} leaves x {per_pair} links need "
                f"{leaves * per_pair} ports per spine, a spine has {spine_ports}"
            )
        spine_count = n
    elif leaves == 1:
        spine_count, per_pair = 0, 0
        notes.append("one leaf per plane reaches every GPU itself: no spines needed")
    else:
        spine_count = _spine_count(leaves, uplinks, spine_ports)
        per_pair = uplinks // spine_count
    if planes > 1:
        notes.append(f"the {planes} planes are identical and not linked; totals = per plane x {planes}")

    return RailPlan(
        design=design, switch=sw, servers=servers, gpus_per_server=gps, planes=planes,
        nic_speed=nic, host_port_speed=host_speed, link_speed=lspeed, ratio=(down, up),
        leaf_downlinks=downlinks, leaf_uplinks=uplinks if spine_count else 0,
        spine_ports=spine_ports, rails_per_leaf=rails_per_leaf,
        leaves_per_rail=leaves_per_rail, leaves_per_plane=leaves,
        spines_per_plane=spine_count, links_per_leaf_spine=per_pair,
        max_servers=max_servers, notes=tuple(notes),
    )


def plan_dual_plane(**kwargs: Any) -> RailPlan:
    kwargs.setdefault("planes", 2)
    return plan_rail_fabric(**kwargs)


def plan_rail_optimized(**kwargs: Any) -> RailPlan:
    kwargs.setdefault("planes", 1)
    return plan_rail_fabric(**kwargs)


def plan_rail_only(**kwargs: Any) -> RailPlan:
    kwargs.setdefault("planes", 1)
    return plan_rail_fabric(spines=False, **kwargs)
