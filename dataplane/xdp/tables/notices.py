"""Notices in the data plane (ARN / FGLB link down, issue 27): `arn_cfg` (generate, consume,
the hold a notice carries, the rate limit), `arn_ports` (which ports are switch-switch links
and the notice's addresses on them), the counters (`arn_stats`) and the exclusions the
notices set (`arn_excl`). The programs are bpf/switch.c xdp_notice_tx / xdp_notice_rx.

Times here are wall-clock (the lab's clock): the agent converts its real-fabric settings
with dataplane.timescale before it calls set_notices.

Owns no shadow state: the data path writes arn_excl, arn_switch, arn_sent and arn_stamps
itself (the agent only clears arn_stamps)."""
from __future__ import annotations

import ctypes as ct
import time
from ipaddress import IPv4Address, IPv4Interface

from dataplane.xdp import abi
from dataplane.xdp.bpfio import DataplaneError


class NoticeTables:
    """Notice generation and consumption in the data plane.

    A part of SwitchDataplane (dataplane.xdp.switch): it uses the class's maps,
    shadow state and range checks."""

    def set_notices(self, *, generate: bool, consume: bool, hold_ms: int, interval_ns: int | None = None,
                    pass_consumed: bool = False, watch: bool = False) -> None:
        """generate: a packet into a group with no live member becomes a WITHDRAW notice
        back out of its (fabric) ingress port, carrying hold_ms (wall ms; 0: until a
        RESTORE); at most one per (switch, route, port) per interval_ns (default: the hold). consume: notices
        arriving on fabric ports set exclusions and are dropped -- or, with pass_consumed,
        passed up the switch's stack (so that a capture on the port sees them). watch: before
        sending into a watched fabric link, the data path asks the switch's FIB whether the
        link is up (bpf/switch.c rl_link_up), so it stops using a downed link before the
        agent hears of it."""
        if not 0 <= hold_ms <= 0xFFFFFFFF or (hold_ms == 0 and interval_ns is None):
            raise ValueError(f"notice hold_ms {hold_ms!r}: must be 0 (until RESTORE, with an interval_ns) "
                             "or 1 .. 2**32-1")
        interval = hold_ms * 1_000_000 if interval_ns is None else int(interval_ns)
        if not 0 <= interval < 1 << 63:
            raise ValueError(f"notice interval_ns {interval_ns!r} out of range")
        flags = ((abi.ARN_F_GENERATE if generate else 0) | (abi.ARN_F_CONSUME if consume else 0)
                 | (abi.ARN_F_PASS if pass_consumed else 0) | (abi.ARN_F_WATCH if watch else 0))
        self.maps.update("arn_cfg", ct.c_uint32(0), abi.ArnCfg(flags=flags, hold_ms=int(hold_ms),
                                                               interval_ns=interval))

    def notices_config(self) -> dict:
        cfg = abi.ArnCfg()
        self.maps.lookup("arn_cfg", ct.c_uint32(0), cfg)
        return {"generate": bool(cfg.flags & abi.ARN_F_GENERATE), "consume": bool(cfg.flags & abi.ARN_F_CONSUME),
                "pass_consumed": bool(cfg.flags & abi.ARN_F_PASS), "watch": bool(cfg.flags & abi.ARN_F_WATCH),
                "hold_ms": cfg.hold_ms, "interval_ns": cfg.interval_ns}

    def set_notice_port(self, ifindex: int, *, fabric: bool, src: str | None = None, dst: str | None = None,
                        peer_switch: int = 0) -> None:
        """Port ifindex is a switch-switch link (fabric: notices go out of it and are
        accepted from it) or not; src / dst: the notice's IPv4 source (the switch's address
        on the port, with its prefix length; None: 0.0.0.0) and destination (the
        neighbour's; None: 255.255.255.255); peer_switch: the neighbour's switch id, so that
        a notice arriving on one of several links to it excludes every one (0: this link's
        members only). A fabric port whose address's prefix holds dst is watched: the port's
        connected route to dst lives exactly as long as the link (rl_link_up)."""
        slot = self.port_info(ifindex).slot
        flags = 0
        if fabric:
            flags = abi.ARN_PORT_F_FABRIC | (abi.ARN_PORT_F_WATCHED if _connected(src, dst) else 0)
        self.maps.update("arn_ports", ct.c_uint32(slot), abi.ArnPort(
            flags=flags,
            src_ip=abi.ip_be(src.split("/")[0]) if src else 0,
            dst_ip=abi.ip_be(dst.split("/")[0]) if dst else 0,
            peer_switch=peer_switch if fabric else 0))

    def notice_port(self, ifindex: int) -> dict:
        p = abi.ArnPort()
        self.maps.lookup("arn_ports", ct.c_uint32(self.port_info(ifindex).slot), p)
        return {"fabric": bool(p.flags & abi.ARN_PORT_F_FABRIC), "watched": bool(p.flags & abi.ARN_PORT_F_WATCHED),
                "src": abi.ip_str(p.src_ip) if p.src_ip else None,
                "dst": abi.ip_str(p.dst_ip) if p.dst_ip else None, "peer_switch": p.peer_switch}

    def notice_counters(self) -> dict[str, int]:
        """{name: count} of abi.ARN_STATS, all switches together (summed over CPUs)."""
        return {name: sum(self.maps.percpu("arn_stats", key, ct.c_uint64))
                for key, name in abi.ARN_STATS.items()}

    def reaction_stamps(self, switch_ids, *, clear: bool = False) -> dict[int, dict[str, int]]:
        """{switch id: {dead_ns, notice_ns, excl_ns, avoid_ns}} of the given switches: when
        each first met a dead group, sent a notice, installed an exclusion, forwarded a
        packet its avoid mask steered (CLOCK_MONOTONIC ns; 0: not since the last clear).
        clear: start them over after reading (each switch's entry read, then zeroed: a
        stamp the data path writes in between is lost, which a caller avoids by clearing
        before the event it measures)."""
        out = {}
        for sw in switch_ids:
            if not 0 <= sw < self.max_switches:
                raise DataplaneError(f"switch id {sw} out of range")
            st = abi.ArnStamps()
            self.maps.lookup("arn_stamps", ct.c_uint32(sw), st)
            out[sw] = {name: int(getattr(st, name)) for name in abi.ARN_STAMP_FIELDS}
            if clear:
                self.maps.update("arn_stamps", ct.c_uint32(sw), abi.ArnStamps())
        return out

    def exclusions(self, switch_id: int | None = None) -> list[dict]:
        """The exclusions notices set: switch id, prefix, group, avoided member indexes and
        their ifindexes, expiry (CLOCK_MONOTONIC ns, 0 = until RESTORE) and whether it is
        still in force now (expired entries stay until a RESTORE or clear_exclusions)."""
        now = time.monotonic_ns()
        out = []
        for key, val in self.maps.items("arn_excl"):
            sw = abi.u32_be(key.switch_id_be)
            if switch_id is not None and sw != switch_id:
                continue
            g = self._groups.get(val.group_id)
            members = [ifx for ifx, _ in g.members] if g else []
            idx = [i for i in range(abi.DOWN_MASK_BITS) if val.avoid >> i & 1]
            out.append({"switch_id": sw, "prefix": f"{abi.ip_str(key.dst)}/{key.prefixlen - 32}",
                        "group": val.group_id, "members": idx,
                        "ifindexes": [members[i] for i in idx if i < len(members)],
                        "until_ns": val.until, "active": bool(val.avoid) and (not val.until or val.until > now)})
        return sorted(out, key=lambda e: (e["switch_id"], e["prefix"]))

    def clear_exclusions(self, switch_id: int | None = None) -> int:
        """Forget the exclusions of one switch (or all) and the notices they sent lately
        (their rate limit): as after a reboot. Returns how many exclusions went. Races with a
        notice arriving at that moment (the data path keeps the count of entries); the
        cached routes of the switch are invalidated (route_gen)."""
        gone = 0
        switches = set()
        for key, _ in self.maps.items("arn_excl"):
            sw = abi.u32_be(key.switch_id_be)
            if switch_id is None or sw == switch_id:
                gone += self.maps.delete("arn_excl", key)
                switches.add(sw)
        for key, _ in self.maps.items("arn_sent"):
            if switch_id is None or key.switch_id == switch_id:
                self.maps.delete("arn_sent", key)
        left: dict[int, int] = {}
        for key, _ in self.maps.items("arn_excl"):
            sw = abi.u32_be(key.switch_id_be)
            left[sw] = left.get(sw, 0) + 1
        for sw in switches | ({switch_id} if switch_id is not None else set()):
            if not 0 <= sw < self.max_switches:
                raise DataplaneError(f"switch id {sw} out of range")
            st = abi.ArnSwitch()
            self.maps.lookup("arn_switch", ct.c_uint32(sw), st)
            st.excl = left.get(sw, 0)
            self.maps.update("arn_switch", ct.c_uint32(sw), st)
            self._routes_changed(sw)   # new route_gen: no cached route keeps an exclusion
        return gone


def _connected(src: str | None, dst: str | None) -> bool:
    """The port's address src ("a.b.c.d/len") puts dst on the port's own segment: the kernel
    keeps a connected route to dst through the port while it is up (and the port is not a
    /32, which has no such route)."""
    if not src or not dst or "/" not in src:
        return False
    port = IPv4Interface(src)
    return port.network.prefixlen < 32 and IPv4Address(dst.split("/")[0]) in port.network

