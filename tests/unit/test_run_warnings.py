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


def _late_run(p99_ns, stretch=1250.0, window_wall_us=312.5):
    return {"hosts": {"engine": {"lateness_ns": {"p50": p99_ns // 2, "p99": p99_ns}}},
            "clock": {"scale": 8e-4, "stretch": stretch, "window_wall_us": window_wall_us}}


def test_an_engine_late_by_more_than_the_load_window_is_named_with_fabric_time(capsys):
    results = {"modes": {"ecmp": {"runs": [_late_run(40_000)]},
                         "spray-rr": {"runs": [_late_run(20_447_232), _late_run(9_000_000)]}}, "sweeps": {}}
    run._warn_late_hosts(results)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["railab: warning: spray-rr: the send engine fell behind, p99 20.4 ms wall = 16.4 us of "
                   "fabric time, more than the switches' load window (0.25 us); the workload reached "
                   "the fabric later and in bursts: lower port_model.scale"]


def test_engines_on_time_python_hosts_and_older_records_warn_nothing(capsys):
    # the engine's own jitter past a fast scale's window (link-failure-spine: 98 us wall,
    # 2.5 us of fabric time against a 2 us window) is not falling behind
    results = {"modes": {"ecmp": {"runs": [_late_run(300_000, stretch=20_000, window_wall_us=5000)]},
                         "spray-rr": {"runs": [_late_run(98_304, stretch=40.0, window_wall_us=80)]},
                         "python": {"runs": [{"hosts": {"send": "python"}, "clock": {"stretch": 1250.0}}]},
                         "old": {"runs": [{}]}}, "sweeps": {}}
    run._warn_late_hosts(results)
    assert capsys.readouterr().err == ""


def test_backlog_drops_of_the_steered_forwarding_are_named_per_mode(capsys):
    steered = {"hosts": {"engine": {"steering": {"forwarding_cpus": [1], "backlog_drops": 815}}}}
    results = {"modes": {"spray-rr": {"runs": [steered, steered]},
                         "ecmp": {"runs": [{"hosts": {"engine": {"steering": {"forwarding_cpus": []}}}}, {}]}},
               "sweeps": {}}
    run._warn_backlog_drops(results)
    assert capsys.readouterr().err.strip().splitlines() == [
        "railab: warning: spray-rr: the kernel's input backlog dropped 1,630 frames on the forwarding CPUs "
        "(counted as loss, not the fabric's doing); offer fewer packets per second"]
