"""A lab test killed with SIGKILL leaves its lab behind; the next session of the suite
starts by removing it (tests/sweeper.py), and touches nothing a live run owns."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import shutil

from dataplane.runtime import lifecycle, state

from .. import sweeper
from .conftest import ROOT, leftovers, shipped, spec_from, unique_name


def _pytest(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *args],
                            cwd=ROOT, text=True, **kw)


def test_the_next_session_removes_what_a_killed_one_left():
    victim = _pytest("tests/lab/holdlab.py", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        name = None
        for line in victim.stdout:        # until the lab is up (or the session ended)
            if "deployed " in line:
                name = line.split("deployed ", 1)[1].split()[0]
                break
        assert name, "the held lab test did not deploy"
        assert name.startswith(f"rlt{victim.pid}-")
        # a lab of a run that is still alive (this one's child) is not swept
        assert not any(name in r for r in sweeper.sweep())
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
    finally:
        if victim.poll() is None:
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait()
    assert leftovers(name), "SIGKILL should have left the lab behind"
    # the next session, of any tier, starts by sweeping
    nxt = _pytest("tests/unit/test_units.py", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = nxt.communicate(timeout=300)
    assert nxt.returncode == 0, out
    assert f"lab {name}" in out
    assert leftovers(name) == []


def test_a_lab_whose_state_went_is_still_found_and_destroyed():
    """`railab destroy --all` (lifecycle.all_labs) finds a lab by its running agent after
    its state directory and pins are gone, and destroy removes all of it."""
    spec = spec_from(shipped("clos2"), unique_name("nostate"))
    lifecycle.deploy(spec)
    try:
        shutil.rmtree(state.state_dir(spec.name))
        shutil.rmtree(state.pin_dir(spec.name), ignore_errors=True)
        assert spec.name not in state.known_labs()
        assert spec.name in lifecycle.all_labs()
    finally:
        lifecycle.destroy(spec.name)
    assert leftovers(spec.name, spec) == []


def test_emulated_machines_of_a_dead_session_are_swept_and_a_live_ones_kept():
    """The split-lab tests' machines (namespaces and the root's underlay end) carry the pid
    of the session that made them: a killed session's go at the next sweep."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    made = {}
    for owner in (dead, str(os.getpid())):
        made[owner] = (f"rlm-{owner}x-a", f"rlu{owner}xr")
        subprocess.run(["ip", "netns", "add", made[owner][0]], check=True)
        subprocess.run(["ip", "link", "add", made[owner][1], "type", "veth", "peer", "name",
                        f"rlp{owner}x"[:15]], check=True)
    try:
        removed = sweeper.sweep()
        assert f"netns {made[dead][0]}" in removed and f"device {made[dead][1]}" in removed
        assert not os.path.exists(f"/run/netns/{made[dead][0]}")
        assert not os.path.exists(f"/sys/class/net/{made[dead][1]}")
        mine = str(os.getpid())        # this session is alive: its machines stay
        assert os.path.exists(f"/run/netns/{made[mine][0]}") and os.path.exists(f"/sys/class/net/{made[mine][1]}")
    finally:
        for ns, link in made.values():
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
            subprocess.run(["ip", "link", "delete", link], capture_output=True)
