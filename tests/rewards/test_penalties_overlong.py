"""DAPO's soft overlong penalty by hand."""

import pytest

from rlvr.rewards.penalties import soft_overlong_penalty


def test_linear_over_the_buffer():
    # limit 100, buffer 20: no penalty up to 80, -0.5 at 90, -1 at 100 (times the factor)
    assert soft_overlong_penalty([50, 80, 90, 100, 120], 100, 20) == [0.0, 0.0, -0.5, -1.0, -1.0]
    assert soft_overlong_penalty([95], 100, 20, factor=0.4) == [pytest.approx(-0.3)]


def test_bad_buffer():
    with pytest.raises(ValueError):
        soft_overlong_penalty([1], 10, 0)
