"""Generic BPF plumbing, apart from the switch's table logic (dataplane.xdp.switch),
as katran keeps BpfAdapter apart from its load balancer: map I/O by name through libbpf,
per-CPU reads, pinning on a bpffs, and XDP attach/detach over netlink in any namespace.
Nothing here knows what a route or a group is."""
from __future__ import annotations

import ctypes as ct
import errno
import os
from pathlib import Path


from dataplane.errors import RuntimeStateError
from dataplane.kernel import rtnl
from dataplane.kernel.netns import in_netns
from dataplane.xdp import abi
from dataplane.xdp.progtest import obj_pin

BPFFS_ROOT = "/sys/fs/bpf"
BPF_F_LOCK = 4                # map update: take the value's bpf_spin_lock

XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
_XDP_MODE_FLAGS = {"drv": XDP_FLAGS_DRV_MODE, "native": XDP_FLAGS_DRV_MODE,
                   "generic": XDP_FLAGS_SKB_MODE, "skb": XDP_FLAGS_SKB_MODE}


class DataplaneError(RuntimeStateError):
    """The data plane cannot do what was asked (bad id, unknown port, map full, ...)."""


_LIB = None


def _lib():
    """bcc's map calls from libbcc_bpf (the small libbpf part of bcc), loaded on first use:
    it is only on root/test machines, and loading bcc's whole libbcc (LLVM inside) costs
    a deploy about a second that a warm start (dataplane.xdp.bpfcache) does not need."""
    global _LIB
    if _LIB is None:
        lib = ct.CDLL("libbcc_bpf.so.0", use_errno=True)
        for name in ("bpf_lookup_elem", "bpf_get_next_key"):
            getattr(lib, name).argtypes = [ct.c_int, ct.c_void_p, ct.c_void_p]
            getattr(lib, name).restype = ct.c_int
        lib.bpf_update_elem.argtypes = [ct.c_int, ct.c_void_p, ct.c_void_p, ct.c_ulonglong]
        lib.bpf_update_elem.restype = ct.c_int
        lib.bpf_delete_elem.argtypes = [ct.c_int, ct.c_void_p]
        lib.bpf_delete_elem.restype = ct.c_int
        # (fd, in_batch, out_batch, keys, values, count): BPF_MAP_LOOKUP_BATCH, Linux 5.6+
        lib.bpf_lookup_batch.argtypes = [ct.c_int, ct.c_void_p, ct.c_void_p, ct.c_void_p, ct.c_void_p,
                                         ct.c_void_p]
        lib.bpf_lookup_batch.restype = ct.c_int
        _LIB = lib
    return _LIB


def _possible_cpus() -> int:
    """How many CPUs per-CPU maps hold values for (the kernel's 'possible' set)."""
    count = 0
    for part in Path("/sys/devices/system/cpu/possible").read_text().strip().split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


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

    def keys(self, name: str) -> list:
        """Every key of a hash-like map now (a list: callers may delete while going through
        it), typed as abi.MAPS says."""
        key_type = abi.MAPS[name][0]
        out, key, prev = [], key_type(), None
        while _lib().bpf_get_next_key(self.fds[name], None if prev is None else ct.byref(prev),
                                      ct.byref(key)) == 0:
            out.append(key)
            prev, key = key, key_type()
        return out

    def items(self, name: str) -> list:
        """(key, value) of every entry still there (see keys)."""
        value_type = abi.MAPS[name][1]
        out = []
        for key in self.keys(name):
            value = value_type()
            if self.lookup(name, key, value):
                out.append((key, value))
        return out

    def percpu(self, name: str, index: int, leaf: type) -> list:
        buf = (leaf * self.ncpus)()
        if not self.lookup(name, ct.c_uint32(index), buf):
            raise DataplaneError(f"BPF map {name}: no entry {index}")
        return list(buf)

    def array_values(self, name: str, count: int, value: type):
        """Entries 0..count-1 of an array map in one BPF_MAP_LOOKUP_BATCH call: a ctypes
        array of `value` (for a per-CPU map, pass a type of ncpus values; the kernel
        rounds each CPU's value to 8 bytes). Falls back to one lookup per entry where
        the kernel has no batch lookup for the map."""
        values = (value * count)()
        if count == 0:
            return values
        keys = (ct.c_uint32 * count)()
        out_batch = ct.c_uint32()
        n = ct.c_uint32(count)
        rc = _lib().bpf_lookup_batch(self.fds[name], None, ct.byref(out_batch), keys, values, ct.byref(n))
        err = ct.get_errno() if rc < 0 else 0
        if rc == 0 or err == errno.ENOENT:      # ENOENT: the read reached the array's end
            if n.value == count:
                return values
            raise DataplaneError(f"BPF map {name}: {n.value} entries, not {count}")
        if err not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            raise DataplaneError(f"BPF map {name} batch lookup failed: {os.strerror(err)}")
        for i in range(count):
            if not self.lookup(name, ct.c_uint32(i), values[i]):
                raise DataplaneError(f"BPF map {name}: no entry {i}")
        return values

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
def _ipr_in(netns: str | None):
    # deferred on purpose: pyroute2 takes 0.5 s to import (several on a busy machine),
    # and the agent's start (which uses only attach) would wait for it on every deploy
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


