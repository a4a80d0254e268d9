"""The railab XDP switch data plane: one BPF object for every switch of a lab.

SwitchDataplane compiles bpf/switch.c once with bcc (sizes as -D cflags), loads
the XDP entry function `xdp_switch`, and programs its maps. attach_xdp() /
detach_xdp() put that one program on switch ports living in any namespace.

Identifiers the agent chooses (all lab-wide):
- port ifindex: every switch-port veth is created with an explicit ifindex that
  is unique in the lab; it keys the port map.
- port slot: a lab-unique index < max_ports for each port; counters live in
  arrays indexed by it (not a per-switch port number).
- switch_id < max_switches, group_id < max_groups.
"""

from __future__ import annotations

import ctypes as ct
import errno
import ipaddress
import os
import time
from pathlib import Path

from dataplane import bpf_abi as abi
from dataplane.errors import RuntimeStateError
from dataplane.netns_util import in_netns

BPF_DIR = Path(__file__).resolve().parent.parent / "bpf"
SWITCH_C = BPF_DIR / "switch.c"
PROG_NAME = "xdp_switch"
BPFFS_ROOT = "/sys/fs/bpf"

XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
_XDP_MODE_FLAGS = {"drv": XDP_FLAGS_DRV_MODE, "native": XDP_FLAGS_DRV_MODE,
                   "generic": XDP_FLAGS_SKB_MODE, "skb": XDP_FLAGS_SKB_MODE}


class DataplaneError(RuntimeStateError):
    """The data plane cannot do what was asked (bad id, unknown port, map full, ...)."""


def _lib():
    from bcc.libbcc import lib  # imported lazily: bcc is only on root/test machines
    return lib


def _possible_cpus() -> int:
    from bcc.utils import get_possible_cpus
    return len(get_possible_cpus())


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


