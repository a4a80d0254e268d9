"""Test tiers, by directory: every test gets exactly one of the markers `unit`, `bpf` and
`lab` here (registered in pyproject.toml), so `make check` can run `-m "(unit or bpf) and
not slow"` and `make test` everything.

- tests/unit (`unit`) needs nothing;
- tests/bpf (`bpf`) loads BPF programs;
- tests/lab and tests/netns (`lab`) build namespaces and send real traffic through them.

`slow` is set by hand on the statistical multi-run tests. The last two tiers need root
(`root`). They skip on a developer machine without root, naming what is missing, and fail
in CI (CI=true), where they must run.

As root, every session starts by sweeping what killed runs of the suite left behind and
ends by removing, and reporting as an error, anything it left itself (tests/sweeper.py)."""
from __future__ import annotations

import os

import pytest

from . import sweeper

TIERS = {"unit": "unit", "bpf": "bpf", "lab": "lab", "netns": "lab"}
PRIVILEGED_DIRS = ("bpf", "netns", "lab")


def tier_of(item) -> str:
    parts = item.path.relative_to(os.path.dirname(__file__)).parts
    if len(parts) < 2 or parts[0] not in TIERS:
        raise pytest.UsageError(f"{item.nodeid}: a test lives in one of tests/{{{','.join(TIERS)}}}/ "
                                "(the directory gives its tier marker)")
    return TIERS[parts[0]]


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = tier_of(item)
        others = [m.name for m in item.iter_markers() if m.name in set(TIERS.values()) - {tier}]
        if others:
            raise pytest.UsageError(f"{item.nodeid}: tier {tier} (its directory), also marked {others}")
        item.add_marker(getattr(pytest.mark, tier))
        if tier != "unit":
            item.add_marker(pytest.mark.root)
    if os.geteuid() == 0:
        return
    privileged = [i for i in items if tier_of(i) != "unit"]
    if privileged and os.environ.get("CI"):
        raise pytest.UsageError("CI must run as root: the data-plane tests may not be skipped there")
    reason = "needs root (network namespaces, veths and BPF programs); run `sudo make test`"
    for item in privileged:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def _sweep_leftovers():
    """Outermost session fixture: set up first, torn down last, after every lab fixture."""
    if os.geteuid() != 0:
        yield
        return
    earlier = sweeper.sweep()
    if earlier:
        print(f"\nswept what killed runs of the suite left: {', '.join(earlier)}")
    yield
    left = sweeper.sweep(include_own=True)
    assert not left, f"the test session left these behind (now removed): {left}"
