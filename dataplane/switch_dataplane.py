"""The railab XDP switch data plane: one BPF object for every switch of a lab.

SwitchDataplane compiles bpf/switch.c once with bcc (sizes as -D cflags), loads
the XDP entry function `xdp_switch`, and programs its tables: ports, switches, groups,
routes, the traffic matrix, the port model, counters. The plumbing under it (map I/O,
pinning, XDP attach/detach in any namespace) is dataplane.bpfio.

Identifiers the agent chooses (all lab-wide):
- port ifindex: every switch-port veth is created with an explicit ifindex that
  is unique in the lab; it keys the port map.
- port slot: a lab-unique index < max_ports for each port; counters live in
  arrays indexed by it (not a per-switch port number).
- switch_id < max_switches, group_id < max_groups.
"""

from __future__ import annotations

import ctypes as ct
import dataclasses
import ipaddress
import math
import time
from array import array
from pathlib import Path

from dataplane import bpf_abi as abi
from dataplane import bpfcache
from dataplane.bpfio import BPF_F_LOCK, BpfMaps, DataplaneError

BPF_DIR = Path(__file__).resolve().parent.parent / "bpf"
SWITCH_C = BPF_DIR / "switch.c"
PROG_NAME = "xdp_switch"
HANDOFF_PROG_NAME = "tc_handoff"
PINNED_PROGS = (PROG_NAME, "xdp_pass", HANDOFF_PROG_NAME)   # pin()/unpin() order

IPPROTO = {"udp": 17, "tcp": 6, "icmp": 1}


def _ip4(ip: str) -> ipaddress.IPv4Address:
    try:
        return ipaddress.IPv4Address(ip)
    except ValueError as e:
        raise ValueError(f"not an IPv4 address: {ip!r}") from e


