"""The benches that run trafgen leave no trafgen behind (root only)."""
from __future__ import annotations

import os
import shutil

import pytest

from dataplane.bench.traffic import TRAFGEN, measure_trafgen, veth_pair

pytestmark = pytest.mark.root


def _trafgens_on(ifname: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0]) == b"trafgen" and ifname.encode() in argv:
                pids.append(int(entry))
    return pids


def test_measure_trafgen_stops_the_worker_too():
    assert shutil.which(TRAFGEN), f"{TRAFGEN} is missing (Debian's netsniff-ng; scripts/setup.sh installs it)"
    with veth_pair("rltg") as pair:
        result = measure_trafgen(pair, duration_s=0.3, warmup_s=0.3)
        assert result.get("received", 0) > 0, result
        assert _trafgens_on(pair.tx_if) == []
