"""Real-queue settings without a lab: the shaper a port gets, and how experiments ask for
real queues."""
from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.experiment import spec as exp_spec
from dataplane.experiment.session import experiment_port_model
from dataplane.kernel.realqueue import MAX_SHAPER_BPS, RealQueueError, shaper_params

LAB = Path(__file__).resolve().parents[2] / "labs" / "rail-optimized" / "rail-optimized.clab.yml"


def test_shaper_holds_one_frame_and_leaves_the_drops_to_the_virtual_queue():
    p = shaper_params(10_000_000, 32768, 1500)
    assert p.rate_bps == 10_500_000                 # SHAPER_MARGIN: the virtual queue is the bottleneck
    assert p.burst_bytes == 1518 + 2                # one VLAN-tagged full-size frame
    assert p.limit_bytes == 2 * 32768 + p.burst_bytes   # above the virtual buffer
    assert shaper_params(10_000_000, 32768, 9000).burst_bytes == 9018 + 2


def test_shaper_bucket_survives_rounding_at_high_speed():
    # tbf's bucket is a time, rounded down to whole microseconds and 64 ns ticks: at
    # 10 Gb/s that is up to 1,250 + 160 bytes less than asked for
    p = shaper_params(10 * 10**9, 32768, 1500)
    assert p.burst_bytes - 1250 - 160 >= 1518


def test_shaper_rate_is_capped_where_tbf_rates_end():
    assert shaper_params(400 * 10**9, 32768, 1500).rate_bps == MAX_SHAPER_BPS


def test_shaper_needs_a_speed():
    with pytest.raises(RealQueueError, match="port speed"):
        shaper_params(0, 32768, 1500)


@pytest.mark.parametrize("requested, current, queue", [
    ({}, {"scale": 0.025}, "real"),                              # experiments queue for real
    ({"queue": "virtual"}, {"scale": 0.025}, "virtual"),         # unless they say otherwise
    ({"scale": 0.001}, {"scale": 0}, "real"),
    ({}, {"scale": 0}, None),                                    # model off: nothing to queue in
    ({"scale": 0}, {"scale": 0.025}, None),
])
def test_experiment_port_model(requested, current, queue):
    assert experiment_port_model(requested, current).get("queue") == queue


def _experiment(tmp_path, port_model: str) -> Path:
    path = tmp_path / "x.yml"
    path.write_text(f"name: x\nlab: {LAB}\nmodes: [ecmp]\n"
                    "workload: {rate: 1Mbps, pattern: {type: all-to-all}}\n"
                    f"port_model: {port_model}\n")
    return path


def test_experiment_file_takes_a_queue_kind(tmp_path):
    exp = exp_spec.load(_experiment(tmp_path, "{scale: 0.001, queue: virtual}"))
    assert exp.port_model == {"scale": 0.001, "queue": "virtual"}


@pytest.mark.parametrize("port_model, words", [
    ("{queue: fifo}", "queue"),
    ("{scale: 0, queue: real}", "real queue needs the port model on"),
])
def test_experiment_file_bad_queue_is_one_line(tmp_path, port_model, words):
    path = _experiment(tmp_path, port_model)
    with pytest.raises(exp_spec.ExperimentError) as err:
        exp_spec.load(path)
    assert str(path) in str(err.value) and words in str(err.value)
    assert "\n" not in str(err.value)
