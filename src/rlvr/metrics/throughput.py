"""Learner throughput and model FLOPs utilisation for a step's update.

MFU is relative to a peak figure: `logging.peak_flops` when the user knows better; on a GPU its
datasheet's dense bf16 rate; on a CPU the matmul rate measured on this machine, at the
learner's thread count and compute dtype, by a short probe the first time it is needed
(`measure_matmul_flops`; CPUs of one cloud instance type differ by 5x in bf16, so no table of
figures can serve). `benchmarks/peak.py` measures the same peak with more care;
`benchmarks/gpu.py` measures a GPU's (a large bf16 matmul) beside its datasheet figure.

Two FLOP counts: `transformer_flops_per_token` (6N + 12 L H S per token, N every parameter,
the run metric `learner_mfu`), and `update_flops`, what a packed batch's update computes: the
decoder's weights on every token run, the output projection on response tokens only (the
learner computes no other logits) and attention on the (query, key) pairs actually attended,
with no recomputation (activation checkpointing, the chunked head's) counted.
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


# Dense bf16 tensor-core rates from the datasheets (no sparsity), by a part of the device's
# name; longer names first, so "H100 PCIe" is not read as the SXM part.
_GPU_PEAK_BF16 = {"H100 PCIe": 756e12, "H100 NVL": 835e12, "A100": 312e12, "H100": 989e12,
                  "H200": 989e12, "L40": 181e12}


def datasheet_peak_flops(device_name: str) -> float | None:
    """The datasheet's dense bf16 FLOP/s of a GPU named `device_name`, or None if unknown."""
    return next((v for k, v in _GPU_PEAK_BF16.items() if k in device_name), None)


def measure_matmul_flops(dtype: torch.dtype, size: int = 1024, seconds: float = 0.2,
                         device: torch.device | None = None) -> float:
    """FLOP/s of square matmuls of `size` in `dtype` on `device` (default: the CPU, at the
    current torch thread count): the best of repeated timings over about `seconds`. A GPU
    runs matmuls asynchronously: each timing there covers ten, between synchronisations."""
    device = device or HOST
    cuda = device.type == "cuda"
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    out = torch.mm(a, b)  # warm-up: kernel selection, page faults
    repeats = 10 if cuda else 1
    best, spent = 0.0, 0.0
    while spent < seconds:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            torch.mm(a, b, out=out)
        if cuda:
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - start
        spent += elapsed
        best = max(best, repeats * 2 * size**3 / elapsed)
    return best


def default_peak_flops(dtype: str, num_threads: int) -> float:
    """The peak MFU divides by, for `dtype` ("float32" | "bfloat16") on this machine."""
    if torch.cuda.is_available():  # ---- GPU only: the datasheet figure
        return datasheet_peak_flops(torch.cuda.get_device_name()) or 1e14
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
    """Tokens per second and MFU of one update (every learner rank's tokens) against the peak
    of as many devices as the run has learner ranks, each `peak_flops` (`run_peak_flops`)."""
    if result.seconds <= 0 or result.num_tokens == 0:
        return {}
    # Every epoch runs forward and backward over all tokens of the batch.
    tokens = result.num_tokens * cfg.algorithm.num_epochs
    tokens_per_second = tokens / result.seconds
    mean_seq_len = result.num_tokens / max(result.num_sequences, 1)
    flops = transformer_flops_per_token(shape.num_params, shape.num_layers, shape.hidden_size,
                                        int(mean_seq_len), training=True)
    # Every rank's tokens are counted, so every rank's device counts: one device's peak (rank
    # 0's, what `run_peak_flops` measures) made the MFU grow with the number of ranks.
    return {"learner_tokens_per_second_step": tokens_per_second,
            "learner_mfu": mfu(flops, tokens_per_second, peak_flops * max(cfg.world_size, 1))}


@dataclass(frozen=True)
class UpdateFlops:
    """The FLOPs of one forward and backward pass over a packed batch (`update_flops`)."""

    decoder: float  # the decoder layers' weights, 6 per weight per token run
    head: float  # the output projection, 6 H V per response token
    attention: float  # 12 (heads x head_dim) per attended (query, key) pair per layer

    @property
    def total(self) -> float:
        return self.decoder + self.head + self.attention


def decoder_weight_count(model: torch.nn.Module) -> int:
    """Weights of the decoder's repeated layers (every matmul but the output projection; the
    embedding is a lookup, no FLOPs)."""
    from rlvr.models import decoder_layers

    return sum(p.numel() for p in decoder_layers(model).parameters())


def update_flops(model: torch.nn.Module, batch) -> UpdateFlops:
    """What a forward and backward pass over `batch` (a `PackedBatch`) computes under `model`:
    every token run through the decoder (padding excluded, shared prompts once), the output
    projection at response positions, and attention over the pairs attended. A token at
    position p attends to p + 1 keys in either packing layout (its sequence up to itself; a
    response after a shared prompt sees the prompt and its own earlier tokens), so the pairs
    are the sum of position + 1 over real tokens, whatever kernel runs them (sdpa's dense mask
    computes more, which counts as waste, not work). Recomputation is not counted."""
    config = model.config.get_text_config()
    real_RL = batch.segment_ids_RL >= 0
    pairs = float((batch.position_ids_RL[real_RL] + 1).sum())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    width = config.num_attention_heads * head_dim
    head_weights = model.get_output_embeddings().weight.numel()
    return UpdateFlops(decoder=6.0 * decoder_weight_count(model) * batch.num_tokens,
                       head=6.0 * head_weights * batch.num_response_tokens,
                       attention=12.0 * config.num_hidden_layers * width * pairs)
