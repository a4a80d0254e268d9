"""The schema check of a large lab looks at one link of each shape (clabshapes): the links
of a generated lab reduce to a handful, and a bad link among thousands is still named."""
from __future__ import annotations

import pytest
import yaml

from dataplane.errors import TopologyError
from dataplane.topology import clab, clabshapes
from dataplane.topology.generate import generate


def _doc(tmp_path, servers=32):
    path = tmp_path / "big.clab.yml"
    clab.write(generate("dual-plane", name="big", servers=servers, rails=8, spines=4), str(path))
    return path, yaml.safe_load(path.read_text())


def test_a_generated_labs_links_are_a_few_shapes(tmp_path):
    _, doc = _doc(tmp_path)
    links = doc["topology"]["links"]
    shapes = clabshapes.one_per_shape(links, clab._validator().schema)
    assert len(links) > 500 and len(shapes) <= 4


@pytest.mark.parametrize("field, value, expected", [
    ("ipv4", ["10.0.0.2/24", "10.0.300.1/24"], "ipv4"),       # off the schema's pattern
    ("ipv4", ["10.0.0.2/24", "10.0.0.2/24"], "ipv4"),         # not unique
    ("endpoints", ["srv1:nic9a", "srv1:nic9a"], "endpoints"),  # not unique
    ("colour", "blue", "colour"),                              # no such property
])
def test_a_bad_link_among_many_is_named(tmp_path, field, value, expected):
    path, doc = _doc(tmp_path)
    bad = doc["topology"]["links"][700]
    bad[field] = value
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(TopologyError, match=r"\(link 701\)") as err:
        clab.read(str(path))
    assert expected in str(err.value)


def test_shapes_tell_equal_items_and_the_pattern_apart():
    patterns = clabshapes._patterns(clab._validator().schema)
    one = {"endpoints": ["a:x", "b:y"], "ipv4": ["10.0.0.1/31", "10.0.0.0/31"], "vars": {"k": 1}}
    other = {"endpoints": ["c:z", "d:w"], "ipv4": ["10.9.0.1/31", "10.9.0.0/31"], "vars": {}}
    assert clabshapes.shape(one, patterns) == clabshapes.shape(other, patterns)
    same_ends = dict(other, endpoints=["c:z", "c:z"])
    bad_ip = dict(other, ipv4=["10.9.0.1/33", "10.9.0.0/31"])
    assert clabshapes.shape(same_ends, patterns) != clabshapes.shape(one, patterns)
    assert clabshapes.shape(bad_ip, patterns) != clabshapes.shape(one, patterns)
    assert clabshapes.shape({"type": "veth", "endpoints": []}, patterns) is None
