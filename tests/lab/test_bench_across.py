"""`railab bench fabric --across-machines` as a user runs it, with short measurements: the
clos2 lab split over two emulated machines, the rate within one machine next to the rate
across a cut link (and through the other machine's spine) in one JSON report, and nothing
of the lab or the machines left afterwards. Needs Docker, containerlab and railab's
images (scripts/setup.sh); CI must have them (clabtools.require)."""
from __future__ import annotations

import json

from dataplane.runtime import containerlab, emulated, lifecycle
from dataplane.runtime import netns as rt

from . import clabtools
from .conftest import railab

# what the bench names its lab and machines: bfab-m-<tag>, rlm-<tag>-<host>, rlu-<tag>
BENCH_NAMES = ("bfab-m-", "clab-bfab-m-", "rlm-", "rlu-")


def _bench_made() -> set[str]:
    return {n for n in rt.list_netns() + lifecycle.all_labs() if n.startswith(BENCH_NAMES)}


def test_across_machines_reports_within_and_across_rows_and_leaves_nothing():
    clabtools.require([containerlab.node_image()])
    before = _bench_made()
    try:
        proc = railab("bench", "fabric", "--across-machines", "--duration", "0.3", "--repeat", "1",
                      "--json", timeout=120)
    except AssertionError as err:
        # a failed bench removes its lab and machines too: say what it left, if anything
        raise AssertionError(f"{err}\nleft behind: {sorted(_bench_made() - before)}") from None
    assert _bench_made() - before == set()
    result = json.loads(proc.stdout)
    rows = {r["row"]: r for r in result["rows"]}
    assert list(rows) == ["within", "cut", "cut2"]
    assert [r["cut_links"] for r in rows.values()] == [0, 1, 2]
    assert all(r["pps"] > 0 and min(r["pps_runs"]) > 0 for r in rows.values()), rows
    assert rows["within"]["ratio"] == 1.0 and rows["cut"]["ratio"] > 0
    machines = result["machines"]
    assert set(machines) == {"a", "b"}
    hosts = {h: (m["netns"], m["address"]) for h, m in machines.items()}
    assert clabtools.split_leftovers(result["lab_name"], hosts) == []
    assert emulated.leftover_devices(result["machine_tag"]) == []
