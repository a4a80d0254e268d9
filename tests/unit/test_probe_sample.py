"""probe --sample: every leaf pair that can reach each other, then random pairs up to N,
without listing the million pairs of a large lab."""
from __future__ import annotations

import itertools

from dataplane.lab.probe import probe_pairs, probe_ports, sample_pairs
from dataplane.runtime.labspec import build
from dataplane.topology.generate import generate


def _leaf_pairs(spec, pairs):
    leaf = {(h.name, i.name): i.peer_node for h in spec.hosts for i in h.interfaces}
    return {frozenset((leaf[(a.host, a.port)], leaf[(b.host, b.port)])) for a, b in pairs}


def test_sample_covers_every_leaf_pair_of_each_plane():
    spec = build(generate("dual-plane", name="s", servers=8, rails=4, spines=2))
    ports = probe_ports(spec)
    every = probe_pairs(ports)
    sampled = sample_pairs(spec, ports, 50)
    assert _leaf_pairs(spec, sampled) == _leaf_pairs(spec, every)
    # 4 leaves per plane (one per rail): 6 pairs + 4 with itself in each plane; none across
    assert len(_leaf_pairs(spec, every)) == 2 * (6 + 4)
    assert 50 <= len(sampled) < len(every)
    valid = {frozenset(((a.host, a.port), (b.host, b.port))) for a, b in every}
    keys = [frozenset(((a.host, a.port), (b.host, b.port))) for a, b in sampled]
    assert len(set(keys)) == len(keys) and set(keys) <= valid


def test_sample_is_repeatable_and_grows_with_n():
    spec = build(generate("rail-optimized", name="s", servers=8, rails=4, spines=2))
    ports = probe_ports(spec)
    assert sample_pairs(spec, ports, 30) == sample_pairs(spec, ports, 30)
    small, large = sample_pairs(spec, ports, 10), sample_pairs(spec, ports, 200)
    assert len(large) >= 200 > len(small)
    leaves = {i.peer_node for h in spec.hosts for i in h.interfaces}
    assert len(_leaf_pairs(spec, small)) == len(list(itertools.combinations(leaves, 2))) + len(leaves)


def test_leaf_pairs_share_one_port_per_leaf():
    """Each leaf pair is probed through the leaves' stand-in ports where it can: a port that
    sends from its host's stack costs its leaf port a 256 KiB page pool, and random ports
    for each of a 16,384-GPU lab's 16,512 leaf pairs touched all 32,768 host ports."""
    spec = build(generate("dual-plane", name="s", servers=32, rails=2, spines=4, leaf_ports=16))
    ports = probe_ports(spec)
    sampled = sample_pairs(spec, ports, 1)
    leaves = {i.peer_node for h in spec.hosts for i in h.interfaces}
    assert _leaf_pairs(spec, sampled) == _leaf_pairs(spec, probe_pairs(ports))
    touched = {(p.host, p.port) for pair in sampled for p in pair}
    # a stand-in per leaf, a partner on its own leaf, and a few where the stand-ins of two
    # leaves are one host's ports
    assert len(sampled) > 3 * len(leaves) and len(touched) <= 2.5 * len(leaves)
