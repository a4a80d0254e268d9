"""Ranking modes by average FCT slowdown: ordered only where a bootstrap says the
difference is real, tied otherwise; two rankings agree unless they order a pair both ways."""
from __future__ import annotations

import numpy as np

from dataplane.report import closedloop, ranking, table


def _draws(mean: float, n: int = 800, seed: int = 0) -> list[float]:
    """Slowdowns spread like a web-search run's: heavy-tailed around `mean`."""
    rng = np.random.default_rng(seed)
    return list(1 + rng.exponential(mean - 1, n))


def test_clearly_different_modes_are_ordered_and_close_ones_tie():
    groups = ranking.rank({"spray-rr": _draws(40, seed=1), "ecmp": _draws(10, seed=2),
                           "flowlet": _draws(5, seed=3), "spraylink": _draws(5.1, seed=4)})
    assert groups == [["flowlet", "spraylink"], ["ecmp"], ["spray-rr"]]
    assert ranking.text(groups) == "flowlet = spraylink < ecmp < spray-rr"


def test_one_stretch_of_slow_neighbours_is_not_many_independent_draws():
    """40 consecutive messages of one mode ran during a stall (slowdown 40): its average
    is 27 % higher, which single-message resampling calls certain (interval 0.7-2.0);
    resampled in blocks of neighbours it is one event, and the modes tie."""
    steady = _draws(5, n=800, seed=1)
    stalled = _draws(5, n=800, seed=2)
    stalled[300:340] = [40.0] * 40
    assert ranking.rank({"steady": steady, "stalled": stalled}) == [["steady", "stalled"]]


def test_the_same_results_always_rank_the_same():
    data = {"a": _draws(5.0, seed=5), "b": _draws(5.4, seed=6), "c": _draws(5.8, seed=7)}
    assert len({repr(ranking.rank(data)) for _ in range(3)}) == 1


def test_a_handful_of_messages_orders_nothing():
    """Three messages each, ten times apart: a bootstrap of so few says nothing."""
    assert ranking.rank({"ecmp": _draws(100, n=3), "flowlet": _draws(5, n=3, seed=1)}) == [["flowlet", "ecmp"]]


def test_a_mode_without_messages_is_left_out():
    assert ranking.rank({"ecmp": _draws(10), "idle": []}) == [["ecmp"]]


def test_rankings_agree_unless_a_pair_is_ordered_both_ways():
    first = [["flowlet"], ["ecmp", "spraylink"], ["spray-rr"]]
    assert ranking.agree(first, [["flowlet", "spraylink"], ["ecmp"], ["spray-rr"]])
    assert ranking.agree(first, first)
    assert not ranking.agree(first, [["ecmp"], ["flowlet"], ["spraylink"], ["spray-rr"]])
    assert not ranking.agree([["a"], ["b"]], [["b"], ["a"]])


def _run(slowdowns: list[float], size: int = 32768) -> dict:
    """A closed-loop run whose messages (all of one size) took `slowdowns` x ideal."""
    ideal = closedloop.ideal_fct_ns(size, 1024, 1e7)
    return {"flows": [{"line_bps": 1e7, "mtu": 1024, "transport": {}, "messages_sent": len(slowdowns),
                       "transport_rx": {"messages": [[size, s * ideal] for s in slowdowns]}}]}


def test_the_report_ranks_all_messages_and_each_size_bucket():
    view = {"ecmp": [_run(_draws(10, seed=8))], "flowlet": [_run(_draws(5, seed=9))],
            "spray-rr": [_run(_draws(40, seed=10), size=512)]}
    rows = ranking.by_bucket(view)
    assert rows[0] == {"lo": 0, "hi": None, "ranking": [["flowlet"], ["ecmp"], ["spray-rr"]]}
    # spray-rr's messages are all short, the others' all 16-64 KiB: no bucket holds both
    assert {(r["lo"], r["hi"]): r["ranking"] for r in rows[1:]}[(16384, 65536)] == [["flowlet"], ["ecmp"]]
    assert all(r["ranking"] is None for r in rows[1:] if r["lo"] != 16384)
    text = table.render_text(view, title="t")
    assert "flowlet < ecmp < spray-rr" in text and "16K-64K" in text


def test_the_written_table_cuts_no_cell():
    """results' table.txt: the transport table's bucket cells in full, however many columns."""
    sizes = (512, 2048, 8192, 32768, 131072, 524288)      # one per size bucket
    view = {label: [{"flows": [_run(_draws(mean, n=50, seed=seed + i), size)["flows"][0] for i, size in enumerate(sizes)]}]
            for label, mean, seed in (("ecmp", 120, 20), ("flowlet", 110, 30), ("spray-rr gbn", 900, 40),
                                      ("spraylink sr", 100, 50))}
    text = table.render_text(view, title="fct-websearch")
    assert "…" not in text
    assert text.count("(n=50)") == 4 * len(sizes)
