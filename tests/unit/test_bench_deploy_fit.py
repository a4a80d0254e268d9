"""`railab bench deploy --scale N,N,...`: the size list and the per-node, per-link fit."""
import argparse

import pytest

from dataplane.bench.deploy import fit
from dataplane.cli.bench_deploy import gpu_sizes


def test_sizes_parse_and_refuse():
    assert gpu_sizes("1024,4096,16384") == [1024, 4096, 16384]
    for bad in ("", "1024,x", "1001", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            gpu_sizes(bad)


def _row(nodes, links, ms_node=2.0, ms_link=0.5, kib_node=300.0, kib_link=120.0):
    return {"nodes": nodes, "links": links,
            "deploy_s": (ms_node * nodes + ms_link * links) / 1000,
            "lab_memory_mib": (kib_node * nodes + kib_link * links) / 1024,
            "destroy_s": 0.1 * links / 1000}


def test_fit_recovers_costs_of_labs_of_different_shapes():
    got = fit([_row(40, 512), _row(152, 3072), _row(608, 12288)])
    assert got["separable"]
    assert got["deploy"]["per_node"] == pytest.approx(2.0, abs=1e-3)
    assert got["deploy"]["per_link"] == pytest.approx(0.5, abs=1e-3)
    assert got["memory"]["per_node"] == pytest.approx(300.0, abs=1e-3)
    assert got["memory"]["per_link"] == pytest.approx(120.0, abs=1e-3)


def test_fit_of_one_shape_gives_the_all_in_cost_only():
    got = fit([_row(152, 3072), _row(608, 12288)])
    assert not got["separable"]
    assert "per_node" not in got["deploy"]
    # 2 ms per node over 3072/152 links per node, plus 0.5 ms per link
    assert got["deploy"]["per_link_all_in"] == pytest.approx(0.5 + 2.0 * 152 / 3072, abs=1e-3)


def test_fit_leaves_out_sizes_that_did_not_deploy():
    failed = {"nodes": 2432, "links": 49152, "error": "agent failed"}
    assert fit([_row(152, 3072), failed])["rows"] == 1
