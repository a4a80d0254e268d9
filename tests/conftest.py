"""Test tiers, split by privilege: tests/unit needs nothing; tests/bpf loads BPF
programs; tests/netns and tests/lab build namespaces. The last three need root. They
skip on a developer machine without root, naming what is missing, and fail in CI
(CI=true), where they must run."""
from __future__ import annotations

import os

import pytest

PRIVILEGED_DIRS = ("bpf", "netns", "lab")


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    privileged = [i for i in items if any(d in i.path.parts for d in PRIVILEGED_DIRS)]
    if privileged and os.environ.get("CI"):
        raise pytest.UsageError("CI must run as root: the data-plane tests may not be skipped there")
    reason = "needs root (network namespaces, veths and BPF programs); run `sudo make test`"
    for item in privileged:
        item.add_marker(pytest.mark.skip(reason=reason))