class SwitchDataplane:
    """One loaded XDP program and its maps, shared by all switches of one lab."""

    def __init__(self, *, max_ports: int = abi.MAX_PORTS, max_switches: int = abi.MAX_SWITCHES,
                 max_groups: int = abi.MAX_GROUPS, max_members: int = abi.MAX_MEMBERS,
                 max_routes: int = abi.MAX_ROUTES, max_addrs: int = abi.MAX_ADDRS,
                 debug: bool = False):
        from bcc import BPF

        if not 1 <= max_ports <= 65536:
            raise ValueError("max_ports must be 1..65536 (slots are u16)")
        if not 1 <= max_members <= 65535:
            raise ValueError("max_members must be 1..65535")
        if max_groups * max_members >= 2**32:
            raise ValueError("max_groups * max_members must fit in u32")
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
        ]
        if debug:
            self.cflags.append("-DRAILAB_DEBUG=1")   # bpf_trace_printk on every drop
        t0 = time.monotonic()
        self._bpf = BPF(src_file=str(SWITCH_C).encode(), cflags=self.cflags)
        self._fn = self._bpf.load_func(PROG_NAME.encode(), BPF.XDP)
        self.compile_seconds = time.monotonic() - t0
        self.prog_fd: int = self._fn.fd
        # XDP_PASS-only program from the same object, for the host end of switch links
        self.pass_prog_fd: int = self._bpf.load_func(b"xdp_pass", BPF.XDP).fd
        self._fds = {name: self._bpf[name.encode()].map_fd for name in abi.MAPS}
        self._ncpus = _possible_cpus()
        # shadow state (the maps are the truth for the data path; this is for the API)
        self._ports: dict[int, abi.PortInfo] = {}
        self._slot_owner: dict[int, int] = {}
        self._groups: dict[int, tuple[list[tuple[int, bytes]], int, int]] = {}
        self._local_refs: dict[tuple[int, int], set[int]] = {}
        self._routes: dict[tuple[int, ipaddress.IPv4Network], int] = {}
        self._closed = False

    # ------------------------------------------------------------------ map I/O
    def _update(self, name: str, key, value) -> None:
        ret = _lib().bpf_update_elem(self._fds[name], ct.byref(key), ct.byref(value), 0)
        if ret != 0:
            err = -ret if ret < 0 and ret != -1 else ct.get_errno()
            if err == errno.E2BIG or err == errno.ENOSPC:
                raise DataplaneError(f"BPF map {name} is full (raise its max_* size)")
            raise DataplaneError(f"BPF map {name} update failed: {os.strerror(err)}")

    def _lookup(self, name: str, key, value) -> bool:
        return _lib().bpf_lookup_elem(self._fds[name], ct.byref(key), ct.byref(value)) == 0

    def _delete(self, name: str, key) -> bool:
        return _lib().bpf_delete_elem(self._fds[name], ct.byref(key)) == 0

    def _percpu(self, name: str, index: int, leaf: type) -> list:
        buf = (leaf * self._ncpus)()
        if not self._lookup(name, ct.c_uint32(index), buf):
            raise DataplaneError(f"BPF map {name}: no entry {index}")
        return list(buf)

    def _zero_percpu(self, name: str, index: int, leaf: type) -> None:
        self._update(name, ct.c_uint32(index), (leaf * self._ncpus)())

    # ------------------------------------------------------------------ lifecycle
    def pin(self, directory: str) -> None:
        """Pin the program (`xdp_switch`) and every map (by its name) under directory.

        directory must be on a bpffs; if it is under /sys/fs/bpf and nothing is
        mounted there, bpffs is mounted first. The directory is created.
        """
        directory = os.path.abspath(directory)
        _ensure_bpffs(directory)
        os.makedirs(directory, exist_ok=True)
        from dataplane.progtest import obj_pin
        names = [PROG_NAME, "xdp_pass", *abi.MAPS]
        taken = [n for n in names if os.path.lexists(os.path.join(directory, n))]
        if taken:
            raise DataplaneError(f"{directory} already has pinned objects ({', '.join(taken)})")
        obj_pin(self.prog_fd, os.path.join(directory, PROG_NAME))
        obj_pin(self.pass_prog_fd, os.path.join(directory, "xdp_pass"))
        for name, fd in self._fds.items():
            obj_pin(fd, os.path.join(directory, name))

    @staticmethod
    def unpin(directory: str) -> None:
        """Remove what pin() created in directory, then the directory if it is empty."""
        for name in (PROG_NAME, "xdp_pass", *abi.MAPS):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass
        try:
            os.rmdir(directory)
        except (FileNotFoundError, OSError):
            pass

    def close(self) -> None:
        """Release the bcc object and our fds. Attached XDP programs stay attached."""
        if not self._closed:
            self._closed = True
            self._bpf.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ switches / ports
    def set_switch(self, switch_id: int, *, hash_seed: int, hash_fields=None) -> None:
        """Per-switch ECMP seed and default hash fields (names or HASH_F_* flags; None = 5-tuple)."""
        self._check_switch(switch_id)
        cfg = abi.SwitchCfg(hash_seed=hash_seed & 0xFFFFFFFF, hash_fields=_hash_fields(hash_fields))
        self._update("switches", ct.c_uint32(switch_id), cfg)

    def set_port(self, ifindex: int, *, switch_id: int, slot: int, mac: bytes | str,
                 speed_bps: int = 0, lbn: int = 0, proxy_arp: bool = False,
                 up: bool = True, arp_reply: str = "redirect") -> None:
        """Declare ifindex a port of switch_id. slot: lab-unique counter index < max_ports.

        lbn: this ingress port's LBN value. proxy_arp: answer ARP for any routed target.
        arp_reply: 'redirect' (default; back out of this port via bpf_redirect, works when
        the peer veth has GRO on) or 'tx' (XDP_TX; on veth the peer then needs an XDP
        program, e.g. attach pass_prog_fd to it)."""
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
        flags = ((0 if up else abi.PORT_F_DOWN) | (abi.PORT_F_PROXY_ARP if proxy_arp else 0)
                 | (abi.PORT_F_ARP_XDP_TX if arp_reply == "tx" else 0))
        info = abi.PortInfo(switch_id=switch_id, slot=slot, flags=flags, lbn=lbn & 0xFFFF,
                            speed_bps=speed_bps)
        info.mac[:] = list(abi.mac_bytes(mac))
        if old is None or old.slot != slot:
            self._zero_percpu("port_stats", slot, abi.PortStats)
        self._update("ports", ct.c_uint32(ifindex), info)
        if old is not None and old.slot != slot:
            self._slot_owner.pop(old.slot, None)
        self._slot_owner[slot] = ifindex
        self._ports[ifindex] = info
        # members egressing here carry this port's MAC and slot
        for gid, (members, mode, fields) in list(self._groups.items()):
            if any(ifx == ifindex for ifx, _ in members):
                self._write_group(gid, members, mode, fields)

    def set_port_state(self, ifindex: int, up: bool) -> None:
        """Administratively up/down; a down port drops what it receives (reason port_down)."""
        info = self._port(ifindex)
        info.flags = (info.flags & ~abi.PORT_F_DOWN) | (0 if up else abi.PORT_F_DOWN)
        self._update("ports", ct.c_uint32(ifindex), info)

    def del_port(self, ifindex: int) -> None:
        info = self._ports.pop(ifindex, None)
        if info is None:
            return
        self._delete("ports", ct.c_uint32(ifindex))
        self._slot_owner.pop(info.slot, None)

    def add_address(self, switch_id: int, ifindex: int, ip: str) -> None:
        """The switch owns ip on that port: answer ARP for it there, accept IPv4 to it locally."""
        self._check_switch(switch_id)
        addr = _ip4(ip)
        port = self._ports.get(ifindex)
        if port is not None and port.switch_id != switch_id:
            raise DataplaneError(f"ifindex {ifindex} is a port of switch {port.switch_id}, not {switch_id}")
        be = abi.ip_be(addr)
        self._update("port_addrs", abi.PortAddrKey(ifindex=ifindex, ip=be), ct.c_uint32(0))
        refs = self._local_refs.setdefault((switch_id, be), set())
        refs.add(ifindex)
        self._update("local_addrs", abi.LocalAddrKey(switch_id=switch_id, ip=be), ct.c_uint32(len(refs)))

    def del_address(self, switch_id: int, ifindex: int, ip: str) -> None:
        be = abi.ip_be(_ip4(ip))
        self._delete("port_addrs", abi.PortAddrKey(ifindex=ifindex, ip=be))
        refs = self._local_refs.get((switch_id, be), set())
        refs.discard(ifindex)
        key = abi.LocalAddrKey(switch_id=switch_id, ip=be)
        if refs:
            self._update("local_addrs", key, ct.c_uint32(len(refs)))
        else:
            self._local_refs.pop((switch_id, be), None)
            self._delete("local_addrs", key)

    # ------------------------------------------------------------------ groups / routes
    def set_group(self, group_id: int, members: list[tuple[int, str]], *, mode: str | int = "ecmp",
                  hash_fields=None) -> None:
        """Next-hop group: members are (egress ifindex, next-hop MAC); the src MAC and
        counter slot come from the egress port (set_port first). mode: 'ecmp' (default),
        'lbn', 'spray_random'. hash_fields: names/flags, None = the switch's default."""
        self._check_group(group_id)
        if len(members) > self.max_members:
            raise DataplaneError(f"group {group_id}: {len(members)} members > max_members {self.max_members}")
        mode_v = abi.LB_MODES.get(mode) if isinstance(mode, str) else mode
        if mode_v is None:
            raise ValueError(f"unknown group mode {mode!r}; known: {sorted(abi.LB_MODES)}")
        norm = []
        for ifindex, mac in members:
            if ifindex not in self._ports:
                raise DataplaneError(f"group {group_id}: egress ifindex {ifindex} is not a port (set_port first)")
            norm.append((int(ifindex), abi.mac_bytes(mac)))
        self._write_group(group_id, norm, mode_v, _hash_fields(hash_fields))

    def _write_group(self, gid: int, members: list[tuple[int, bytes]], mode: int, fields: int) -> None:
        old = self._groups.get(gid)
        old_n = len(old[0]) if old else 0
        hdr = abi.Group(mode=mode, n_members=len(members), hash_fields=fields)
        base = gid * self.max_members
        shrink = len(members) < old_n
        if shrink:   # stop using the tail before clearing it
            self._update("groups", ct.c_uint32(gid), hdr)
        for i, (ifindex, dmac) in enumerate(members):
            port = self._ports[ifindex]
            m = abi.Member(ifindex=ifindex, egress_slot=port.slot)
            m.dmac[:] = list(dmac)
            m.smac[:] = list(port.mac)
            self._update("members", ct.c_uint32(base + i), m)
        for i in range(len(members), max(old_n, len(members))):
            self._update("members", ct.c_uint32(base + i), abi.Member())
        if old is None or [ifx for ifx, _ in old[0]] != [ifx for ifx, _ in members]:
            for i in range(max(old_n, len(members))):
                self._zero_percpu("member_stats", base + i, abi.PktCount)
        if not shrink:
            self._update("groups", ct.c_uint32(gid), hdr)
        self._groups[gid] = (members, mode, fields)

    def del_group(self, group_id: int) -> None:
        if group_id in self._groups:
            self._write_group(group_id, [], 0, 0)
            del self._groups[group_id]

    def add_route(self, switch_id: int, prefix: str, group_id: int) -> None:
        """Route prefix ('10.0.1.0/24'; host bits are masked) of switch_id to group_id."""
        self._check_switch(switch_id)
        self._check_group(group_id)
        net = ipaddress.IPv4Network(prefix, strict=False)
        key = self._route_key(switch_id, net)
        self._update("routes", key, abi.RouteVal(group_id=group_id))
        self._routes[(switch_id, net)] = group_id

    def del_route(self, switch_id: int, prefix: str) -> bool:
        """Remove a route; returns False if there was none."""
        net = ipaddress.IPv4Network(prefix, strict=False)
        self._routes.pop((switch_id, net), None)
        return self._delete("routes", self._route_key(switch_id, net))

    def lookup_route(self, switch_id: int, ip: str) -> int | None:
        """Longest-prefix match as the data plane does it: group id or None."""
        key = abi.RouteKey(prefixlen=64, switch_id_be=abi.u32_be(switch_id), dst=abi.ip_be(_ip4(ip)))
        val = abi.RouteVal()
        return val.group_id if self._lookup("routes", key, val) else None

    def routes(self, switch_id: int) -> dict[str, int]:
        return {str(net): gid for (sw, net), gid in self._routes.items() if sw == switch_id}

    @staticmethod
    def _route_key(switch_id: int, net: ipaddress.IPv4Network) -> abi.RouteKey:
        return abi.RouteKey(prefixlen=32 + net.prefixlen, switch_id_be=abi.u32_be(switch_id),
                            dst=abi.ip_be(net.network_address))

    # ------------------------------------------------------------------ counters
    def port_counters(self, ifindex: int) -> dict:
        """rx_packets, rx_bytes, tx_packets, tx_bytes, drops: {reason: n} (summed over CPUs)."""
        port = self._port(ifindex)
        per_cpu = self._percpu("port_stats", port.slot, abi.PortStats)
        out = {f: sum(getattr(s, f) for s in per_cpu)
               for f in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes")}
        out["drops"] = {name: sum(s.drops[r] for s in per_cpu) for r, name in abi.DROP_REASONS.items()}
        return out

    def member_counters(self, group_id: int) -> list[dict]:
        """Per current member: ifindex, packets, bytes."""
        self._check_group(group_id)
        members = self._groups.get(group_id, ([], 0, 0))[0]
        out = []
        for i, (ifindex, _) in enumerate(members):
            per_cpu = self._percpu("member_stats", group_id * self.max_members + i, abi.PktCount)
            out.append({"ifindex": ifindex, "packets": sum(c.packets for c in per_cpu),
                        "bytes": sum(c.bytes for c in per_cpu)})
        return out

    def verdict_counters(self) -> dict:
        """{verdict: {packets, bytes}} for aborted, drop, pass, tx, redirect (all switches)."""
        out = {}
        for action, name in abi.XDP_ACTIONS.items():
            per_cpu = self._percpu("verdict_stats", action, abi.PktCount)
            out[name] = {"packets": sum(c.packets for c in per_cpu), "bytes": sum(c.bytes for c in per_cpu)}
        return out

    def drop_counters(self) -> dict:
        """{reason: packets} over all ports (includes unknown_port, counted only here)."""
        return {name: sum(self._percpu("drop_stats", r, ct.c_uint64))
                for r, name in abi.DROP_REASONS.items()}

    # ------------------------------------------------------------------ helpers
    def _port(self, ifindex: int) -> abi.PortInfo:
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
def _mount_fstype(path: str) -> str | None:
    """fstype of the mount that holds path (longest mount-point prefix)."""
    best, fstype = "", None
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            mnt, typ = parts[1].replace("\\040", " "), parts[2]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, fstype = mnt, typ
    return fstype


def _ensure_bpffs(directory: str) -> None:
    if _mount_fstype(directory) == "bpf":
        return
    if directory == BPFFS_ROOT or directory.startswith(BPFFS_ROOT + "/"):
        if _mount_fstype(BPFFS_ROOT) != "bpf":
            libc = ct.CDLL(None, use_errno=True)
            if libc.mount(b"bpf", BPFFS_ROOT.encode(), b"bpf", 0, b"mode=0700") != 0:
                err = ct.get_errno()
                raise DataplaneError(f"cannot mount bpffs on {BPFFS_ROOT}: {os.strerror(err)}")
        return
    raise DataplaneError(f"{directory} is not on a bpf filesystem")


# ---------------------------------------------------------------------- attach / detach
def _xdp_nla(fd: int, flags: int) -> dict:
    return {"attrs": [("IFLA_XDP_FD", fd), ("IFLA_XDP_FLAGS", flags)]}


def _ipr_in(netns: str | None):
    from pyroute2 import IPRoute
    with in_netns(netns):   # the netlink socket stays bound to the netns it was opened in
        return IPRoute()


def attached_xdp(netns: str | None, ifindex: int) -> tuple[str | None, int]:
    """(mode, prog_id) of the XDP program on ifindex: mode 'drv'/'generic'/... or None."""
    ipr = _ipr_in(netns)
    try:
        link = ipr.link("get", index=ifindex)[0]
    finally:
        ipr.close()
    xdp = link.get_attr("IFLA_XDP")
    if xdp is None:
        return None, 0
    mode = xdp.get_attr("IFLA_XDP_ATTACHED")
    prog_id = xdp.get_attr("IFLA_XDP_PROG_ID") or 0
    return {"xdp": "drv", "xdpgeneric": "generic", "xdpoffload": "offload",
            "xdpmulti": "multi"}.get(mode, mode), prog_id


def attach_xdp(netns: str, ifindex: int, prog_fd: int, *, mode: str = "drv") -> str:
    """Attach prog_fd to ifindex in netns over netlink (IFLA_XDP); replaces any program.

    mode 'drv' (native; veth supports it) falls back to 'generic' only if the
    driver attach fails. Returns the mode used.
    """
    from pyroute2.netlink.exceptions import NetlinkError
    if mode not in _XDP_MODE_FLAGS:
        raise ValueError(f"unknown XDP mode {mode!r}")
    ipr = _ipr_in(netns)
    try:
        try:
            ipr.link("set", index=ifindex, xdp=_xdp_nla(prog_fd, _XDP_MODE_FLAGS[mode]))
            return "generic" if _XDP_MODE_FLAGS[mode] == XDP_FLAGS_SKB_MODE else "drv"
        except NetlinkError as e:
            if _XDP_MODE_FLAGS[mode] != XDP_FLAGS_DRV_MODE:
                raise DataplaneError(f"XDP attach to ifindex {ifindex} in {netns}: {e}") from None
            first = e
        try:
            ipr.link("set", index=ifindex, xdp=_xdp_nla(prog_fd, XDP_FLAGS_SKB_MODE))
            return "generic"
        except NetlinkError as e:
            raise DataplaneError(f"XDP attach to ifindex {ifindex} in {netns}: drv: {first}; generic: {e}") from None
    finally:
        ipr.close()


def detach_xdp(netns: str, ifindex: int) -> None:
    """Detach whatever XDP program (drv or generic) is on ifindex; no-op if none."""
    mode, _ = attached_xdp(netns, ifindex)
    if mode is None:
        return
    flags = XDP_FLAGS_SKB_MODE if mode == "generic" else XDP_FLAGS_DRV_MODE
    ipr = _ipr_in(netns)
    try:
        ipr.link("set", index=ifindex, xdp=_xdp_nla(-1, flags))
    finally:
        ipr.close()
