"""The lesson under a comparison is worded from the run's own numbers."""
from __future__ import annotations

from test_report_plots import make_run

from dataplane.report import lesson
from dataplane.report import metrics as m


def _figure(run: dict) -> str:
    return f"{m.run_metrics(run)['uplink_max_mean']:.2f}"


def test_the_lesson_quotes_each_modes_balance_and_the_reordering_it_cost():
    runs = [make_run(mode=mode) for mode in ("ecmp", "flowlet", "spray-rr")]
    first, second = lesson.lesson_lines(runs)
    for run in runs:
        assert f"{run['mode']} {_figure(run)}" in first
    spray = m.run_metrics(runs[2])
    assert spray["reorder_pct"] > 0
    assert f"{spray['reorder_pct']:.2f} % of packets out of order" in second
    assert "flowlet put each new flowlet on the least-loaded uplink" in second
    assert "pauses" not in second          # near even: no excuse to make


def test_a_flowlet_run_no_better_than_hashing_is_called_so():
    ecmp = make_run(mode="ecmp")
    same = {**make_run(mode="ecmp"), "mode": "flowlet"}     # the same placement as hashing
    _, second = lesson.lesson_lines([ecmp, same])
    assert f"flowlet did no better than hashing ({_figure(same)})" in second
    assert "moves only when it pauses" in second


def test_one_mode_teaches_nothing():
    assert lesson.lesson_lines([make_run(mode="ecmp")]) == []