def _hash_fields(value) -> int:
    """int flags, or an iterable of names from bpf_abi.HASH_FIELDS, or None (= 0, default)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        value = [value]
    flags = 0
    for name in value:
        try:
            flags |= abi.HASH_FIELDS[name]
        except KeyError:
            raise ValueError(f"unknown hash field {name!r}; known: {sorted(abi.HASH_FIELDS)}") from None
    return flags


def wcmp_slots(weights: list[float], size: int = abi.WCMP_SLOTS) -> list[int]:
    """Expand member weights into a slot table (member index per slot) of at most `size`.

    Integer weights summing to <= size are exact (1:3 -> 16 + 48 of 64 slots); otherwise
    largest-remainder rounding onto `size` slots. Weight 0 members get no slot."""
    if not weights or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"weights must be >= 0 with a positive sum: {weights}")
    total = sum(weights)
    if all(float(w).is_integer() for w in weights) and total <= size:
        per = size // int(total)
        counts = [int(w) * per for w in weights]
    else:
        exact = [w * size / total for w in weights]
        counts = [math.floor(x) for x in exact]
        order = sorted(range(len(weights)), key=lambda i: exact[i] - counts[i], reverse=True)
        for i in order[: size - sum(counts)]:
            counts[i] += 1
    return [i for i, c in enumerate(counts) for _ in range(c)]


@dataclasses.dataclass
class GroupState:
    """What the API knows of a group (the map holds the data-path form)."""
    members: list[tuple[int, bytes]]
    mode: int = abi.LB_MODE_ECMP
    hash_fields: int = 0
    flowlet_timeout_us: float = 100.0
    busy_util: float = 0.0            # 0..1; 0 = no busy/idle adaptation
    busy_timeout_us: float = 25.0
    weights: list[float] | None = None   # WCMP; None = equal

    def header(self) -> abi.Group:
        g = abi.Group(mode=self.mode, n_members=len(self.members), hash_fields=self.hash_fields,
                      flowlet_ns=min(int(self.flowlet_timeout_us * 1000), 2**32 - 1),
                      busy_ns=min(int(self.busy_timeout_us * 1000), 2**32 - 1),
                      busy_util=min(int(round(self.busy_util * abi.UTIL_ONE)), 0xFFFF))
        if self.weights is not None and self.members:
            slots = wcmp_slots(self.weights)
            g.n_wslots = len(slots)
            g.wslots[: len(slots)] = slots
        return g


def hash_field_names(flags: int) -> list[str]:
    return [name for name, bit in abi.HASH_FIELDS.items() if flags & bit]


class SwitchDataplane:
    """One loaded XDP program and its maps, shared by all switches of one lab."""

    def __init__(self, *, max_ports: int = abi.MAX_PORTS, max_switches: int = abi.MAX_SWITCHES,
                 max_groups: int = abi.MAX_GROUPS, max_members: int = abi.MAX_MEMBERS,
                 max_routes: int = abi.MAX_ROUTES, max_addrs: int = abi.MAX_ADDRS,
                 max_flowlets: int = abi.MAX_FLOWLETS, max_tm: int = abi.MAX_TM,
                 max_learned: int = abi.MAX_LEARNED, max_flows_seen: int = abi.MAX_FLOWS_SEEN,
                 port_index_slots: int | None = None,
                 route_cache_slots: int = abi.ROUTE_CACHE_SLOTS, debug: bool = False,
                 extra_cflags: list[str] | tuple[str, ...] = ()):
        if not 1 <= max_ports <= 65536:
            raise ValueError("max_ports must be 1..65536 (slots are u16)")
        if not 1 <= max_members <= 65535:
            raise ValueError("max_members must be 1..65535")
        if max_groups * max_members >= 2**32:
            raise ValueError("max_groups * max_members must fit in u32")
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
        self.max_routes = max_routes
        self.max_addrs = max_addrs
        self.cflags = [
            f"-I{BPF_DIR}",
            f"-DMAX_PORTS={max_ports}",
            f"-DMAX_SWITCHES={max_switches}",
            f"-DMAX_GROUPS={max_groups}",
            f"-DMAX_MEMBERS={max_members}",
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
            # tc ingress of real-queue ports (dataplane.realqueue)
            HANDOFF_PROG_NAME: bpfcache.PROG_SCHED_CLS,
        })
        self.compile_seconds = self._object.seconds
        self.bpf_cache = self._object.cache    # warm | cold | off
        self.prog_fd: int = self._object.progs[PROG_NAME]
        self.pass_prog_fd: int = self._object.progs["xdp_pass"]
        self.handoff_prog_fd: int = self._object.progs[HANDOFF_PROG_NAME]
        self.maps = BpfMaps({name: self._object.maps[name] for name in abi.MAPS})
        # shadow state (the maps are the truth for the data path; this is for the API)
        self._ports: dict[int, abi.PortInfo] = {}
        self._slot_owner: dict[int, int] = {}
        self._groups: dict[int, GroupState] = {}
        self._switches: dict[int, abi.SwitchCfg] = {}
        self._tm: dict[tuple, dict] = {}           # (switch_id, 5-tuple) -> entry info
        self._tm_dsts: dict[tuple[int, int], set] = {}   # (switch_id, daddr_be) -> idents
        self._port_model: dict[int, dict] = {}     # ifindex -> model config
        self._pfc_prio = 3                         # the lossless priority (set_pfc)
        self._local_refs: dict[tuple[int, int], set[int]] = {}
        self._routes: dict[tuple[int, ipaddress.IPv4Network], int] = {}
        self._route_avoid: dict[tuple[int, ipaddress.IPv4Network], int] = {}
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
        self.maps.update("switches", ct.c_uint32(switch_id), cfg)
        self._switches[switch_id] = cfg

    def _routes_changed(self, switch_id: int) -> None:
        """Routes, avoid masks or local addresses of switch_id changed: no cached result
        from before may be used (the data path checks route_gen on every cache hit)."""
        if 0 <= switch_id < self.max_switches:
            self._write_switch(switch_id, self._switches.get(switch_id) or abi.SwitchCfg())

    # ------------------------------------------------------------------ lifecycle
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ switches / ports
    def set_switch(self, switch_id: int, *, hash_seed: int, hash_fields=None) -> None:
        """Per-switch ECMP seed and default hash fields (names or HASH_F_* flags; None = 5-tuple)."""
        self._check_switch(switch_id)
        old = self._switches.get(switch_id)
        cfg = abi.SwitchCfg(hash_seed=hash_seed & 0xFFFFFFFF, hash_fields=_hash_fields(hash_fields),
                            flags=old.flags if old else 0, route_gen=old.route_gen if old else 0)
        self._write_switch(switch_id, cfg)

    def switch_config(self, switch_id: int) -> dict:
        cfg = self._switches.get(switch_id) or abi.SwitchCfg()
        return {"hash_seed": cfg.hash_seed, "hash_fields": hash_field_names(cfg.hash_fields),
                "traffic_matrix": bool(cfg.flags & abi.SW_F_TM)}

    def set_port(self, ifindex: int, *, switch_id: int, slot: int, mac: bytes | str,
                 speed_bps: int = 0, lbn: int = 0, proxy_arp: bool = False,
                 up: bool | None = None, arp_reply: str = "redirect",
                 learn: bool | None = None) -> None:
        """Declare ifindex a port of switch_id. slot: lab-unique counter index < max_ports.

        lbn: this ingress port's LBN value. proxy_arp: answer ARP for any routed target.
        arp_reply: 'redirect' (default; back out of this port via bpf_redirect, works when
        the peer veth has GRO on) or 'tx' (XDP_TX; on veth the peer then needs an XDP
        program, e.g. attach pass_prog_fd to it). up: None keeps the port's current state
        (new ports are up). learn: record ARP senders (host-facing ports); None keeps it."""
        if arp_reply not in ("redirect", "tx"):
            raise ValueError("arp_reply must be 'redirect' or 'tx'")
        self._check_switch(switch_id)
        if not 0 <= slot < self.max_ports:
            raise DataplaneError(f"port slot {slot} out of range 0..{self.max_ports - 1}")
        if not 0 < ifindex < 2**32:
            raise ValueError(f"bad ifindex {ifindex}")
        owner = self._slot_owner.get(slot)
        if owner is not None and owner != ifindex:
            raise DataplaneError(f"port slot {slot} already used by ifindex {owner}")
        old = self._ports.get(ifindex)
        if up is None:
            up = old is None or not old.flags & abi.PORT_F_DOWN
        if learn is None:
            learn = old is not None and bool(old.flags & abi.PORT_F_LEARN)
        flags = ((0 if up else abi.PORT_F_DOWN) | (abi.PORT_F_PROXY_ARP if proxy_arp else 0)
                 | (abi.PORT_F_ARP_XDP_TX if arp_reply == "tx" else 0)
                 | (abi.PORT_F_LEARN if learn else 0))
        info = abi.PortInfo(switch_id=switch_id, slot=slot, flags=flags, lbn=lbn & 0xFFFF,
                            speed_bps=speed_bps)
        info.mac[:] = list(abi.mac_bytes(mac))
        if old is None or old.slot != slot:
            self.maps.zero_percpu("port_stats", slot, abi.PortStats)
        self._write_port(ifindex, info)
        if old is not None and old.slot != slot:
            self._slot_owner.pop(old.slot, None)
        self._slot_owner[slot] = ifindex
        self._ports[ifindex] = info
        # members egressing here carry this port's MAC and slot
        for gid, g in list(self._groups.items()):
            if any(ifx == ifindex for ifx, _ in g.members):
                self._write_group(gid, g)

    def set_port_state(self, ifindex: int, up: bool) -> list[int]:
        """Port up/down. A down port drops what it receives (reason port_down) and every
        group stops using members that egress through it (group.down_mask), at once and
        without recomputing routes: flows on live members keep their member, flows of the
        dead one are re-picked among the live ones. Returns the group ids rewritten."""
        info = self.port_info(ifindex)
        flags = (info.flags & ~abi.PORT_F_DOWN) | (0 if up else abi.PORT_F_DOWN)
        if flags == info.flags:
            return []
        info.flags = flags
        # order: when going down, first stop selecting it, then drop its ingress; going up,
        # accept ingress first. Either order is safe; this one loses nothing extra.
        if up:
            self._write_port(ifindex, info)
        changed = []
        for gid, g in self._groups.items():
            if any(ifx == ifindex for ifx, _ in g.members):
                self._write_header(gid, g)
                changed.append(gid)
        if not up:
            self._write_port(ifindex, info)
        return changed

    def port_is_up(self, ifindex: int) -> bool:
        return not self.port_info(ifindex).flags & abi.PORT_F_DOWN

    def set_port_learn(self, ifindex: int, learn: bool) -> None:
        """Record ARP senders seen on this port into arp_learned (host-facing ports)."""
        info = self.port_info(ifindex)
        info.flags = (info.flags & ~abi.PORT_F_LEARN) | (abi.PORT_F_LEARN if learn else 0)
        self._write_port(ifindex, info)

    def group_down_mask(self, group_id: int) -> int:
        g = self._group(group_id)
        mask = 0
        for i, (ifx, _) in enumerate(g.members[: abi.DOWN_MASK_BITS]):
            p = self._ports.get(ifx)
            if p is not None and p.flags & abi.PORT_F_DOWN:
                mask |= 1 << i
        return mask

    # ------------------------------------------------------------------ learned hosts
    def learn_generation(self) -> int:
        v = ct.c_uint64()
        return v.value if self.maps.lookup("learn_gen", ct.c_uint32(0), v) else 0

    def learned_hosts(self) -> list[dict]:
        """Hosts learned from ARP: switch_id, ip, ifindex, mac, last_ns (monotonic ns)."""
        out = []
        for k, v in self.maps.items("arp_learned"):
            out.append({"switch_id": k.switch_id, "ip": abi.ip_str(k.ip),
                        "ifindex": v.ifindex, "mac": abi.mac_str(v.mac), "last_ns": v.last_ns})
        return out

    def forget_learned(self, switch_id: int | None = None) -> int:
        n = 0
        for k in self.maps.keys("arp_learned"):
            if (switch_id is None or k.switch_id == switch_id) and self.maps.delete("arp_learned", k):
                n += 1
        return n

    # ------------------------------------------------------------------ switch reset
    def forget_flowlets(self, gids) -> int:
        """Drop the flowlet entries of these groups (their flows start new flowlets)."""
        gset, flows = set(gids), 0
        for k in self.maps.keys("flowlets"):
            if k.group_id in gset and self.maps.delete("flowlets", k):
                flows += 1
        return flows

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
            for i in range(len(g.members)):
                self.maps.zero_percpu("member_stats", gid * self.max_members + i, abi.PktCount)
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
        return {"flowlets": flows, "groups": len(gids), "ports": len(ports),
                "avoid_cleared": avoided, "learned_forgotten": learned}

    def del_port(self, ifindex: int) -> None:
        info = self._ports.pop(ifindex, None)
        if info is None:
            return
        if ifindex < self.port_index_slots:
            self.maps.update("port_index", ct.c_uint32(ifindex), abi.PortInfo())
        self.maps.delete("ports", ct.c_uint32(ifindex))
        self._slot_owner.pop(info.slot, None)

    def add_address(self, switch_id: int, ifindex: int, ip: str) -> None:
        """The switch owns ip on that port: answer ARP for it there, accept IPv4 to it locally."""
        self._check_switch(switch_id)
        addr = _ip4(ip)
        port = self._ports.get(ifindex)
        if port is not None and port.switch_id != switch_id:
            raise DataplaneError(f"ifindex {ifindex} is a port of switch {port.switch_id}, not {switch_id}")
        be = abi.ip_be(addr)
        self.maps.update("port_addrs", abi.PortAddrKey(ifindex=ifindex, ip=be), ct.c_uint32(0))
        refs = self._local_refs.setdefault((switch_id, be), set())
        refs.add(ifindex)
        self.maps.update("local_addrs", abi.LocalAddrKey(switch_id=switch_id, ip=be), ct.c_uint32(len(refs)))
        self._routes_changed(switch_id)

    def del_address(self, switch_id: int, ifindex: int, ip: str) -> None:
        be = abi.ip_be(_ip4(ip))
        self.maps.delete("port_addrs", abi.PortAddrKey(ifindex=ifindex, ip=be))
        refs = self._local_refs.get((switch_id, be), set())
        refs.discard(ifindex)
        key = abi.LocalAddrKey(switch_id=switch_id, ip=be)
        if refs:
            self.maps.update("local_addrs", key, ct.c_uint32(len(refs)))
        else:
            self._local_refs.pop((switch_id, be), None)
            self.maps.delete("local_addrs", key)
        self._routes_changed(switch_id)

    # ------------------------------------------------------------------ groups / routes
    def set_group(self, group_id: int, members: list[tuple[int, str]], *, mode: str | int = "ecmp",
                  hash_fields=None, flowlet_timeout_us: float | None = None,
                  busy_util: float | None = None, busy_timeout_us: float | None = None,
                  weights: list[float] | None = None) -> None:
        """Next-hop group: members are (egress ifindex, next-hop MAC); the src MAC and
        counter slot come from the egress port (set_port first). mode: a name of
        bpf_abi.LB_MODES ('ecmp' default, 'lbn', 'spray-random', 'spray-rr', 'flowlet',
        'spraylink', 'wcmp'). hash_fields: names/flags, None = the switch's default.
        Flowlet parameters and WCMP weights as in set_group_lb()."""
        self._check_group(group_id)
        if len(members) > self.max_members:
            raise DataplaneError(f"group {group_id}: {len(members)} members > max_members {self.max_members}")
        mode_v = abi.lb_mode(mode)
        norm = []
        for ifindex, mac in members:
            if ifindex not in self._ports:
                raise DataplaneError(f"group {group_id}: egress ifindex {ifindex} is not a port (set_port first)")
            norm.append((int(ifindex), abi.mac_bytes(mac)))
        g = GroupState(members=norm, mode=mode_v, hash_fields=_hash_fields(hash_fields))
        self._apply_lb(g, flowlet_timeout_us=flowlet_timeout_us, busy_util=busy_util,
                       busy_timeout_us=busy_timeout_us, weights=weights)
        self._write_group(group_id, g)

    def set_group_lb(self, group_id: int, *, mode: str | int | None = None, hash_fields=None,
                     flowlet_timeout_us: float | None = None, busy_util: float | None = None,
                     busy_timeout_us: float | None = None, weights: list[float] | None = None,
                     clear_weights: bool = False) -> None:
        """Change a group's load balancing at run time (one map write; the program is not
        reloaded). Only given arguments change. flowlet_timeout_us: idle gap that ends a
        flowlet; busy_util (0..1) / busy_timeout_us: while the flow's member is busier than
        busy_util, use the shorter busy timeout (re-decide more often under load).
        weights: per member (WCMP; also the 'bandwidth' weights), clear_weights: equal."""
        g = self._group(group_id)
        if mode is not None:
            g.mode = abi.lb_mode(mode)
        if hash_fields is not None:
            g.hash_fields = _hash_fields(hash_fields)
        if clear_weights:
            g.weights = None
        self._apply_lb(g, flowlet_timeout_us=flowlet_timeout_us, busy_util=busy_util,
                       busy_timeout_us=busy_timeout_us, weights=weights)
        self._write_header(group_id, g)

    def _apply_lb(self, g: GroupState, *, flowlet_timeout_us, busy_util, busy_timeout_us, weights) -> None:
        if flowlet_timeout_us is not None:
            if not 0 < flowlet_timeout_us < 4e6:
                raise ValueError("flowlet timeout must be in (0, 4e6) us")
            g.flowlet_timeout_us = float(flowlet_timeout_us)
        if busy_timeout_us is not None:
            if not 0 < busy_timeout_us < 4e6:
                raise ValueError("busy timeout must be in (0, 4e6) us")
            g.busy_timeout_us = float(busy_timeout_us)
        if busy_util is not None:
            if not 0 <= busy_util <= 1:
                raise ValueError("busy_util is a fraction 0..1")
            g.busy_util = float(busy_util)
        if weights is not None:
            weights = [float(w) for w in weights]
            if len(weights) != len(g.members):
                raise ValueError(f"{len(weights)} weights for {len(g.members)} members")
            wcmp_slots(weights)   # validates
            g.weights = weights

    def group_info(self, group_id: int) -> dict:
        g = self._group(group_id)
        return {"mode": abi.LB_MODE_NAMES.get(g.mode, str(g.mode)),
                "members": [ifx for ifx, _ in g.members],
                "hash_fields": hash_field_names(g.hash_fields),
                "flowlet_timeout_us": g.flowlet_timeout_us, "busy_util": g.busy_util,
                "busy_timeout_us": g.busy_timeout_us, "weights": g.weights}

    def group_mode(self, group_id: int) -> str:
        """The group's load-balancing mode's name (group_info's "mode", without the rest)."""
        mode = self._group(group_id).mode
        return abi.LB_MODE_NAMES.get(mode, str(mode))

    def _group(self, group_id: int) -> GroupState:
        self._check_group(group_id)
        try:
            return self._groups[group_id]
        except KeyError:
            raise DataplaneError(f"group {group_id} does not exist") from None

    def _write_header(self, gid: int, g: GroupState) -> None:
        hdr = g.header()
        for i, (ifindex, _) in enumerate(g.members[: abi.WCMP_SLOTS]):
            hdr.eslots[i] = self._ports[ifindex].slot
        for i, (ifindex, _) in enumerate(g.members[: abi.DOWN_MASK_BITS]):
            if self._ports[ifindex].flags & abi.PORT_F_DOWN:
                hdr.down_mask |= 1 << i
        self.maps.update("groups", ct.c_uint32(gid), hdr)

    def _write_group(self, gid: int, g: GroupState) -> None:
        members = g.members
        old = self._groups.get(gid)
        old_n = len(old.members) if old else 0
        base = gid * self.max_members
        shrink = len(members) < old_n
        if shrink:   # stop using the tail before clearing it
            self._write_header(gid, g)
        for i, (ifindex, dmac) in enumerate(members):
            port = self._ports[ifindex]
            m = abi.Member(ifindex=ifindex, egress_slot=port.slot)
            m.dmac[:] = list(dmac)
            m.smac[:] = list(port.mac)
            self.maps.update("members", ct.c_uint32(base + i), m)
        for i in range(len(members), max(old_n, len(members))):
            self.maps.update("members", ct.c_uint32(base + i), abi.Member())
        if old is None or [ifx for ifx, _ in old.members] != [ifx for ifx, _ in members]:
            for i in range(max(old_n, len(members))):
                self.maps.zero_percpu("member_stats", base + i, abi.PktCount)
        if not shrink:
            self._write_header(gid, g)
        self._groups[gid] = g

    def del_group(self, group_id: int) -> None:
        if group_id in self._groups:
            self._write_group(group_id, GroupState(members=[]))
            del self._groups[group_id]

    def add_route(self, switch_id: int, prefix: str, group_id: int) -> None:
        """Route prefix ('10.0.1.0/24'; host bits are masked) of switch_id to group_id."""
        self._check_switch(switch_id)
        self._check_group(group_id)
        net = ipaddress.IPv4Network(prefix, strict=False)
        key = self._route_key(switch_id, net)
        if (switch_id, net) in self._route_avoid:
            avoid = self._route_avoid[(switch_id, net)]
        else:
            # A new, more specific route (a learned /32) starts with what the covering
            # route of the same group avoids: written with it, so that no frame slips
            # through before the fabric monitor re-applies its exclusions.
            avoid = self._covering_avoid(switch_id, net, group_id)
            if avoid:
                self._route_avoid[(switch_id, net)] = avoid
        self.maps.update("routes", key, abi.RouteVal(group_id=group_id, avoid_mask=avoid))
        self._routes[(switch_id, net)] = group_id
        self._routes_changed(switch_id)

    def _covering_avoid(self, switch_id: int, net: ipaddress.IPv4Network, group_id: int) -> int:
        """The avoid mask of the most specific route of the same group that covers net
        (only routes with a mask can matter, and they are few)."""
        best, mask = None, 0
        for (sw, other), avoid in self._route_avoid.items():
            if sw == switch_id and other != net and self._routes.get((sw, other)) == group_id \
                    and net.subnet_of(other) and (best is None or other.prefixlen > best.prefixlen):
                best, mask = other, avoid
        return mask

    def set_route_avoid(self, switch_id: int, prefix: str, mask: int) -> None:
        """Members (bit i = member i of the route's group) to avoid for this prefix: remote
        failures (FGLB) and adaptive-routing notifications. Advisory in the data path: if
        avoiding them would leave no live member, they are used anyway."""
        net = ipaddress.IPv4Network(prefix, strict=False)
        gid = self._routes.get((switch_id, net))
        if gid is None:
            raise DataplaneError(f"switch {switch_id} has no route {net}")
        mask &= (1 << abi.DOWN_MASK_BITS) - 1
        self.maps.update("routes", self._route_key(switch_id, net), abi.RouteVal(group_id=gid, avoid_mask=mask))
        if mask:
            self._route_avoid[(switch_id, net)] = mask
        else:
            self._route_avoid.pop((switch_id, net), None)
        self._routes_changed(switch_id)

    def route_avoid(self, switch_id: int | None = None) -> dict[tuple[int, str], int]:
        return {(sw, str(net)): m for (sw, net), m in self._route_avoid.items()
                if switch_id is None or sw == switch_id}

    def del_route(self, switch_id: int, prefix: str) -> bool:
        """Remove a route; returns False if there was none."""
        net = ipaddress.IPv4Network(prefix, strict=False)
        self._routes.pop((switch_id, net), None)
        self._route_avoid.pop((switch_id, net), None)
        found = self.maps.delete("routes", self._route_key(switch_id, net))
        self._routes_changed(switch_id)
        return found

    def lookup_route(self, switch_id: int, ip: str) -> int | None:
        """Longest-prefix match as the data plane does it: group id or None."""
        key = abi.RouteKey(prefixlen=64, switch_id_be=abi.u32_be(switch_id), dst=abi.ip_be(_ip4(ip)))
        val = abi.RouteVal()
        return val.group_id if self.maps.lookup("routes", key, val) else None

    def routes(self, switch_id: int) -> dict[str, int]:
        return {str(net): gid for (sw, net), gid in self._routes.items() if sw == switch_id}

    @staticmethod
    def _route_key(switch_id: int, net: ipaddress.IPv4Network) -> abi.RouteKey:
        return abi.RouteKey(prefixlen=32 + net.prefixlen, switch_id_be=abi.u32_be(switch_id),
                            dst=abi.ip_be(net.network_address))

    # ------------------------------------------------------------------ port model
    def set_port_model(self, ifindex: int, *, speed_bps: int, buffer_bytes: int = 32768,
                       ecn_bytes: int | None = 8192, window_us: float = 1000.0,
                       real_queue: bool = False, ecn_max_bytes: int | None = None,
                       ecn_pmax: float = 1.0) -> None:
        """Emulate an egress port: speed_bps (already scaled), a tail-drop buffer of
        buffer_bytes, CE marking of ECT frames while the backlog exceeds ecn_bytes (None =
        never) -- RED-style if ecn_max_bytes is above it: probability rising from 0 at
        ecn_bytes (Kmin) to ecn_pmax at ecn_max_bytes (Kmax), every frame above Kmax (None
        or <= Kmin: a step at Kmin) --, utilisation averaged over window_us windows
        (wall-clock time). speed_bps 0 = no model
        (unlimited, no queue). The queue is virtual: frames are not delayed -- unless
        real_queue, which hands them to tc_handoff and the port's shaper qdisc instead of
        redirecting them (the caller sets those up first, see dataplane.realqueue)."""
        port = self.port_info(ifindex)
        if speed_bps < 0 or buffer_bytes <= 0 or window_us <= 0:
            raise ValueError("speed_bps >= 0, buffer_bytes > 0, window_us > 0")
        ps_per_byte = round(8e12 / speed_bps) if speed_bps else 0
        if ps_per_byte >= 2**32:
            raise ValueError(f"speed {speed_bps} b/s is too slow to emulate (< 2 kb/s)")
        key = ct.c_uint32(port.slot)
        q = abi.PortQueue()          # (re)configuring starts from an empty, idle queue
        q.ps_per_byte = ps_per_byte
        q.buf_ns = buffer_bytes * ps_per_byte // 1000
        q.ecn_ns = (2**64 - 1) if ecn_bytes is None else ecn_bytes * ps_per_byte // 1000
        if not 0 <= ecn_pmax <= 1:
            raise ValueError(f"ECN Pmax {ecn_pmax} is not a probability (0..1)")
        if ecn_bytes is not None and ecn_max_bytes is not None and ecn_max_bytes > ecn_bytes:
            q.ecn_max_ns = ecn_max_bytes * ps_per_byte // 1000
            q.ecn_pmax = round(ecn_pmax * abi.ECN_P_ONE)
        q.win_ns = min(int(window_us * 1000), 2**32 - 1)
        if real_queue:
            if not speed_bps:
                raise ValueError("a real queue needs a port speed (speed_bps > 0)")
            q.flags = abi.QUEUE_F_REAL
        self.maps.update("port_queue", key, q, flags=BPF_F_LOCK)
        port.speed_bps = speed_bps
        self._write_port(ifindex, port)
        self._port_model[ifindex] = {"speed_bps": speed_bps, "buffer_bytes": buffer_bytes,
                                     "ecn_bytes": ecn_bytes, "window_us": window_us,
                                     "real_queue": real_queue, "ecn_max_bytes": ecn_max_bytes,
                                     "ecn_pmax": ecn_pmax}

    # ------------------------------------------------------------------ PFC
    def set_pfc(self, *, on: bool, lossless_dscp: int = 26, lossless_prio: int = 3) -> None:
        """Lab-wide PFC: frames with lossless_dscp are the lossless priority (accounted at
        their ingress port, never tail-dropped by an egress queue) while on."""
        cfg = abi.PfcCfg(flags=abi.PFC_F_ON if on else 0, lossless_dscp=lossless_dscp,
                         lossless_prio=lossless_prio)
        self.maps.update("pfc_cfg", ct.c_uint32(0), cfg)
        self._pfc_prio = lossless_prio

    def set_pfc_port(self, ifindex: int, *, limit_bytes: int, ns_per_quantum: int) -> None:
        """An ingress port's PFC account: a lossless frame beyond limit_bytes (XOFF +
        headroom; 0 = no accounting) is dropped; ns_per_quantum: wall ns of one pause
        quantum it receives. Resets the account and the pause times."""
        port = self.port_info(ifindex)
        pp = abi.PfcPort(limit_bytes=min(int(limit_bytes), 2**32 - 1), ns_per_quantum=int(ns_per_quantum))
        self.maps.update("pfc_port", ct.c_uint32(port.slot), pp)

    def pfc_port(self, ifindex: int) -> "abi.PfcPort | None":
        """The raw PFC account of a port (bpf/pfc.h), or None."""
        pp = abi.PfcPort()
        if not self.maps.lookup("pfc_port", ct.c_uint32(self.port_info(ifindex).slot), pp):
            return None
        return pp

    def pfc_ports(self, ifindexes) -> dict[int, "abi.PfcPort"]:
        """The raw PFC accounts of many ports in one batch lookup (the agent's PFC thread
        reads every port's account every poll: one system call, not one a port)."""
        slots = {ifx: self.port_info(ifx).slot for ifx in ifindexes}
        if not slots:
            return {}
        accounts = self.maps.array_values("pfc_port", max(slots.values()) + 1, abi.PfcPort)
        return {ifx: accounts[slot] for ifx, slot in slots.items()}

    @staticmethod
    def pfc_occupancy_of(pp: "abi.PfcPort", now: int, still_held) -> int:
        """Lossless bytes of an ingress account still waiting in egress queues at `now`:
        entries whose departure time is ahead, and entries held by a pause on an egress
        slot for which still_held(slot) is true."""
        if not pp.bytes:
            return 0
        if pp.head - pp.tail > abi.PFC_RING:
            return pp.bytes
        waiting = 0
        for i in range(pp.tail, pp.head):
            t_dep = pp.t_dep[i % abi.PFC_RING]
            if (still_held(t_dep & 0xFFFFFFFF) if t_dep & abi.PFC_HELD else t_dep > now):
                waiting += pp.len[i % abi.PFC_RING]
        return waiting

    def pfc_paused(self, slot: int, now: int) -> bool:
        """Whether the neighbour of port `slot` pauses its lossless priority at `now`."""
        pp = abi.PfcPort()
        if not self.maps.lookup("pfc_port", ct.c_uint32(slot), pp):
            return False
        return pp.pause_until[self._pfc_prio & 7] > now

    def pfc_port_state(self, ifindex: int) -> dict:
        """occupancy_bytes: lossless bytes from this ingress port still waiting in egress
        queues now; peak_bytes, headroom_drops; pause_rx (PFC frames received here) and
        paused_until_ns per priority (monotonic ns; 0 = never paused)."""
        return self.pfc_ports_state([ifindex]).get(ifindex, {})

    def pfc_ports_state(self, ifindexes) -> dict[int, dict]:
        """pfc_port_state of many ports, their accounts read in one batch lookup."""
        accounts = self.pfc_ports(ifindexes)
        by_slot = {self.port_info(ifx).slot: pp for ifx, pp in accounts.items()}
        now = time.monotonic_ns()
        paused: dict[int, bool] = {}          # one read per egress port however many entries

        def still_held(slot: int) -> bool:
            if slot not in paused:
                pp = by_slot.get(slot)
                paused[slot] = pp.pause_until[self._pfc_prio & 7] > now if pp is not None \
                    else self.pfc_paused(slot, now)
            return paused[slot]

        return {ifx: {"occupancy_bytes": self.pfc_occupancy_of(pp, now, still_held), "peak_bytes": pp.peak,
                      "headroom_drops": pp.headroom_drops, "pause_rx": pp.pause_rx,
                      "paused_until_ns": list(pp.pause_until)}
                for ifx, pp in accounts.items()}

    def port_model(self, ifindex: int) -> dict | None:
        return self._port_model.get(ifindex)

    def port_queue_state(self, ifindex: int) -> dict:
        """queue_bytes (virtual backlog now), utilization (0..1, EWMA; 0 when stale)."""
        port = self.port_info(ifindex)
        q = abi.PortQueue()
        if not self.maps.lookup("port_queue", ct.c_uint32(port.slot), q):
            return {"queue_bytes": 0, "utilization": 0.0}
        return self._queue_state_of(q, time.monotonic_ns())   # bpf_ktime_get_ns() is CLOCK_MONOTONIC

    @staticmethod
    def _queue_state_of(q: "abi.PortQueue", now: int) -> dict:
        if not q.ps_per_byte:
            return {"queue_bytes": 0, "utilization": 0.0}
        backlog_ns = max(q.t_free - now, 0)
        stale = now - q.win_start > 4 * q.win_ns
        return {"queue_bytes": backlog_ns * 1000 // q.ps_per_byte,
                "utilization": 0.0 if stale else q.util / abi.UTIL_ONE}

    # ------------------------------------------------------------------ traffic matrix
    @staticmethod
    def _tm_key(switch_id: int, src: str, dst: str, sport: int, dport: int, proto) -> abi.TmKey:
        p = IPPROTO.get(proto, proto) if isinstance(proto, str) else proto
        if not isinstance(p, int) or not 0 <= p < 256:
            raise ValueError(f"bad protocol {proto!r}")
        return abi.TmKey(switch_id=switch_id, saddr=abi.ip_be(_ip4(src)), daddr=abi.ip_be(_ip4(dst)),
                         sport=sport, dport=dport, proto=p)

    def tm_add(self, switch_id: int, *, src: str, dst: str, sport: int, dport: int, proto="udp",
               egress_ifindex: int, dmac: str) -> None:
        """Static traffic-matrix entry: this 5-tuple on this switch leaves by egress_ifindex
        (next-hop dmac), whatever the route's group and mode say. sport/dport 0 match
        packets without ports (ICMP, fragments)."""
        self._check_switch(switch_id)
        port = self.port_info(egress_ifindex)
        if port.switch_id != switch_id:
            raise DataplaneError(f"ifindex {egress_ifindex} is not a port of switch {switch_id}")
        key = self._tm_key(switch_id, src, dst, sport, dport, proto)
        e = abi.TmEntry()
        e.m.ifindex = egress_ifindex
        e.m.egress_slot = port.slot
        e.m.dmac[:] = list(abi.mac_bytes(dmac))
        e.m.smac[:] = list(port.mac)
        self.maps.update("tm", key, e)
        ident = (switch_id, src, dst, int(sport), int(dport), key.proto)
        self._tm[ident] = {"switch_id": switch_id, "src": src, "dst": dst, "sport": int(sport),
                           "dport": int(dport), "proto": key.proto, "egress_ifindex": egress_ifindex}
        refs = self._tm_dsts.setdefault((switch_id, key.daddr), set())
        refs.add(ident)
        self.maps.update("tm_dsts", abi.TmDstKey(switch_id=switch_id, daddr=key.daddr), ct.c_uint32(len(refs)))
        self._set_switch_flag(switch_id, abi.SW_F_TM, True)   # also invalidates route_cache

    def tm_del(self, switch_id: int, *, src: str, dst: str, sport: int, dport: int, proto="udp") -> bool:
        key = self._tm_key(switch_id, src, dst, sport, dport, proto)
        found = self.maps.delete("tm", key)
        ident = (switch_id, src, dst, int(sport), int(dport), key.proto)
        self._tm.pop(ident, None)
        refs = self._tm_dsts.get((switch_id, key.daddr))
        if refs is not None:
            refs.discard(ident)
            dkey = abi.TmDstKey(switch_id=switch_id, daddr=key.daddr)
            if refs:
                self.maps.update("tm_dsts", dkey, ct.c_uint32(len(refs)))
            else:
                del self._tm_dsts[(switch_id, key.daddr)]
                self.maps.delete("tm_dsts", dkey)
        # both invalidate route_cache (RC_F_TM)
        if not any(k[0] == switch_id for k in self._tm):
            self._set_switch_flag(switch_id, abi.SW_F_TM, False)
        else:
            self._routes_changed(switch_id)
        return found

    def tm_list(self, switch_id: int | None = None) -> list[dict]:
        """Entries with their match counters (packets, bytes)."""
        out = []
        for (sw, src, dst, sport, dport, proto), info in self._tm.items():
            if switch_id is not None and sw != switch_id:
                continue
            e = abi.TmEntry()
            self.maps.lookup("tm", self._tm_key(sw, src, dst, sport, dport, proto), e)
            out.append({**info, "packets": e.packets, "bytes": e.bytes})
        return out

    def _set_switch_flag(self, switch_id: int, flag: int, on: bool) -> None:
        cfg = self._switches.get(switch_id) or abi.SwitchCfg()
        cfg.flags = (cfg.flags | flag) if on else (cfg.flags & ~flag)
        self._write_switch(switch_id, cfg)

    def flowlet_stats(self, group_id: int) -> dict:
        """Flows of a group in the flowlet table and how many flowlets they had in all."""
        flows = flowlets = 0
        for k, v in self.maps.items("flowlets"):
            if k.group_id == group_id:
                flows += 1
                flowlets += v.flowlets
        return {"flows": flows, "flowlets": flowlets}

    # ------------------------------------------------------------------ flow visibility
    def set_flow_visibility(self, on: bool, sample_shift: int = 0) -> None:
        """Account frames per (egress port, 5-tuple) in flow_seen (bpf/flows.h): every
        frame (sample_shift 0) or one in 2^sample_shift, credited 2^sample_shift times."""
        if not 0 <= sample_shift <= 16:
            raise ValueError("sample_shift must be 0..16 (one frame in 1 .. 65536)")
        cfg = abi.FlowCfg(flags=abi.FLOW_CFG_F_ON if on else 0, sample_mask=(1 << sample_shift) - 1)
        self.maps.update("flow_cfg", ct.c_uint32(0), cfg)

    def flow_visibility(self) -> dict:
        cfg = abi.FlowCfg()
        self.maps.lookup("flow_cfg", ct.c_uint32(0), cfg)
        return {"on": bool(cfg.flags & abi.FLOW_CFG_F_ON),
                "sample_shift": (cfg.sample_mask + 1).bit_length() - 1}

    def flows_seen(self) -> list[dict]:
        """Every flow_seen entry: egress slot, 5-tuple (addresses as dotted strings, proto
        number), estimated bytes and frames, first and last sampled ns (CLOCK_MONOTONIC)."""
        out = []
        for k, v in self.maps.items("flow_seen"):
            out.append({"slot": k.slot, "src": abi.ip_str(k.saddr), "dst": abi.ip_str(k.daddr),
                        "sport": k.sport, "dport": k.dport, "proto": k.proto,
                        "bytes": v.bytes, "packets": v.packets,
                        "first_ns": v.first_ns, "last_ns": v.last_ns})
        return out

    def forget_flows_seen(self, older_than_ns: int) -> int:
        """Delete entries whose last frame is before older_than_ns; returns how many."""
        stale = [k for k, v in self.maps.items("flow_seen") if v.last_ns < older_than_ns]
        for k in stale:
            self.maps.delete("flow_seen", k)
        return len(stale)

    # ------------------------------------------------------------------ counters
    _PORT_STATS_WORDS = ct.sizeof(abi.PortStats) // 8
    _PORT_TOTALS = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "ecn_marked")   # its first words
    _DROPS_AT = abi.PortStats.drops.offset // 8

    def port_counters(self, ifindex: int) -> dict:
        """rx_packets, rx_bytes, tx_packets, tx_bytes, ecn_marked, drops: {reason: n}
        (summed over CPUs)."""
        return self._counters_of(self._port_stats_words(ifindex))

    def _counters_of(self, words: list[int]) -> dict:
        out = dict(zip(self._PORT_TOTALS, words))
        out["drops"] = {name: words[self._DROPS_AT + r] for r, name in abi.DROP_REASONS.items()}
        return out

    def ports_counters(self, ifindexes) -> dict[int, dict]:
        """port_counters and port_queue_state of many ports in one dict each, read with two
        batch lookups (the agent's counters reply covers every port of a lab; one lookup
        a port cost a 56-node lab ~80 ms)."""
        slots = {ifx: self.port_info(ifx).slot for ifx in ifindexes}
        if not slots:
            return {}
        count = max(slots.values()) + 1
        n, ncpus = self._PORT_STATS_WORDS, self.maps.ncpus
        stats = array("Q", bytes(self.maps.array_values("port_stats", count, ct.c_uint64 * (n * ncpus))))
        queues = self.maps.array_values("port_queue", count, abi.PortQueue)
        now = time.monotonic_ns()
        out = {}
        for ifx, slot in slots.items():
            flat = stats[slot * n * ncpus:(slot + 1) * n * ncpus]
            out[ifx] = {**self._counters_of([sum(flat[w::n]) for w in range(n)]),
                        **self._queue_state_of(queues[slot], now)}
        return out

    def _port_stats_words(self, ifindex: int) -> list[int]:
        """A port's port_stats entry as u64 words, summed over CPUs: one lookup, read as
        a flat array (a live view polls every port twice a second; ctypes field access
        per CPU and per reason cost the agent ~20 us a port)."""
        port = self.port_info(ifindex)
        n = self._PORT_STATS_WORDS
        buf = (ct.c_uint64 * (n * self.maps.ncpus))()
        if not self.maps.lookup("port_stats", ct.c_uint32(port.slot), buf):
            raise DataplaneError(f"BPF map port_stats: no entry {port.slot}")
        flat = buf[:]
        return [sum(flat[w::n]) for w in range(n)]

    def port_loads(self, ifindexes) -> dict[int, tuple[int, int, int, int, int]]:
        """Per port (tx_bytes, rx_bytes, ecn_marked, drops of every reason summed, virtual
        backlog bytes now): port_counters' and port_queue_state's numbers for many ports,
        read with two batch lookups instead of two lookups a port (a live view asks for
        every port of a lab twice a second)."""
        slots = {ifx: self.port_info(ifx).slot for ifx in ifindexes}
        if not slots:
            return {}
        count = max(slots.values()) + 1
        n, ncpus = self._PORT_STATS_WORDS, self.maps.ncpus
        stats = self.maps.array_values("port_stats", count, ct.c_uint64 * (n * ncpus))
        queues = self.maps.array_values("port_queue", count, abi.PortQueue)
        words = array("Q", bytes(stats))
        stride = n * ncpus

        def column(word: int) -> list[int]:          # one word of every slot, summed over CPUs
            cols = [words[cpu * n + word::stride] for cpu in range(ncpus)]
            return list(map(sum, zip(*cols))) if ncpus > 1 else list(cols[0])
        tx, rx, ecn = (column(getattr(abi.PortStats, f).offset // 8) for f in ("tx_bytes", "rx_bytes", "ecn_marked"))
        drops = list(map(sum, zip(*(column(self._DROPS_AT + r) for r in abi.DROP_REASONS))))
        now = time.monotonic_ns()
        out = {}
        for ifx, slot in slots.items():
            q = queues[slot]
            backlog = max(q.t_free - now, 0) * 1000 // q.ps_per_byte if q.ps_per_byte else 0
            out[ifx] = (tx[slot], rx[slot], ecn[slot], drops[slot], backlog)
        return out

    def member_counters(self, group_id: int) -> list[dict]:
        """Per current member: ifindex, packets, bytes."""
        self._check_group(group_id)
        g = self._groups.get(group_id)
        members = g.members if g else []
        out = []
        for i, (ifindex, _) in enumerate(members):
            per_cpu = self.maps.percpu("member_stats", group_id * self.max_members + i, abi.PktCount)
            out.append({"ifindex": ifindex, "packets": sum(c.packets for c in per_cpu),
                        "bytes": sum(c.bytes for c in per_cpu)})
        return out

    def groups_member_counters(self, group_ids) -> dict[int, list[dict]]:
        """member_counters of many groups, read in one batch lookup of member_stats."""
        gids = [gid for gid in group_ids if self._groups.get(gid)]
        if not gids:
            return {gid: [] for gid in group_ids}
        ncpus = self.maps.ncpus
        stats = self.maps.array_values("member_stats", (max(gids) + 1) * self.max_members, abi.PktCount * ncpus)
        out: dict[int, list[dict]] = {gid: [] for gid in group_ids}
        for gid in gids:
            for i, (ifindex, _) in enumerate(self._groups[gid].members):
                per_cpu = stats[gid * self.max_members + i]
                out[gid].append({"ifindex": ifindex, "packets": sum(c.packets for c in per_cpu),
                                 "bytes": sum(c.bytes for c in per_cpu)})
        return out

    def verdict_counters(self) -> dict:
        """{verdict: {packets, bytes}} for aborted, drop, pass, tx, redirect (all switches)."""
        out = {}
        for action, name in abi.XDP_ACTIONS.items():
            per_cpu = self.maps.percpu("verdict_stats", action, abi.PktCount)
            out[name] = {"packets": sum(c.packets for c in per_cpu), "bytes": sum(c.bytes for c in per_cpu)}
        return out

    def drop_counters(self) -> dict:
        """{reason: packets} over all ports (includes unknown_port, counted only here)."""
        return {name: sum(self.maps.percpu("drop_stats", r, ct.c_uint64))
                for r, name in abi.DROP_REASONS.items()}

    # ------------------------------------------------------------------ helpers
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


# ---------------------------------------------------------------------- bpffs
