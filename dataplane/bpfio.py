"""Generic BPF plumbing, apart from the switch's table logic (dataplane.switch_dataplane),
as katran keeps BpfAdapter apart from its load balancer: map I/O by name through libbpf,
per-CPU reads, pinning on a bpffs, and XDP attach/detach over netlink in any namespace.
Nothing here knows what a route or a group is."""
from __future__ import annotations

import ctypes as ct
import errno
import os

from pyroute2 import IPRoute
from pyroute2.netlink import NLA_F_NESTED, NLM_F_ACK, NLM_F_REQUEST, nla, nlmsg
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_SETLINK

from dataplane.errors import RuntimeStateError
from dataplane.netns_util import in_netns
from dataplane.progtest import obj_pin

BPFFS_ROOT = "/sys/fs/bpf"
BPF_F_LOCK = 4                # map update: take the value's bpf_spin_lock

XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
_XDP_MODE_FLAGS = {"drv": XDP_FLAGS_DRV_MODE, "native": XDP_FLAGS_DRV_MODE,
                   "generic": XDP_FLAGS_SKB_MODE, "skb": XDP_FLAGS_SKB_MODE}


class DataplaneError(RuntimeStateError):
    """The data plane cannot do what was asked (bad id, unknown port, map full, ...)."""


# bcc is imported where it is used, on purpose: it is only on root/test machines, and the
# CLI, the unit tests and the agent's protocol must load without it.
def _lib():
    from bcc.libbcc import lib
    return lib


def _possible_cpus() -> int:
    from bcc.utils import get_possible_cpus
    return len(get_possible_cpus())


class BpfMaps:
    """A loaded object's maps, by name: update, lookup, delete, per-CPU read and reset,
    pinning."""

    def __init__(self, fds: dict[str, int]):
        self.fds = fds
        self.ncpus = _possible_cpus()

    def update(self, name: str, key, value, flags: int = 0) -> None:
        ret = _lib().bpf_update_elem(self.fds[name], ct.byref(key), ct.byref(value), flags)
        if ret != 0:
            err = -ret if ret < 0 and ret != -1 else ct.get_errno()
            if err == errno.E2BIG or err == errno.ENOSPC:
                raise DataplaneError(f"BPF map {name} is full (raise its max_* size)")
            raise DataplaneError(f"BPF map {name} update failed: {os.strerror(err)}")

    def lookup(self, name: str, key, value) -> bool:
        return _lib().bpf_lookup_elem(self.fds[name], ct.byref(key), ct.byref(value)) == 0

    def delete(self, name: str, key) -> bool:
        return _lib().bpf_delete_elem(self.fds[name], ct.byref(key)) == 0

    def percpu(self, name: str, index: int, leaf: type) -> list:
        buf = (leaf * self.ncpus)()
        if not self.lookup(name, ct.c_uint32(index), buf):
            raise DataplaneError(f"BPF map {name}: no entry {index}")
        return list(buf)

    def zero_percpu(self, name: str, index: int, leaf: type) -> None:
        self.update(name, ct.c_uint32(index), (leaf * self.ncpus)())

    def pin(self, directory: str, progs: dict[str, int]) -> None:
        """Pin the programs (name -> fd, in that order) and every map (by its name) under
        directory. directory must be on a bpffs; if it is under /sys/fs/bpf and nothing
        is mounted there, bpffs is mounted first. The directory is created."""
        directory = os.path.abspath(directory)
        _ensure_bpffs(directory)
        os.makedirs(directory, exist_ok=True)
        names = [*progs, *self.fds]
        taken = [n for n in names if os.path.lexists(os.path.join(directory, n))]
        if taken:
            raise DataplaneError(f"{directory} already has pinned objects ({', '.join(taken)})")
        for name, fd in [*progs.items(), *self.fds.items()]:
            obj_pin(fd, os.path.join(directory, name))

    @staticmethod
    def unpin(directory: str, names) -> None:
        """Remove the pinned names from directory, then the directory if it is empty."""
        for name in names:
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass
        try:
            os.rmdir(directory)
        except (FileNotFoundError, OSError):
            pass


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
_XDP_SETLINK = None


def _xdp_setlink_class():
    """An RTM_SETLINK message that carries only IFLA_XDP, with the kernel's own types.

    pyroute2 0.7 (Debian 12) encodes IFLA_XDP_FLAGS as a 2-byte big-endian field, which
    the kernel refuses with ERANGE, so the attribute layout is spelled out here. It derives
    from nlmsg, not ifinfmsg: a subclass of ifinfmsg would inherit ifinfmsg's attribute
    tables once pyroute2 has compiled them (after any link dump), and with them the bug."""
    global _XDP_SETLINK
    if _XDP_SETLINK is None:
        class xdp_setlink(nlmsg):
            prefix = "IFLA_"
            fields = (("family", "B"), ("__align", "x"), ("ifi_type", "H"), ("index", "i"),
                      ("flags", "I"), ("change", "I"))   # struct ifinfomsg
            nla_map = ((43, "IFLA_XDP", "xdp"),)        # IFLA_XDP in linux/if_link.h

            class xdp(nla):
                nla_flags = NLA_F_NESTED
                nla_map = ((1, "IFLA_XDP_FD", "int32"), (3, "IFLA_XDP_FLAGS", "uint32"))

        _XDP_SETLINK = xdp_setlink
    return _XDP_SETLINK


def _set_xdp(ipr, ifindex: int, fd: int, flags: int) -> None:
    msg = _xdp_setlink_class()()
    msg["index"] = ifindex
    msg["attrs"] = [("IFLA_XDP", {"attrs": [("IFLA_XDP_FD", fd), ("IFLA_XDP_FLAGS", flags)]})]
    # tuple(): some pyroute2 versions answer with a generator that sends nothing until consumed
    tuple(ipr.nlm_request(msg, msg_type=RTM_SETLINK, msg_flags=NLM_F_REQUEST | NLM_F_ACK))


def _ipr_in(netns: str | None):
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
    if mode not in _XDP_MODE_FLAGS:
        raise ValueError(f"unknown XDP mode {mode!r}")
    ipr = _ipr_in(netns)
    try:
        try:
            _set_xdp(ipr, ifindex, prog_fd, _XDP_MODE_FLAGS[mode])
            return "generic" if _XDP_MODE_FLAGS[mode] == XDP_FLAGS_SKB_MODE else "drv"
        except NetlinkError as e:
            if _XDP_MODE_FLAGS[mode] != XDP_FLAGS_DRV_MODE:
                raise DataplaneError(f"XDP attach to ifindex {ifindex} in {netns}: {e}") from None
            first = e
        try:
            _set_xdp(ipr, ifindex, prog_fd, XDP_FLAGS_SKB_MODE)
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
        _set_xdp(ipr, ifindex, -1, flags)
    finally:
        ipr.close()
