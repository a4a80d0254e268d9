"""One clock: the same experiment at two scales 4x apart (same packets, rates and times
stretched by the scale) gives the same dimensionless results. Ports, rates and the
experiment's duration scale together; every time constant the lab applies (flowlet gap,
utilisation window) is given in real-fabric time, so it stretches too."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from .conftest import railab, shipped

SCALES = (2.5e-6, 6.25e-7)     # 400G -> 1 Mb/s and 250 kb/s: Python senders keep up with both
                               # even on a shared, loaded machine (at 2 Mb/s they did not)
MODES = ("ecmp", "flowlet", "spray-rr")
# dimensionless results: (metric, absolute slack for values near 0)
COMPARED = (("loss_pct", 0.5), ("reorder_pct", 0.5), ("uplink_max_mean", 0.05))


def experiment(tmp_path, scale: float) -> str:
    """8 elephants from rail 0 across the rails (through leaf1-r0's 8 uplinks), each at 60 %
    of the port's speed: ECMP collisions overflow uplinks, spraying evens them out."""
    stretch = SCALES[0] / scale          # 1, then 4: the same packets, 4x slower
    rate = 0.6 / stretch
    path = tmp_path / f"scale-{scale:g}.yml"
    path.write_text(textwrap.dedent(f"""\
        name: timescale
        lab: {shipped("rail-optimized").as_posix()}
        duration: {3 * stretch:g}s
        modes: [{", ".join(MODES)}]
        port_model: {{scale: {scale:.10f}, buffer_bytes: 16384, ecn_bytes: 4096}}
        workload:
          seed: 7
          mtu: 1024
          mix: {{elephant: 1.0, mice: 0.0, protocol: 0.0}}
          classes:
            elephant: {{size: 64KiB, opcode: write, arrival: paced}}
          pattern:
            type: flows
            flows:
              - {{src: "srv1:nic0", dst: "srv2:nic1", rate: {rate:g}Mbps}}
              - {{src: "srv2:nic0", dst: "srv3:nic1", rate: {rate:g}Mbps}}
              - {{src: "srv3:nic0", dst: "srv4:nic1", rate: {rate:g}Mbps}}
              - {{src: "srv4:nic0", dst: "srv5:nic1", rate: {rate:g}Mbps}}
              - {{src: "srv5:nic0", dst: "srv6:nic1", rate: {rate:g}Mbps}}
              - {{src: "srv6:nic0", dst: "srv7:nic1", rate: {rate:g}Mbps}}
              - {{src: "srv7:nic0", dst: "srv8:nic1", rate: {rate:g}Mbps}}
              - {{src: "srv8:nic0", dst: "srv1:nic1", rate: {rate:g}Mbps}}
        """))
    return str(path)


def sent(report: dict, mode: str) -> int:
    results = json.loads((Path(report["folder"]) / "results.json").read_text())
    return sum(f.get("sent_packets", 0) for f in results["modes"][mode]["runs"][0]["flows"])


@pytest.mark.flaky(reruns=1)   # Python senders and receivers on a shared machine
def test_same_experiment_at_two_scales_gives_the_same_dimensionless_results(lab_factory, tmp_path):
    spec = lab_factory(shipped("rail-optimized"), prefix="tscale")   # one lab: the same hash seeds
    reports = {}
    for scale in SCALES:
        proc = railab("run", experiment(tmp_path, scale), "--json", "--output", str(tmp_path),
                      "--name", spec.name, timeout=900)
        reports[scale] = json.loads(proc.stdout)
    fast, slow = (reports[s] for s in SCALES)
    assert fast["clock"]["stretch"] * 4 == pytest.approx(slow["clock"]["stretch"])
    lines = []
    for mode in MODES:
        a, b = fast["modes"][mode], slow["modes"][mode]
        # the same packets (the senders kept up at both scales; a few at the edges of the
        # duration may differ)
        n_fast, n_slow = sent(fast, mode), sent(slow, mode)
        lines.append(f"{mode}: {n_fast} packets sent at {SCALES[0]:g}, {n_slow} at {SCALES[1]:g}")
        assert n_fast > 0 and abs(n_fast - n_slow) <= 0.03 * max(n_fast, n_slow), lines[-1]
        for key, slack in COMPARED:
            lines.append(f"{mode} {key}: {a[key]:.3f} at {SCALES[0]:g}, {b[key]:.3f} at {SCALES[1]:g}")
            assert abs(a[key] - b[key]) <= max(0.10 * max(abs(a[key]), abs(b[key])), slack), lines[-1]
    print("\n".join(lines))
    # the comparison can fail: ECMP's collisions lose packets, spraying does not
    assert fast["modes"]["ecmp"]["loss_pct"] > fast["modes"]["spray-rr"]["loss_pct"]
