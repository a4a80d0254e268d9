"""`railab run`'s warnings about what a run could not count right."""
from __future__ import annotations

from dataplane.cli import run


def _results(*undrained_per_mode):
    return {"modes": {f"m{i}": {"runs": [{"undrained_bytes": b}]} for i, b in enumerate(undrained_per_mode)},
            "sweeps": {}}


def test_a_mode_whose_queues_did_not_drain_is_named_with_its_bytes(capsys):
    run._warn_undrained(_results(0, 2_157_572))
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["railab: warning: m1: 2,157,572 bytes still queued in the fabric after the drain limit; "
                   "they are counted as lost and may arrive in the next run"]


def test_drained_runs_and_older_results_warn_nothing(capsys):
    run._warn_undrained(_results(0, 0))
    run._warn_undrained({"modes": {"ecmp": {"runs": [{}]}}, "sweeps": {}})
    assert capsys.readouterr().err == ""


def test_frames_of_an_earlier_run_are_named_per_mode(capsys):
    results = {"modes": {"ecmp": {"runs": [{"stale_frames": 0}]},
                         "spray-rr": {"runs": [{"stale_frames": 1200}, {"stale_frames": 34}]},
                         "flowlet": {"runs": [{}]}}, "sweeps": {}}
    run._warn_stale(results)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["railab: warning: spray-rr: 1,234 data frames of an earlier run arrived during it "
                   "(a queue held them past that run's end); they were not counted"]
