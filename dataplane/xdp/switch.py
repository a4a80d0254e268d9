"""The railab XDP switch data plane: one BPF object for every switch of a lab.

SwitchDataplane compiles bpf/switch.c once with bcc (sizes as -D cflags), loads
the XDP entry function `xdp_switch`, pins it, and programs its tables. The tables are
dataplane.xdp.tables, one module per family (ports, groups, routes, port model and PFC,
traffic matrix, flows, counters, notices); this class is their union over one loaded object and
keeps what every family shares: the maps, the port and switch entries' writers, the
range checks and a switch reset (which touches every family). The plumbing under it
(map I/O, pinning, XDP attach/detach in any namespace) is dataplane.xdp.bpfio.

Identifiers the agent chooses (all lab-wide):
- port ifindex: every switch-port veth is created with an explicit ifindex that
  is unique in the lab; it keys the port map.
- port slot: a lab-unique index < max_ports for each port; counters live in
  arrays indexed by it (not a per-switch port number).
- switch_id < max_switches, group_id < max_groups.
"""

from __future__ import annotations

import ctypes as ct
import ipaddress
import os
from pathlib import Path

from dataplane.closing import Closing
from dataplane.xdp import abi, bpfcache
from dataplane.xdp.bpfio import BpfMaps, DataplaneError
from dataplane.xdp.tables.counters import CounterTables
from dataplane.xdp.tables.flows import FlowTables
from dataplane.xdp.tables.groups import GroupState, GroupTables, MemberRanges, hash_field_names, wcmp_slots
from dataplane.xdp.tables.notices import NoticeTables
from dataplane.xdp.tables.portmodel import PortModelTables
from dataplane.xdp.tables.ports import PortTables
from dataplane.xdp.tables.routes import RouteTables
from dataplane.xdp.tables.trafficmatrix import TrafficMatrixTables

# the names other modules import from here, wherever they are defined now
__all__ = ["BPF_DIR", "SWITCH_C", "DataplaneError", "GroupState", "SwitchDataplane",
           "hash_field_names", "wcmp_slots"]

BPF_DIR = Path(__file__).resolve().parents[2] / "bpf"
SWITCH_C = BPF_DIR / "switch.c"
PROG_NAME = "xdp_switch"
HANDOFF_PROG_NAME = "tc_handoff"
# arn_progs: the programs xdp_switch tail-calls (the notices, the link watch's rescan) and
# xdp_switch itself, which the rescan runs again
NOTICE_PROGS = {abi.ARN_PROG_TX: "xdp_notice_tx", abi.ARN_PROG_RX: "xdp_notice_rx",
                abi.ARN_PROG_LINK_SCAN: "xdp_link_scan", abi.ARN_PROG_SWITCH: PROG_NAME}
PINNED_PROGS = (PROG_NAME, "xdp_pass", HANDOFF_PROG_NAME)   # pin()/unpin() order


