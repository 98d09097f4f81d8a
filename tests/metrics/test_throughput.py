"""FLOPs per token and MFU, by hand."""

import pytest

from rlvr.metrics import mfu, transformer_flops_per_token


def test_flops_and_mfu_by_hand():
    # 6 N + 12 L H S with N = 1e6, L = 2, H = 8, S = 10: 6e6 + 1920
    assert transformer_flops_per_token(10**6, 2, 8, 10) == 6_001_920
    assert transformer_flops_per_token(10**6, 2, 8, 10, training=False) == 2_000_640
    assert mfu(6e6, 100.0, 1.2e9) == pytest.approx(0.5)
