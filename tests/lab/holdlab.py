"""Not collected by the suite (no test_ prefix): the lab test that tests/lab/test_sweeper.py
runs in a pytest session of its own and kills with SIGKILL while it holds its lab."""
from __future__ import annotations

import sys

from .conftest import lab_fixture

lab = lab_fixture("clos2", "held")


def test_holds_its_lab_until_killed(lab):
    print(f"deployed {lab.name}", flush=True)
    sys.stdin.readline()      # the killer never writes: SIGKILL ends the wait
