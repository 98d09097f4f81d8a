"""Learner throughput and model FLOPs utilisation for a step's update.

MFU is relative to a peak figure: `logging.peak_flops` when the user knows better; on a GPU its
datasheet's dense bf16 rate; on a CPU the matmul rate measured on this machine, at the
learner's thread count and compute dtype, by a short probe the first time it is needed
(`measure_matmul_flops`; CPUs of one cloud instance type differ by 5x in bf16, so no table of
figures can serve). `benchmarks/peak.py` measures the same peak with more care.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from rlvr.config import Config
from rlvr.device import HOST
from rlvr.learner import UpdateResult


def transformer_flops_per_token(num_params: int, num_layers: int, hidden_size: int, seq_len: int,
                                training: bool = True) -> float:
    """6N + 12 L H S per trained token (weights plus attention scores); a third for forward."""
    forward = 2 * num_params + 4 * num_layers * hidden_size * seq_len
    return 3 * forward if training else forward


def mfu(flops_per_token: float, tokens_per_second: float, peak_flops: float) -> float:
    return flops_per_token * tokens_per_second / peak_flops


_GPU_PEAK_BF16 = {"A100": 312e12, "H100": 989e12, "H200": 989e12, "L40": 181e12}


def measure_matmul_flops(dtype: torch.dtype, size: int = 1024, seconds: float = 0.2,
                         device: torch.device | None = None) -> float:
    """FLOP/s of square matmuls of `size` in `dtype` on `device` (default: the CPU, at the
    current torch thread count): the best of repeated timings over about `seconds`."""
    device = device or HOST
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    torch.mm(a, b)  # warm-up: kernel selection, page faults
    best, spent = 0.0, 0.0
    while spent < seconds:
        start = time.perf_counter()
        torch.mm(a, b)
        elapsed = time.perf_counter() - start
        spent += elapsed
        best = max(best, 2 * size**3 / elapsed)
    return best


def default_peak_flops(dtype: str, num_threads: int) -> float:
    """The peak MFU divides by, for `dtype` ("float32" | "bfloat16") on this machine."""
    if torch.cuda.is_available():  # ---- GPU only: the datasheet figure
        name = torch.cuda.get_device_name()
        return next((v for k, v in _GPU_PEAK_BF16.items() if k in name), 1e14)
    previous = torch.get_num_threads()
    torch.set_num_threads(max(num_threads, 1))
    try:
        return measure_matmul_flops(torch.bfloat16 if dtype == "bfloat16" else torch.float32)
    finally:
        torch.set_num_threads(previous)



@dataclass(frozen=True)
class ModelShape:
    num_params: int
    num_layers: int
    hidden_size: int

    @staticmethod
    def of(model: torch.nn.Module) -> "ModelShape":
        config = model.config
        return ModelShape(num_params=sum(p.numel() for p in model.parameters()),
                          num_layers=config.num_hidden_layers, hidden_size=config.hidden_size)


def run_peak_flops(cfg: Config, bf16: bool) -> float:
    """The peak a run's MFU divides by: `logging.peak_flops`, else this machine's for the
    learner's compute dtype (`bf16`: bf16 matmuls, autocast or bf16 weights)."""
    if cfg.logging.peak_flops:
        return cfg.logging.peak_flops
    bf16 = bf16 or cfg.model.dtype == "bfloat16"
    return default_peak_flops("bfloat16" if bf16 else "float32", torch.get_num_threads())


def learner_throughput(cfg: Config, shape: ModelShape, result: UpdateResult,
                       peak_flops: float) -> dict[str, float]:
    """Tokens per second and MFU of one update against `peak_flops` (`run_peak_flops`)."""
    if result.seconds <= 0 or result.num_tokens == 0:
        return {}
    # Every epoch runs forward and backward over all tokens of the batch.
    tokens = result.num_tokens * cfg.algorithm.num_epochs
    tokens_per_second = tokens / result.seconds
    mean_seq_len = result.num_tokens / max(result.num_sequences, 1)
    flops = transformer_flops_per_token(shape.num_params, shape.num_layers, shape.hidden_size,
                                        int(mean_seq_len), training=True)
    return {"learner_tokens_per_second_step": tokens_per_second,
            "learner_mfu": mfu(flops, tokens_per_second, peak_flops)}