def attach_xdp_ports(netns: str, ifindexes: list[int], prog_fd: int, *, mode: str = "drv") -> dict[int, str]:
    """Attach prog_fd to every ifindex in netns (replacing any program), one netlink batch
    for all of them. mode 'drv' (native; veth supports it) falls back to 'generic' for a
    port whose driver attach fails. Returns the mode used per ifindex."""
    if mode not in _XDP_MODE_FLAGS:
        raise ValueError(f"unknown XDP mode {mode!r}")
    flags = _XDP_MODE_FLAGS[mode]
    with rtnl.Socket(netns) as sock:
        failed = sock.run([rtnl.xdp(i, prog_fd, flags, f"XDP attach to ifindex {i} in {netns}")
                           for i in ifindexes], keep_going=True)
        used = {i: "generic" if flags == XDP_FLAGS_SKB_MODE else "drv" for i in ifindexes}
        if failed and flags != XDP_FLAGS_DRV_MODE:
            raise DataplaneError(str(failed[0])) from None
        if failed:
            retry = [e.key for e in failed]
            again = sock.run([rtnl.xdp(i, prog_fd, XDP_FLAGS_SKB_MODE, f"XDP attach to ifindex {i} in {netns}")
                              for i in retry], keep_going=True)
            if again:
                raise DataplaneError(f"{failed[0]} (drv); {again[0].text or again[0]} (generic)") from None
            used.update({i: "generic" for i in retry})
    return used


def attach_xdp(netns: str, ifindex: int, prog_fd: int, *, mode: str = "drv") -> str:
    """Attach prog_fd to one ifindex in netns (see attach_xdp_ports). Returns the mode used."""
    return attach_xdp_ports(netns, [ifindex], prog_fd, mode=mode)[ifindex]


def detach_own_xdp(netns: str | None, ports: dict[int, tuple[int, str]]) -> None:
    """Detach our program from each ifindex -> (its fd, the mode attached in), one netlink
    batch; a port whose program is another's (or none) keeps it: the kernel compares the
    attached program with ours atomically (XDP_FLAGS_REPLACE), no read-then-detach race."""
    requests = [rtnl.xdp(i, -1, _XDP_MODE_FLAGS[mode], f"XDP detach from ifindex {i} in {netns}",
                         expected_fd=fd) for i, (fd, mode) in ports.items()]
    failed = [e for e in rtnl.run_in(netns, requests, keep_going=True) if e.code != errno.EEXIST]
    if failed:
        raise DataplaneError(str(failed[0]))


def detach_xdp(netns: str, ifindex: int) -> None:
    """Detach whatever XDP program (drv or generic) is on ifindex; no-op if none."""
    mode, _ = attached_xdp(netns, ifindex)
    if mode is None:
        return
    flags = XDP_FLAGS_SKB_MODE if mode == "generic" else XDP_FLAGS_DRV_MODE
    rtnl.run_in(netns, [rtnl.xdp(ifindex, -1, flags, f"XDP detach from ifindex {ifindex} in {netns}")])
