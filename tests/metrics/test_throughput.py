"""FLOPs per token and MFU, by hand."""

import pytest

from rlvr.metrics import mfu, transformer_flops_per_token


def test_flops_and_mfu_by_hand():
    # 6 N + 12 L H S with N = 1e6, L = 2, H = 8, S = 10: 6e6 + 1920
    assert transformer_flops_per_token(10**6, 2, 8, 10) == 6_001_920
    assert transformer_flops_per_token(10**6, 2, 8, 10, training=False) == 2_000_640
    assert mfu(6e6, 100.0, 1.2e9) == pytest.approx(0.5)


def test_the_measured_peak_is_a_plausible_matmul_rate():
    import torch

    from rlvr.metrics.throughput import measure_matmul_flops

    flops = measure_matmul_flops(torch.float32, size=256, seconds=0.05)
    assert 1e8 < flops < 1e14  # between a slow phone and a GPU


def test_a_given_peak_is_used_as_is(monkeypatch):
    from rlvr.config import load_config
    from rlvr.metrics.throughput import run_peak_flops

    cfg = load_config(None, ["logging.peak_flops=123e9"])
    assert run_peak_flops(cfg, bf16=False) == 123e9
    asked = []
    monkeypatch.setattr("rlvr.metrics.throughput.default_peak_flops",
                        lambda dtype, threads: asked.append(dtype) or 1.0)
    run_peak_flops(load_config(None, ["model.dtype=bfloat16"]), bf16=False)
    run_peak_flops(load_config(None, []), bf16=True)
    run_peak_flops(load_config(None, []), bf16=False)
    assert asked == ["bfloat16", "bfloat16", "float32"]
