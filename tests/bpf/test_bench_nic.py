"""`railab bench nic --json`, briefly: its shape and that its numbers are there and positive
(no timing target is asserted: the machine is shared)."""
from __future__ import annotations

import json

from dataplane.cli.main import main


def test_bench_nic_json_shape(capsys):
    assert main(["bench", "nic", "--pps", "5000", "--slow-pps", "2000", "--duration", "0.2",
                 "--unpaced", "0.1", "--round-trips", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bench"] == "nic"
    ack = out["ack_turnaround"]
    for key in ("kernel", "python"):
        assert ack[key]["count"] > 0 and ack[key]["p50_us"] > 0 and ack[key]["max_us"] >= ack[key]["p99_us"]
    rows = out["pacing"]["rows"]
    assert [(r["sender"], r["target_pps"]) for r in rows] == \
        [("engine", 5000), ("python", 5000), ("engine", 2000), ("python", 2000)]
    for r in rows:
        assert r["sent"] > 0 and r["received"] > 0 and r["achieved_pps"] > 0 and r["errors"] == 0
        for kind in ("arrival", "send_stamp"):
            late = r["lateness"][kind]
            assert late["count"] > 0 and 0 <= late["p50_us"] <= late["p99_us"] <= late["max_us"]
    engine_rows = [r for r in rows if r["sender"] == "engine"]
    assert all(r["sent"] == r["scheduled"] and r["engine_lateness_ns"]["count"] == r["sent"] for r in engine_rows)
    unpaced = out["unpaced"]["rows"]
    assert [r["sender"] for r in unpaced] == ["engine", "python", "python-sendmmsg"]
    assert all(r["sent_pps"] > 0 and r["received"] > 0 for r in unpaced)
    assert out["machine"]["cpus"] >= 1
