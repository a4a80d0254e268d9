"""Switches and ports: the `switches` config (hash seed and fields, flags), the `ports`
and `port_index` entries of every switch port (slot, MAC, LBN, up/down, ARP flags), and
the hosts the data path learned from ARP (`arp_learned`).

Owns SwitchDataplane._ports, _slot_owner and _switches (written through _write_port and
_write_switch, which stay with the class: every table family writes them)."""
from __future__ import annotations

import ctypes as ct

from dataplane.xdp import abi
from dataplane.xdp.bpfio import DataplaneError
from dataplane.xdp.tables.groups import hash_field_names, parse_hash_fields


class PortTables:
    """Switch and port entries, learned hosts.

    A part of SwitchDataplane (dataplane.xdp.switch): it uses the class's maps,
    shadow state and range checks."""

    def set_switch(self, switch_id: int, *, hash_seed: int, hash_fields=None) -> None:
        """Per-switch ECMP seed and default hash fields (names or HASH_F_* flags; None = 5-tuple)."""
        self._check_switch(switch_id)
        old = self._switches.get(switch_id)
        cfg = abi.SwitchCfg(hash_seed=hash_seed & 0xFFFFFFFF, hash_fields=parse_hash_fields(hash_fields),
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
        return self.set_port_states([(ifindex, up)]).get(ifindex, [])

    def set_port_states(self, changes: list[tuple[int, bool]]) -> dict[int, list[int]]:
        """set_port_state for several ports as one change: every port coming up accepts
        what arrives before any group sends into one of them, and every group leaves the
        ports going down before they drop what arrives. So the two ends of a repaired link
        never have one end sending into the other's still-closed port. Returns {ifindex:
        group ids rewritten} of the ports whose state changed."""
        moved: dict[int, bool] = {}
        for ifindex, up in changes:
            info = self.port_info(ifindex)
            flags = (info.flags & ~abi.PORT_F_DOWN) | (0 if up else abi.PORT_F_DOWN)
            if flags != info.flags:
                info.flags = flags
                moved[ifindex] = up
        for ifindex, up in moved.items():
            if up:
                self._write_port(ifindex, self._ports[ifindex])
        rewritten: dict[int, list[int]] = {ifindex: [] for ifindex in moved}
        for gid, g in self._groups.items():
            hit = {ifx for ifx, _ in g.members if ifx in moved}
            if hit:
                self._write_header(gid, g)
                for ifindex in hit:
                    rewritten[ifindex].append(gid)
        for ifindex, up in moved.items():
            if not up:
                self._write_port(ifindex, self._ports[ifindex])
        return rewritten

    def port_is_up(self, ifindex: int) -> bool:
        return not self.port_info(ifindex).flags & abi.PORT_F_DOWN

    def set_port_learn(self, ifindex: int, learn: bool) -> None:
        """Record ARP senders seen on this port into arp_learned (host-facing ports)."""
        info = self.port_info(ifindex)
        info.flags = (info.flags & ~abi.PORT_F_LEARN) | (abi.PORT_F_LEARN if learn else 0)
        self._write_port(ifindex, info)

    def del_port(self, ifindex: int) -> None:
        info = self._ports.pop(ifindex, None)
        if info is None:
            return
        if ifindex < self.port_index_slots:
            self.maps.update("port_index", ct.c_uint32(ifindex), abi.PortInfo())
        self.maps.delete("ports", ct.c_uint32(ifindex))
        self._slot_owner.pop(info.slot, None)

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
