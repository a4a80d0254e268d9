"""railab ui's layout (a pure function of the lab spec): tiers as rows, planes side by side,
every node and link drawn once, parallel links apart."""
from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.runtime.labspec import build
from dataplane.topology.clab import read
from dataplane.topology.generate import generate
from dataplane.ui.layout import layout, natural_key

LABS = Path(__file__).resolve().parents[2] / "labs"


def spec_of(kind: str):
    return build(read(LABS / kind / f"{kind}.clab.yml"))


@pytest.mark.parametrize("kind", ["rail-optimized", "dual-plane", "clos2", "clos3", "rail-only"])
def test_every_node_and_link_once(kind):
    spec = spec_of(kind)
    out = layout(spec)
    assert sorted(n["name"] for n in out["nodes"]) == sorted(n.name for n in spec.nodes)
    want = {frozenset((f"{n.name}:{i.name}", f"{p.name}:{j.name}")) for n, i, p, j in spec.links()}
    got = [frozenset((l["a"], l["b"])) for l in out["links"]]
    assert len(got) == len(set(got)) and set(got) == want
    assert len({l["id"] for l in out["links"]}) == len(got)
    # parallel links (rail-optimized: 4 per leaf-spine pair) get distinct attachment points
    assert len({(l["ax"], l["ay"]) for l in out["links"]}) == len(got)
    assert len({(l["bx"], l["by"]) for l in out["links"]}) == len(got)


@pytest.mark.parametrize("kind, tiers", [("clos3", ["core", "spine", "leaf", "host"]),
                                          ("rail-optimized", ["spine", "leaf", "host"]),
                                          ("rail-only", ["leaf", "host"])])
def test_tiers_are_rows_top_down(kind, tiers):
    out = layout(spec_of(kind))
    assert out["tiers"] == tiers
    y = {}
    for n in out["nodes"]:
        y.setdefault(n["role"], set()).add(n["y"])
    assert all(len(ys) == 1 for ys in y.values())          # one row per tier
    rows = [y[t].pop() for t in tiers]
    assert rows == sorted(rows)                              # top tier first
    for link in out["links"]:                                # a is the upper end: a->b is "down"
        assert link["ay"] < link["by"]


def test_planes_side_by_side_hosts_span_both():
    spec = spec_of("dual-plane")
    out = layout(spec)
    assert out["planes"] == [0, 1]
    plane = {n["name"]: n for n in out["nodes"] if n["plane"] is not None}
    right_of_plane0 = max(n["x"] + n["w"] for n in plane.values() if n["plane"] == 0)
    left_of_plane1 = min(n["x"] for n in plane.values() if n["plane"] == 1)
    assert right_of_plane0 < left_of_plane1
    hosts = [n for n in out["nodes"] if n["role"] == "host"]
    assert min(h["x"] for h in hosts) < right_of_plane0 and max(h["x"] + h["w"] for h in hosts) > left_of_plane1


def test_no_overlap_and_inside_the_canvas():
    out = layout(build(generate("dual-plane", name="big", servers=32, rails=8, spines=4)))
    assert len(out["nodes"]) == 56 and len(out["links"]) == 1024
    by_row = {}
    for n in out["nodes"]:
        by_row.setdefault(n["y"], []).append(n)
        assert 0 <= n["x"] and n["x"] + n["w"] <= out["width"] and n["y"] + n["h"] <= out["height"]
    for row in by_row.values():
        row.sort(key=lambda n: n["x"])
        for left, right in zip(row, row[1:]):
            assert left["x"] + left["w"] < right["x"]


def test_leaves_in_rail_order_and_natural_names():
    out = layout(spec_of("rail-optimized"))
    leaves = [n for n in out["nodes"] if n["role"] == "leaf"]
    assert [n["rail"] for n in sorted(leaves, key=lambda n: n["x"])] == [0, 1, 2, 3]
    assert sorted(["srv10", "srv9", "srv1"], key=natural_key) == ["srv1", "srv9", "srv10"]
