"""Run code in a named network namespace on the current thread.

setns(2) changes only the calling thread's network namespace, so sockets opened
inside the `with` block (netlink, BPF_PROG_TEST_RUN's device lookup, ...) belong
to the target namespace while file descriptors such as BPF program fds stay
valid -- unlike helpers that fork or spawn a process. The original namespace is
restored in `finally`, even if the body raises.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource

CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = "/run/netns"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def netns_path(netns: str) -> str:
    return netns if netns.startswith("/") else os.path.join(NETNS_RUN_DIR, netns)


@contextlib.contextmanager
def in_netns(netns: str | None):
    """Enter network namespace `netns` (name under /run/netns or a path) for the block.

    netns None or "" means: stay where we are.
    """
    if not netns:
        yield
        return
    target = os.open(netns_path(netns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        orig = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except BaseException:
        os.close(target)
        raise
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(orig)
    finally:
        os.close(target)
        os.close(orig)


def room_for_files(count: int) -> None:
    """Raise this process's open-file limit to hold `count` more descriptors (a socket in
    each namespace of a 16,384-GPU lab is 2,432; the usual soft limit is 1,024). Root may
    raise the hard limit too; OSError says what was wanted if it cannot."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = count + 1024
    if soft >= wanted:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, max(hard, wanted)))
    except (ValueError, OSError):
        raise OSError(f"{count} more open files are needed and the limit is {hard} (ulimit -n)") from None


def load_iproute() -> None:
    """Import pyroute2 now, ahead of netlink changes whose time matters (an experiment's
    scheduled faults): the first iproute() would otherwise spend 0.2 s loading it."""
    # deferred: see iproute()
    from pyroute2 import IPRoute  # noqa: F401


def iproute():
    """A pyroute2 IPRoute socket in the calling thread's namespace (use inside in_netns)."""
    # deferred: pyroute2 takes 0.2 s to load, and every `railab` command builds all verbs'
    # parsers, so a top-level import made `railab lb show` and every refused option pay for it
    from pyroute2 import IPRoute
    return IPRoute()
