"""Fixtures for the XDP data-plane tests (root + bcc).

Every test here is marked `bpf` and `root` (tests/conftest.py). Without root (or without bcc) the
tests are skipped with a reason naming what is missing -- except under CI
(env CI set), where a missing prerequisite is an error: the suite runs as root
there and must never silently skip.

Namespaces and bpffs pins created here carry the prefix PREFIX (pid-based), are
always removed by their fixtures, and `_nothing_left_behind` checks at the end of the
session, after every other fixture is gone, that none is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from dataplane.kernel.netns import in_netns
from dataplane.xdp import progtest

from .. import sweeper

PREFIX = sweeper.tag()
PIN_ROOT = f"/sys/fs/bpf/{PREFIX}"


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, BPF program loading)"
    try:
        import bcc  # noqa: F401
    except ImportError:
        return (f"needs the bcc Python module (Debian python3-bpfcc) visible to {sys.executable}; "
                "create the venv with --system-site-packages")
    if not shutil.which("ip"):
        return "needs iproute2 (`ip`)"
    return None


def pytest_collection_modifyitems(config, items):
    missing = _missing()
    here = os.path.dirname(__file__)
    for item in items:
        if not str(item.fspath).startswith(here):
            continue
        if missing and not os.environ.get("CI"):
            item.add_marker(pytest.mark.skip(reason=missing))
        # under CI a missing prerequisite is not skipped: _ci_must_not_skip fails the test


@pytest.fixture(scope="session", autouse=True)
def _ci_must_not_skip():
    missing = _missing()
    if missing and os.environ.get("CI"):
        pytest.fail(f"tests/bpf in CI: {missing}")


def leftovers() -> list[str]:
    """This session's test namespaces and bpffs pins that still exist."""
    found = []
    if os.path.isdir("/run/netns"):
        found += [f"netns {n}" for n in sorted(os.listdir("/run/netns")) if n.startswith(PREFIX)]
    if os.path.exists(PIN_ROOT):
        found.append(f"pins {PIN_ROOT}")
    return found


@pytest.fixture(scope="session", autouse=True)
def _nothing_left_behind():
    """Set up before any other fixture of tests/bpf (autouse, session scope), so torn down
    after all of them: whatever a module's or the session's fixtures made must be gone by
    then. A leak fails the session (an error at the last test's teardown), whatever order
    the files ran in."""
    yield
    left = leftovers()
    assert not left, f"tests/bpf left these behind: {left}"


def sh(cmd: str | list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    """Run a command (string is split on spaces), capture output, raise with stderr on failure."""
    args = cmd.split() if isinstance(cmd, str) else cmd
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} -> {p.returncode}: {p.stderr.strip()}")
    return p


def add_veths(netns: str, ifindexes) -> None:
    """One veth pair per ifindex in netns: p<ifindex> (that ifindex, the switch port) and
    q<ifindex> (ifindex + 1000)."""
    for ifx in ifindexes:
        sh(["ip", "-n", netns, "link", "add", "name", f"p{ifx}", "index", str(ifx), "type", "veth",
            "peer", "name", f"q{ifx}", "index", str(ifx + 1000)])


def link_mac(netns: str, ifname: str) -> str:
    out = sh(["ip", "-j", "-n", netns, "link", "show", "dev", ifname]).stdout
    return json.loads(out)[0]["address"]


def link_index(netns: str, ifname: str) -> int:
    out = sh(["ip", "-j", "-n", netns, "link", "show", "dev", ifname]).stdout
    return json.loads(out)[0]["ifindex"]


class NetnsFactory:
    """Creates namespaces named PREFIX-<name>; delete_all() removes every one it made."""

    def __init__(self):
        self.made: list[str] = []

    def __call__(self, name: str) -> str:
        full = f"{PREFIX}-{name}"
        sh(["ip", "netns", "add", full])
        self.made.append(full)
        sh(["ip", "-n", full, "link", "set", "lo", "up"])
        return full

    def delete_all(self):
        errors = []
        for ns in reversed(self.made):
            p = sh(["ip", "netns", "del", ns], check=False)
            if p.returncode != 0 and os.path.exists(f"/run/netns/{ns}"):
                errors.append(f"{ns}: {p.stderr.strip()}")
        self.made.clear()
        if errors:
            raise RuntimeError("could not delete namespaces: " + "; ".join(errors))


@contextlib.contextmanager
def switch_bench(dp, make_netns, tag: str, switches: dict[int, int], ports: dict[int, tuple[int, int, str]],
                 others=(), groups=()):
    """A switch under test in the session's data plane: a namespace (made by `make_netns`,
    e.g. the module_netns fixture) holding one veth pair per port with exactly that ifindex
    (and per ifindex in `others`: devices that are no switch port), the switches
    (id -> hash seed) and their ports (ifindex -> (switch id, slot, MAC)) programmed.
    Yields the namespace. Afterwards every route of those switches, the `groups` and the
    ports are gone from the data plane (the namespace goes with make_netns's fixture)."""
    ns = make_netns(tag)
    add_veths(ns, [*ports, *others])
    for sw, seed in switches.items():
        dp.set_switch(sw, hash_seed=seed)
    for ifx, (sw, slot, mac) in ports.items():
        dp.set_port(ifx, switch_id=sw, slot=slot, mac=mac)
    try:
        yield ns
    finally:
        for sw in switches:
            for prefix in list(dp.routes(sw)):
                dp.del_route(sw, prefix)
        for gid in groups:
            dp.del_group(gid)
        for ifx in ports:
            dp.del_port(ifx)


def run_frame(dp, ns: str, frame, ingress: int, repeat: int = 1):
    """The data plane's verdict on `frame` arriving on port `ingress` (BPF_PROG_TEST_RUN
    inside `ns`, where that ifindex exists: the kernel checks ctx->ingress_ifindex there)."""
    with in_netns(ns):
        return progtest.prog_test_run(dp.prog_fd, bytes(frame), ingress_ifindex=ingress, repeat=repeat)


def _netns_factory():
    f = NetnsFactory()
    try:
        yield f
    finally:
        f.delete_all()


netns = pytest.fixture(_netns_factory, name="netns")                          # per test
module_netns = pytest.fixture(_netns_factory, scope="module", name="module_netns")


@pytest.fixture(scope="session")
def dp():
    """The one compiled data plane of the test session (compile once, ~1.5 s)."""
    from dataplane.xdp.switch import SwitchDataplane
    d = SwitchDataplane()
    try:
        yield d
    finally:
        d.close()


@pytest.fixture
def pin_dir():
    """A fresh directory under /sys/fs/bpf/PREFIX/ for pinning; removed afterwards."""
    from dataplane.xdp.switch import SwitchDataplane
    path = os.path.join(PIN_ROOT, "lab")
    try:
        yield path
    finally:
        SwitchDataplane.unpin(path)
        if os.path.isdir(PIN_ROOT):
            for name in os.listdir(PIN_ROOT):   # anything a failed test left behind
                sub = os.path.join(PIN_ROOT, name)
                if os.path.isdir(sub):
                    for f in os.listdir(sub):
                        os.unlink(os.path.join(sub, f))
                    os.rmdir(sub)
                else:
                    os.unlink(sub)
            os.rmdir(PIN_ROOT)