class SwitchDataplane(PortTables, GroupTables, RouteTables, PortModelTables,
                      TrafficMatrixTables, FlowTables, CounterTables, NoticeTables, Closing):
    """One loaded XDP program and its maps, shared by all switches of one lab."""

    def __init__(self, *, max_ports: int = abi.MAX_PORTS, max_switches: int = abi.MAX_SWITCHES,
                 max_groups: int = abi.MAX_GROUPS, max_members: int = abi.MAX_MEMBERS,
                 max_member_entries: int = abi.MAX_MEMBER_ENTRIES,
                 max_routes: int = abi.MAX_ROUTES, max_addrs: int = abi.MAX_ADDRS,
                 max_flowlets: int = abi.MAX_FLOWLETS, max_tm: int = abi.MAX_TM,
                 max_learned: int = abi.MAX_LEARNED, max_flows_seen: int = abi.MAX_FLOWS_SEEN,
                 port_index_slots: int | None = None,
                 route_cache_slots: int = abi.ROUTE_CACHE_SLOTS, debug: bool = False,
                 extra_cflags: list[str] | tuple[str, ...] = ()):
        if not 1 <= max_ports <= 2**24:
            raise ValueError("max_ports must be 1..2**24")
        if not 1 <= max_members <= 65535:
            raise ValueError("max_members must be 1..65535")
        if not max_members <= max_member_entries <= 2**26:
            raise ValueError("max_member_entries must be max_members..2**26")
        if port_index_slots is None:   # lab ifindexes are consecutive from 100, both link ends
            port_index_slots = 2 * max_ports + 1024
        if not 1 <= port_index_slots <= 2**20:
            raise ValueError("port_index_slots must be 1..2**20")
        if route_cache_slots < 1 or route_cache_slots & (route_cache_slots - 1):
            raise ValueError("route_cache_slots must be a power of two")
        self.port_index_slots = port_index_slots
        self.route_cache_slots = route_cache_slots
        self.max_ports = max_ports
        self.max_switches = max_switches
        self.max_groups = max_groups
        self.max_members = max_members
        self.max_member_entries = max_member_entries
        self.max_routes = max_routes
        self.max_addrs = max_addrs
        self.cflags = [
            f"-I{BPF_DIR}",
            f"-DMAX_PORTS={max_ports}",
            f"-DMAX_SWITCHES={max_switches}",
            f"-DMAX_GROUPS={max_groups}",
            f"-DMAX_MEMBERS={max_members}",
            f"-DMAX_MEMBER_ENTRIES={max_member_entries}",
            f"-DMAX_ROUTES={max_routes}",
            f"-DMAX_ADDRS={max_addrs}",
            f"-DMAX_FLOWLETS={max_flowlets}",
            f"-DMAX_TM={max_tm}",
            f"-DMAX_LEARNED={max_learned}",
            f"-DMAX_FLOWS_SEEN={max_flows_seen}",
            f"-DPORT_INDEX_SLOTS={port_index_slots}",
            f"-DROUTE_CACHE_SLOTS={route_cache_slots}",
            *extra_cflags,
        ]
        if debug:
            self.cflags.append("-DRAILAB_DEBUG=1")   # bpf_trace_printk on every drop
        self._object = bpfcache.load(SWITCH_C, self.cflags, {
            PROG_NAME: bpfcache.PROG_XDP,
            "xdp_pass": bpfcache.PROG_XDP,     # XDP_PASS only, for the host end of switch links
            # tc ingress of real-queue ports (dataplane.kernel.realqueue)
            HANDOFF_PROG_NAME: bpfcache.PROG_SCHED_CLS,
            # notices (tail calls of xdp_switch through arn_progs)
            **{name: bpfcache.PROG_XDP for name in NOTICE_PROGS.values()},
        })
        self.compile_seconds = self._object.seconds
        self.bpf_cache = self._object.cache    # warm | cold | off
        self.prog_fd: int = self._object.progs[PROG_NAME]
        self.pass_prog_fd: int = self._object.progs["xdp_pass"]
        self.handoff_prog_fd: int = self._object.progs[HANDOFF_PROG_NAME]
        self.maps = BpfMaps({name: self._object.maps[name] for name in abi.MAPS})
        for slot, name in NOTICE_PROGS.items():
            self.maps.update("arn_progs", ct.c_uint32(slot), ct.c_uint32(self._object.progs[name]))
        self.maps.update("handoff_key", ct.c_uint32(0), ct.c_uint64(int.from_bytes(os.urandom(8), "little") | 1))
        # shadow state (the maps are the truth for the data path; this is for the API),
        # by the table family that writes it (dataplane.xdp.tables)
        self._ports: dict[int, abi.PortInfo] = {}          # ports
        self._slot_owner: dict[int, int] = {}              # ports
        self._switches: dict[int, abi.SwitchCfg] = {}      # ports
        self._groups: dict[int, GroupState] = {}           # groups
        self._member_ranges = MemberRanges(max_member_entries)   # groups: where each group's members are
        self._routes: dict[tuple[int, ipaddress.IPv4Network], int] = {}        # routes
        # routes: per switch, its routes wider than a host's (a few, where the learned /32s
        # are thousands): what a route's notice may name, found without scanning them all
        self._wide_routes: dict[int, dict[ipaddress.IPv4Network, int]] = {}
        # routes: the same by prefix length and network address as an int (covering_group)
        self._wide_index: dict[int, dict[int, dict[int, int]]] = {}
        self.wide_routes_version = 0    # routes: bumped when a route wider than /32 changes
        self._route_avoid: dict[tuple[int, ipaddress.IPv4Network], int] = {}   # routes
        self._local_refs: dict[tuple[int, int], set[int]] = {}                 # routes
        self._port_model: dict[int, dict] = {}     # portmodel: ifindex -> model config
        self._pfc_prio = 3                         # portmodel: the lossless priority (set_pfc)
        self._tm: dict[tuple, dict] = {}           # trafficmatrix: (switch_id, 5-tuple) -> entry info
        self._tm_dsts: dict[tuple[int, int], set] = {}   # trafficmatrix: (switch_id, daddr_be) -> idents
        self._closed = False

    def _write_port(self, ifindex: int, info: abi.PortInfo) -> None:
        """`ports` entry, and its copy in `port_index` (what the data path reads) if the
        ifindex is in its range."""
        self.maps.update("ports", ct.c_uint32(ifindex), info)
        if ifindex < self.port_index_slots:
            fast = abi.PortInfo.from_buffer_copy(info)
            fast.flags |= abi.PORT_F_VALID
            self.maps.update("port_index", ct.c_uint32(ifindex), fast)

    def _write_switch(self, switch_id: int, cfg: abi.SwitchCfg) -> None:
        """switch_cfg, with a new route_gen: every write invalidates the switch's
        route_cache entries (callers write AFTER changing routes / local addresses)."""
        cfg.route_gen = (cfg.route_gen + 1) & 0xFFFFFFFF
        cfg.arn_gen = 0    # the data path's count of notice changes starts again under it
        self.maps.update("switches", ct.c_uint32(switch_id), cfg)
        self._switches[switch_id] = cfg

    def _routes_changed(self, switch_id: int) -> None:
        """Routes, avoid masks or local addresses of switch_id changed: no cached result
        from before may be used (the data path checks route_gen on every cache hit)."""
        if 0 <= switch_id < self.max_switches:
            self._write_switch(switch_id, self._switches.get(switch_id) or abi.SwitchCfg())

    def pin(self, directory: str) -> None:
        """Pin the programs (PINNED_PROGS) and every map (by its name) under directory
        (see bpfio.BpfMaps.pin)."""
        self.maps.pin(directory, dict(zip(PINNED_PROGS, (self.prog_fd, self.pass_prog_fd,
                                                         self.handoff_prog_fd))))

    @staticmethod
    def unpin(directory: str) -> None:
        """Remove what pin() created in directory, then the directory if it is empty."""
        BpfMaps.unpin(directory, (*PINNED_PROGS, *abi.MAPS))

    def close(self) -> None:
        """Release the bcc object and our fds. Attached XDP programs stay attached."""
        if not self._closed:
            self._closed = True
            self._object.close()

    def reset_switch_state(self, switch_id: int) -> dict:
        """Forget a switch's run-time state, as a reboot would: flowlets of its groups,
        round-robin counters, emulated queues (re-applied port model), route avoid masks,
        learned hosts and every counter of its ports, members and traffic-matrix entries.
        Configuration (ports, routes, groups, static traffic-matrix entries) stays."""
        ports = [ifx for ifx, p in self._ports.items() if p.switch_id == switch_id]
        pset = set(ports)
        gids = [gid for gid, g in self._groups.items() if any(ifx in pset for ifx, _ in g.members)]
        gset = set(gids)
        flows = self.forget_flowlets(gset)
        for gid in gids:
            g = self._groups[gid]
            self._write_header(gid, g)          # rr = 0, down_mask from the ports
            base = self._member_ranges.base(gid)
            for i in range(len(g.members)):
                self.maps.zero_percpu("member_stats", base + i, abi.PktCount)
        for ifx in ports:
            self.maps.zero_percpu("port_stats", self._ports[ifx].slot, abi.PortStats)
            model = self._port_model.get(ifx)
            if model:
                self.set_port_model(ifx, **model)
        avoided = 0
        for (sw, net), mask in list(self._route_avoid.items()):
            if sw == switch_id:
                self.set_route_avoid(sw, str(net), 0)
                avoided += 1
        for ident, info in self._tm.items():
            if ident[0] == switch_id:
                key = self._tm_key(*ident)
                e = abi.TmEntry()
                if self.maps.lookup("tm", key, e):
                    e.packets = e.bytes = 0
                    self.maps.update("tm", key, e)
        learned = self.forget_learned(switch_id)
        excl = self.clear_exclusions(switch_id)
        return {"flowlets": flows, "groups": len(gids), "ports": len(ports),
                "avoid_cleared": avoided, "learned_forgotten": learned, "exclusions_cleared": excl}

    def _set_switch_flag(self, switch_id: int, flag: int, on: bool) -> None:
        cfg = self._switches.get(switch_id) or abi.SwitchCfg()
        cfg.flags = (cfg.flags | flag) if on else (cfg.flags & ~flag)
        self._write_switch(switch_id, cfg)

    def port_info(self, ifindex: int) -> abi.PortInfo:
        try:
            return self._ports[ifindex]
        except KeyError:
            raise DataplaneError(f"ifindex {ifindex} is not a switch port") from None

    def _check_switch(self, switch_id: int) -> None:
        if not 0 <= switch_id < self.max_switches:
            raise DataplaneError(f"switch id {switch_id} out of range 0..{self.max_switches - 1}")

    def _check_group(self, group_id: int) -> None:
        if not 0 <= group_id < self.max_groups:
            raise DataplaneError(f"group id {group_id} out of range 0..{self.max_groups - 1}")


