"""A fault run received by the kernel NIC: `railab run` of a short experiment whose one
host link goes down and comes back, the receivers the XDP responder (hosts: kernel, the
default). The flow to the cut host port loses everything sent while it was down: its
loss window must start at the cut and end at the repair, as the send stamps around the
loss say (bpf/nic/stats.h loss windows, dataplane.nic.report.loss_timing)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from .conftest import run_experiment, shipped

RATE_PPS = 1000                 # per flow: 1 ms between packets
DOWN_AT, DOWN_FOR = 0.5, 0.6    # s into the run


def test_a_cut_host_link_is_one_loss_window_from_the_cut_to_the_repair(tmp_path):
    path = tmp_path / "cut.yml"
    path.write_text(textwrap.dedent(f"""\
        name: nic-cut
        lab: {shipped('clos2').as_posix()}
        duration: 1.6s
        modes: [ecmp]
        workload:
          seed: 1
          mtu: 1024
          mix: {{elephant: 1.0, mice: 0.0, protocol: 0.0}}
          classes:
            elephant: {{size: 1MiB, opcode: write, arrival: paced}}
          pattern:
            type: flows
            flows:
              - {{src: "srv1:nic0", dst: "srv3:nic0", class: elephant, rate: {RATE_PPS // 1000}kpps}}
              - {{src: "srv2:nic0", dst: "srv4:nic0", class: elephant, rate: {RATE_PPS // 1000}kpps}}
        events:
          - {{at: {DOWN_AT}, for: {DOWN_FOR}, fault: link-down, a: "srv3:nic0", b: "leaf2:down1"}}
        """))
    report = run_experiment(path, tmp_path, prefix="nicf", timeout=300)
    results = json.loads((Path(report["folder"]) / "results.json").read_text())
    run = results["modes"]["ecmp"]["runs"][0]
    assert run["hosts"]["receive"] == "kernel", run["hosts"]
    assert run["hosts"]["send"] == "kernel", run["hosts"]
    down = next(e for e in run["events"] if e["what"].startswith("link-down"))["t_ns"]
    up = next(e for e in run["events"] if e["what"].startswith("link-up"))["t_ns"]
    assert up - down >= DOWN_FOR * 0.9e9
    assert len(run["flows"]) == 2
    cut = next(f for f in run["flows"] if f["lost"])
    other = next(f for f in run["flows"] if f is not cut)
    # the other flow lost nothing: 0 outage, no window
    assert other["lost"] == 0 and other["outage_us"] == 0 and other["loss_windows_ns"] == []
    # the cut flow: one window holding every lost packet (about the fault's length at
    # 1 ms a packet), starting at the cut and ending at the repair
    assert cut["timing_note"] is None, cut["timing_note"]
    windows = cut["loss_windows_ns"]
    assert sum(n for _s, _e, n in windows) == cut["lost"]
    start, end, n = max(windows, key=lambda w: w[2])
    interval = 1e9 / RATE_PPS
    assert DOWN_FOR * 1000 * 0.8 <= n <= DOWN_FOR * 1000 * 1.5, (n, windows)
    assert down - 5 * interval <= start <= down + 50e6, (start - down) / 1e6      # ms after the cut
    assert up - 5 * interval <= end <= up + 500e6, (end - up) / 1e6               # ms after the repair
    assert cut["recovery_us"] > 0 and cut["outage_us"] >= (end - start) / 1000
