"""The suite's sweeper: labs, namespaces and pins that a killed run of the suite left
behind are removed when the next session starts (tests/conftest.py), and whatever this
session itself left is removed, and reported, when it ends.

It touches only what the suite names itself: every such name carries the pid of the pytest
process that made it (`rlt<pid>-...`, `tag()`), so the labs of another run still going on
are left alone while that run lives.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from dataplane.runtime import lifecycle
from dataplane.runtime import netns as rt
from dataplane.runtime.labspec import NETNS_PREFIX

_OWNED = re.compile(r"^rlt(\d+)(?:-|$)")
# emulated machines (dataplane.runtime.emulated) made under machines_tag(): their
# namespaces rlm-<pid><letter>-<host> and rlu-<pid><letter>, the root's end rlu<pid><letter>r
_MACHINE_NETNS = re.compile(r"^rl[mu]-(\d+)[a-z](?:-|$)")
_MACHINE_LINK = re.compile(r"^rlu(\d+)[a-z]r$")
BPFFS = Path("/sys/fs/bpf")


def tag(pid: int | None = None) -> str:
    """The prefix of every lab, namespace and pin directory a session makes."""
    return f"rlt{os.getpid() if pid is None else pid}"


def machines_tag(letter: str) -> str:
    """The tag of a set of emulated machines this session makes: the pid, so that a killed
    session's are swept, and a letter (not a digit: it would read as part of the pid)."""
    return f"{os.getpid()}{letter}"


def _swept(name: str, include_own: bool, owned: re.Pattern = _OWNED) -> bool:
    m = owned.match(name)
    if not m:
        return False
    pid = int(m.group(1))
    return (include_own and pid == os.getpid()) or (pid != os.getpid() and not lifecycle.pid_alive(pid))


def sweep(include_own: bool = False) -> list[str]:
    """Remove what runs of the suite that are gone left (and, with include_own, what this
    one left); the names of what was removed."""
    removed = []
    for lab in lifecycle.all_labs():
        if _swept(lab, include_own) and lifecycle.destroy(lab):
            removed.append(f"lab {lab}")
    stray = [n for n in rt.list_netns()
             if _swept(n[len(NETNS_PREFIX):] if n.startswith(NETNS_PREFIX) else n, include_own)]
    lifecycle.destroy_namespaces(stray)
    removed += [f"netns {n}" for n in stray]
    # emulated machines after the labs on them: their namespaces held the labs' parts
    for ns in rt.list_netns():
        if _swept(ns, include_own, _MACHINE_NETNS):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
            removed.append(f"netns {ns}")
    for link in os.listdir("/sys/class/net"):
        if _swept(link, include_own, _MACHINE_LINK):
            subprocess.run(["ip", "link", "delete", link], capture_output=True)
            removed.append(f"device {link}")
    for pins in sorted(BPFFS.glob("rlt*")) if BPFFS.is_dir() else []:
        if _swept(pins.name, include_own):
            shutil.rmtree(pins, ignore_errors=True)
            removed.append(f"pins {pins}")
    return removed
