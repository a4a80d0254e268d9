import pytest

from dataplane.timescale import real_seconds, stretch, wall_ns, wall_seconds


def test_a_slower_lab_stretches_time_by_one_over_scale():
    assert wall_seconds(100e-6, 1 / 40) == pytest.approx(4e-3)
    assert wall_ns(100_000, 5e-6) == 20_000_000_000
    assert real_seconds(wall_seconds(0.25, 1e-3), 1e-3) == pytest.approx(0.25)


@pytest.mark.parametrize("scale", [0, None, -1])
def test_no_port_model_means_real_time(scale):
    assert stretch(scale) == 1.0
    assert wall_seconds(3.0, scale) == 3.0
