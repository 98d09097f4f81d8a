"""Learner throughput and model FLOPs utilisation for a step's update.

MFU is relative to a peak figure: on CPU the matmul rates measured on this machine (see
`default_peak_flops`), or `logging.peak_flops` when the user knows better.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.config import Config
from rlvr.learner import UpdateResult


def transformer_flops_per_token(num_params: int, num_layers: int, hidden_size: int, seq_len: int,
                                training: bool = True) -> float:
    """6N + 12 L H S per trained token (weights plus attention scores); a third for forward."""
    forward = 2 * num_params + 4 * num_layers * hidden_size * seq_len
    return 3 * forward if training else forward


def mfu(flops_per_token: float, tokens_per_second: float, peak_flops: float) -> float:
    return flops_per_token * tokens_per_second / peak_flops


# Measured matmul rates (FLOP/s) of the 2-core AMD EPYC this project develops on, per thread
# count. MFU on CPU is relative to these; set logging.peak_flops for another machine.
_CPU_PEAK = {("float32", 1): 96e9, ("float32", 2): 180e9,
             ("bfloat16", 1): 381e9, ("bfloat16", 2): 770e9}
_GPU_PEAK_BF16 = {"A100": 312e12, "H100": 989e12, "H200": 989e12, "L40": 181e12}


def default_peak_flops(dtype: str, num_threads: int) -> float:
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        return next((v for k, v in _GPU_PEAK_BF16.items() if k in name), 1e14)
    return _CPU_PEAK.get((dtype, min(max(num_threads, 1), 2)), 180e9)



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


def learner_throughput(cfg: Config, shape: ModelShape, result: UpdateResult,
                       bf16: bool = False) -> dict[str, float]:
    """Tokens per second and MFU of one update; `bf16`: the run computes in bf16 (its peak)."""
    if result.seconds <= 0 or result.num_tokens == 0:
        return {}
    # Every epoch runs forward and backward over all tokens of the batch.
    tokens = result.num_tokens * cfg.algorithm.num_epochs
    tokens_per_second = tokens / result.seconds
    mean_seq_len = result.num_tokens / max(result.num_sequences, 1)
    flops = transformer_flops_per_token(shape.num_params, shape.num_layers, shape.hidden_size,
                                        int(mean_seq_len), training=True)
    bf16 = bf16 or cfg.model.dtype == "bfloat16"
    peak = cfg.logging.peak_flops or default_peak_flops("bfloat16" if bf16 else "float32",
                                                        torch.get_num_threads())
    return {"learner_tokens_per_second_step": tokens_per_second,
            "learner_mfu": mfu(flops, tokens_per_second, peak)}
