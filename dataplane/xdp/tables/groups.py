"""Next-hop groups: the `groups` headers (mode, hash fields, flowlet and busy timers,
WCMP slots, down mask) and their `members`, and the flowlet table of their flows.

Owns SwitchDataplane._groups and _member_ranges. A group's member carries its egress
port's slot and MAC, so a port change rewrites the groups that use it (PortTables.set_port)."""
from __future__ import annotations

import ctypes as ct
import dataclasses
import math

from dataplane.xdp import abi
from dataplane.xdp.bpfio import DataplaneError


def parse_hash_fields(value) -> int:
    """int flags, or an iterable of names from abi.HASH_FIELDS, or None (= 0, default)."""
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


class MemberRanges:
    """Where each group's members are in the `members` table (and `member_stats`): a range
    per group, a power of two long (a group that grows within it stays), taken from a free
    list of that length or the end of what is used. A fixed stride of max_members per group
    kept 64 entries for every one-member group: 940 MB of the two tables at 16,384 GPUs."""

    def __init__(self, entries: int):
        self.entries = entries
        self.top = 0                                  # entries top.. were never handed out
        self.free: dict[int, list[int]] = {}          # length -> bases of free ranges
        self.ranges: dict[int, tuple[int, int]] = {}  # group id -> (base, length)

    @staticmethod
    def length_for(members: int) -> int:
        return 1 << max(0, members - 1).bit_length() if members else 0

    def base(self, gid: int) -> int:
        return self.ranges.get(gid, (0, 0))[0]

    def fits(self, gid: int, members: int) -> bool:
        return members <= self.ranges.get(gid, (0, 0))[1]

    def take(self, members: int) -> tuple[int, int]:
        """A free range for `members` entries: (base, length)."""
        length = self.length_for(members)
        spare = self.free.get(length)
        if spare:
            return spare.pop(), length
        if self.top + length > self.entries:
            raise DataplaneError(f"the members table is full ({self.entries} entries): "
                                 f"no room for a group of {members}")
        self.top += length
        return self.top - length, length

    def assign(self, gid: int, taken: tuple[int, int]) -> tuple[int, int] | None:
        """gid's range is now `taken`; returns the one it had (the caller frees it when no
        frame can read it any more), or None."""
        old = self.ranges.get(gid)
        if taken[1]:
            self.ranges[gid] = taken
        else:
            self.ranges.pop(gid, None)
        return old

    def release(self, taken: tuple[int, int]) -> None:
        if taken[1]:
            self.free.setdefault(taken[1], []).append(taken[0])


def hash_field_names(flags: int) -> list[str]:
    return [name for name, bit in abi.HASH_FIELDS.items() if flags & bit]


class GroupTables:
    """Next-hop groups, their load balancing and flowlets.

    A part of SwitchDataplane (dataplane.xdp.switch): it uses the class's maps,
    shadow state and range checks."""

    def set_group(self, group_id: int, members: list[tuple[int, str]], *, mode: str | int = "ecmp",
                  hash_fields=None, flowlet_timeout_us: float | None = None,
                  busy_util: float | None = None, busy_timeout_us: float | None = None,
                  weights: list[float] | None = None) -> None:
        """Next-hop group: members are (egress ifindex, next-hop MAC); the src MAC and
        counter slot come from the egress port (set_port first). mode: a name of
        abi.LB_MODES ('ecmp' default, 'lbn', 'spray-random', 'spray-rr', 'flowlet',
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
        g = GroupState(members=norm, mode=mode_v, hash_fields=parse_hash_fields(hash_fields))
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
            g.hash_fields = parse_hash_fields(hash_fields)
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
        hdr.member_base = self._member_ranges.base(gid)
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
        ranges = self._member_ranges
        if not ranges.fits(gid, len(members)):
            self._move_group(gid, g, old_n)
            return
        base = ranges.base(gid)
        shrink = len(members) < old_n
        if shrink:   # stop using the tail before clearing it
            self._write_header(gid, g)
        self._write_members(base, members)
        for i in range(len(members), max(old_n, len(members))):
            self.maps.update("members", ct.c_uint32(base + i), abi.Member())
        if old is None or [ifx for ifx, _ in old.members] != [ifx for ifx, _ in members]:
            for i in range(max(old_n, len(members))):
                self.maps.zero_percpu("member_stats", base + i, abi.PktCount)
        if not shrink:
            self._write_header(gid, g)
        self._groups[gid] = g

    def _move_group(self, gid: int, g: GroupState, old_n: int) -> None:
        """A group that outgrew its range: members and zeroed counters into a new one, the
        header pointed at it, then the old range cleared and freed (a frame reads either
        range whole, never a mix)."""
        ranges = self._member_ranges
        taken = ranges.take(len(g.members))
        self._write_members(taken[0], g.members)
        for i in range(taken[1]):
            self.maps.zero_percpu("member_stats", taken[0] + i, abi.PktCount)
        before = ranges.assign(gid, taken)
        self._write_header(gid, g)
        self._groups[gid] = g
        if before is not None:
            for i in range(old_n):
                self.maps.update("members", ct.c_uint32(before[0] + i), abi.Member())
            ranges.release(before)

    def _write_members(self, base: int, members: list[tuple[int, bytes]]) -> None:
        for i, (ifindex, dmac) in enumerate(members):
            port = self._ports[ifindex]
            m = abi.Member(ifindex=ifindex, egress_slot=port.slot)
            m.dmac[:] = list(dmac)
            m.smac[:] = list(port.mac)
            self.maps.update("members", ct.c_uint32(base + i), m)

    def del_group(self, group_id: int) -> None:
        if group_id in self._groups:
            self._write_group(group_id, GroupState(members=[]))   # n_members 0 first
            del self._groups[group_id]
            self._member_ranges.release(self._member_ranges.assign(group_id, (0, 0)) or (0, 0))

    def group_down_mask(self, group_id: int) -> int:
        g = self._group(group_id)
        mask = 0
        for i, (ifx, _) in enumerate(g.members[: abi.DOWN_MASK_BITS]):
            p = self._ports.get(ifx)
            if p is not None and p.flags & abi.PORT_F_DOWN:
                mask |= 1 << i
        return mask

    def forget_flowlets(self, gids) -> int:
        """Drop the flowlet entries of these groups (their flows start new flowlets)."""
        gset, flows = set(gids), 0
        for k in self.maps.keys("flowlets"):
            if k.group_id in gset and self.maps.delete("flowlets", k):
                flows += 1
        return flows

    def flowlet_snapshot(self) -> dict[bytes, bytes]:
        """The flowlet table as it is now (key bytes -> value bytes), for flowlet_restore."""
        return {bytes(k): bytes(v) for k, v in self.maps.items("flowlets")}

    def flowlet_restore(self, saved: dict[bytes, bytes]) -> int:
        """Put the flowlet table back as `saved` found it: entries made since are deleted,
        changed ones rewritten. Returns how many entries it touched."""
        touched = 0
        for k, v in self.maps.items("flowlets"):
            before = saved.get(bytes(k))
            if before is None:
                touched += self.maps.delete("flowlets", k)
            elif before != bytes(v):
                self.maps.update("flowlets", k, abi.Flowlet.from_buffer_copy(before))
                touched += 1
        return touched

    def flowlet_stats(self, group_id: int) -> dict:
        """Flows of a group in the flowlet table and how many flowlets they had in all."""
        flows = flowlets = 0
        for k, v in self.maps.items("flowlets"):
            if k.group_id == group_id:
                flows += 1
                flowlets += v.flowlets
        return {"flows": flows, "flowlets": flowlets}
