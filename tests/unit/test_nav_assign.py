"""The nav controller's plan (dataplane/agent/nav.py, Navigator._assign) on a hand-made
fabric: one leaf, n uplinks, each through its own spine link to the destination leaf."""
from __future__ import annotations

import random

from dataplane.agent.nav import Navigator

UPLINK_BPS = 1_000_000


class _Programmer:
    def __init__(self):
        self.tm: dict[tuple, str] = {}

    def tm_add(self, switch, egress, **five):
        self.tm[(switch, tuple(sorted(five.items())))] = egress

    def tm_del(self, switch, **five):
        self.tm.pop((switch, tuple(sorted(five.items()))), None)


def _navigator(uplinks: int) -> Navigator:
    nav = Navigator.__new__(Navigator)     # no data plane: topology and links by hand
    nav.p = _Programmer()
    nav.paths = {("leafA", "leafB"): [(("leafA", f"up{i}"), (f"spine{i}", "downB")) for i in range(uplinks)]}
    nav.placed, nav.moves, nav.events = {}, 0, []
    nav._link_alive = lambda link: True
    nav._speed = lambda switch, port: UPLINK_BPS
    return nav


def _five(i):
    return (f"10.0.0.{i + 1}", "10.0.1.1", 50000 + i, 4791, 17)


def _round(nav, currents, rng, noise=0.1):
    """One planning round: every flow at 30 % of a port, its measured rate wobbling."""
    demands = [(_five(i), 0.3 * UPLINK_BPS * (1 + rng.uniform(-noise, noise)), ("leafA", "leafB"), path, 0.0)
               for i, path in currents.items()]
    nav._assign(demands, {}, announced=False)
    return {i: nav.placed[_five(i)].path for i in currents}


def test_collided_flows_spread_one_per_uplink_in_one_round():
    nav = _navigator(4)
    first = nav.paths[("leafA", "leafB")][0]
    placed = _round(nav, {i: first for i in range(4)}, random.Random(1))
    assert len(set(placed.values())) == 4
    assert nav.moves == 3          # one stays, three move


def test_two_flows_that_must_share_are_not_shuffled_round_after_round():
    """8 flows on 7 live uplinks: one pair must share. With noisy rates the order changes
    every round; the pair stays where it is instead of moving to the uplink of a flow
    later in the order."""
    nav = _navigator(7)
    paths = nav.paths[("leafA", "leafB")]
    currents = {i: paths[i % 7] for i in range(8)}        # flows 0 and 7 share uplink 0
    rng = random.Random(7)
    for _ in range(30):
        currents = _round(nav, currents, rng)
    assert nav.moves == 0
    per_uplink = [sum(1 for p in currents.values() if p == path) for path in paths]
    assert sorted(per_uplink) == [1] * 6 + [2]


def test_a_measured_flow_the_hosts_then_announce_becomes_an_announced_one():
    """nav-host once lost the demo's placement: the controller's first round placed the
    five-tuples still in the flow table from the mode run before (measured, not announced);
    the hosts' announcement found them on the same paths and left them measured, so they
    expired before they started and were re-placed later from chunky measured rates."""
    nav = _navigator(4)
    paths = nav.paths[("leafA", "leafB")]
    _round(nav, {0: paths[0]}, random.Random(3))            # measured, from stale counters
    assert not nav.placed[_five(0)].announced
    nav._assign([(_five(0), 0.3 * UPLINK_BPS, ("leafA", "leafB"), None, 0.0)], {}, announced=True)
    placed = nav.placed[_five(0)]
    assert placed.announced and placed.path == paths[0] and placed.last_bytes == -1
