"""`railab bench fuzz`: a long campaign of hostile frames through the switch program
(BPF_PROG_TEST_RUN), judged frame by frame (dataplane.xdp.hostile.judge) and, at the end, by
its counters: every frame in one verdict counter, every drop but accepted PFC frames in one
drop reason. `--program nic`: the kernel NIC's responder instead (hostile.judge_nic), half
the frames consumed, half passed on. Too long for the test suite (tests/bpf/test_fuzz.py
runs 2,500 frames with hypothesis); the same frames from the same seed.

Needs root; its namespace and the program are gone when it returns.
"""
from __future__ import annotations

import collections
import itertools
import os
import time

from dataplane.kernel.netns import in_netns
from dataplane.bench import hostile
from dataplane.xdp import progtest
from dataplane.xdp.switch import SwitchDataplane

EXAMPLES_KEPT = 5


PROGRAMS = ("switch", "nic")


def bench_fuzz(frames: int = 1_000_000, seed: int = 1, program: str = "switch") -> dict:
    if program == "nic":
        return {"program": "nic", **_nic_campaign(frames, seed)}
    dp = SwitchDataplane()
    try:
        with hostile.fuzz_switch(dp, f"rlfz{os.getpid()}") as sw:
            return {"program": "switch", **_campaign(sw, frames, seed)}
    finally:
        dp.close()


def _campaign(sw: hostile.FuzzSwitch, frames: int, seed: int) -> dict:
    dp = sw.dp
    verdicts_before, reasons_before = dp.verdict_counters(), dp.drop_counters()
    verdicts: collections.Counter = collections.Counter()
    violations: collections.Counter = collections.Counter()
    examples: list[dict] = []
    pfc_frames = 0
    started = time.perf_counter()
    with in_netns(sw.netns):
        for frame in itertools.islice(filter(hostile.deliverable, hostile.random_frames(seed)), frames):
            result = sw.run(frame)
            verdicts[result.verdict] += 1
            pfc_frames += frame[12:14] == b"\x88\x08"
            for problem in hostile.judge(frame, result.verdict, result.data):
                violations[problem] += 1
                if len(examples) < EXAMPLES_KEPT:
                    examples.append({"problem": problem, "verdict": result.verdict, "frame": frame.hex()})
    elapsed = time.perf_counter() - started
    counted = {v: c["packets"] - verdicts_before[v]["packets"] for v, c in dp.verdict_counters().items()}
    reasons = {r: n - reasons_before[r] for r, n in dp.drop_counters().items()}
    drops_without_reason = verdicts["drop"] - sum(reasons.values())
    counter_problems = []
    if counted != {v: verdicts.get(v, 0) for v in counted}:
        counter_problems.append(f"verdict counters {counted} differ from the verdicts returned {dict(verdicts)}")
    if not 0 <= drops_without_reason <= pfc_frames:
        counter_problems.append(f"{drops_without_reason} drops without a reason, {pfc_frames} PFC frames")
    for problem in counter_problems:
        violations[problem] += 1
    return {"frames": sum(verdicts.values()), "seed": seed, "verdicts": dict(verdicts),
            "drop_reasons": {r: n for r, n in reasons.items() if n},
            "pfc_frames": pfc_frames, "pfc_frames_accepted": drops_without_reason,
            "violations": sum(violations.values()), "violation_kinds": dict(violations),
            "examples": examples, "elapsed_s": round(elapsed, 2),
            "frames_per_s": round(sum(verdicts.values()) / elapsed) if elapsed else None}


def _nic_campaign(frames: int, seed: int) -> dict:
    from dataplane.nic.responder import NicResponder   # why: only this campaign loads the NIC

    verdicts: collections.Counter = collections.Counter()
    violations: collections.Counter = collections.Counter()
    examples: list[dict] = []
    started = time.perf_counter()
    with NicResponder(max_qps=1024) as nic:
        frames_in = filter(hostile.deliverable, hostile.random_frames(seed, favour="railab-data"))
        for consume in (False, True):
            nic.configure(mode="respond", consume=consume, cnp_interval_us=1.0)
            for frame in itertools.islice(frames_in, frames // 2 + (frames % 2 if consume else 0)):
                result = progtest.prog_test_run(nic.prog_fd, frame)
                verdicts[result.verdict] += 1
                for problem in hostile.judge_nic(frame, result.verdict, result.data, consume=consume):
                    violations[problem] += 1
                    if len(examples) < EXAMPLES_KEPT:
                        examples.append({"problem": problem, "verdict": result.verdict, "frame": frame.hex()})
        counters = nic.counters()
    elapsed = time.perf_counter() - started
    return {"frames": sum(verdicts.values()), "seed": seed, "verdicts": dict(verdicts),
            "nic_counters": {k: v for k, v in counters.items() if v},
            "violations": sum(violations.values()), "violation_kinds": dict(violations),
            "examples": examples, "elapsed_s": round(elapsed, 2),
            "frames_per_s": round(sum(verdicts.values()) / elapsed) if elapsed else None}

