"""Runs last (file order): the fixtures of the other modules left nothing behind."""

from __future__ import annotations

import os

from .conftest import PIN_ROOT, PREFIX, sh


def test_no_test_namespaces_left():
    names = [line.split()[0] for line in sh(["ip", "netns", "list"]).stdout.splitlines() if line.strip()]
    assert [n for n in names if n.startswith(PREFIX)] == []


def test_no_pins_left():
    assert not os.path.exists(PIN_ROOT)
