"""Learner throughput and model FLOPs utilisation for a step's update.

MFU is relative to a peak figure: on CPU the matmul rates measured on this machine (see
`rlvr.metrics.default_peak_flops`), or `logging.peak_flops` when the user knows better.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.config import Config
from rlvr.learner import UpdateResult
from rlvr.metrics import default_peak_flops, mfu, transformer_flops_per_token


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


def learner_throughput(cfg: Config, shape: ModelShape, result: UpdateResult) -> dict[str, float]:
    if result.seconds <= 0 or result.num_tokens == 0:
        return {}
    # Every epoch runs forward and backward over all tokens of the batch.
    tokens = result.num_tokens * cfg.algorithm.num_epochs
    tokens_per_second = tokens / result.seconds
    mean_seq_len = result.num_tokens / max(result.num_sequences, 1)
    flops = transformer_flops_per_token(shape.num_params, shape.num_layers, shape.hidden_size,
                                        int(mean_seq_len), training=True)
    bf16 = cfg.model.bf16_autocast or cfg.model.dtype == "bfloat16"
    peak = cfg.logging.peak_flops or default_peak_flops("bfloat16" if bf16 else "float32",
                                                        torch.get_num_threads())
    return {"learner_tokens_per_second_step": tokens_per_second,
            "learner_mfu": mfu(flops, tokens_per_second, peak)}
