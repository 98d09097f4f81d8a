"""Activation checkpointing and the micro-batch token budget, chosen by measured memory.

A GPU learner is fastest with no activation checkpointing (which recomputes each layer's
forward pass: about a third more compute) and with micro-batches as large as memory allows
(measured on an H200, Qwen2.5-1.5B shape, docs/gpu.md: 1.67 s an update at 8k tokens a
micro-batch without checkpointing, 1.56 s at 16k, 2.25 s with checkpointing). Which of these
fit depends on the model, the attention kernel, compilation, autocast, the GPU and what else
holds memory on it (a colocated engine, asleep or awake), so it is measured, not estimated from
the model's shape: the learner runs probe passes (forward and backward) over one and two packed
rows of `algorithm.pack_length` tokens, reads the allocator's peak above what it held before
each, and fits a line, bytes = fixed + per_token x tokens. The budget is the most whole rows
whose predicted peak stays within what is free.

The learner asks for a plan before its first update (`Learner.plan_memory`); the device is
read through `rlvr.device`, so on CPU (no allocator figures) nothing is planned. What it is
not: a guarantee (fragmentation and a dense mask's longer rows can exceed a fit, hence the
margin, `MARGIN_FRACTION`). Learner ranks each measure their own GPU and take the fewest rows
any of them fits (`agree`), so they probe, decide and cut alike.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch

from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.device import HOST, device_memory, peak_memory, reset_peak_memory
from rlvr.types import PackedBatch

GIB = 1024 ** 3
# Of the GPU's memory, kept free beyond the fit: the caching allocator's fragmentation under
# shapes that change every step, the loss's and the optimizer step's temporaries, and kernels'
# workspaces.
MARGIN_FRACTION = 0.08


@dataclass(frozen=True)
class MemoryProbe:
    """One probe pass: `tokens` of packed rows run forward and backward, and the allocator's
    peak during it above what was allocated before it."""

    tokens: int
    peak_bytes: int


@dataclass(frozen=True)
class MemoryFit:
    """Peak bytes of a forward and backward over `tokens` tokens: fixed + per_token x tokens
    (fixed: the vocabulary chunks' logits and what does not grow with the batch)."""

    fixed_bytes: float
    per_token_bytes: float

    @classmethod
    def through(cls, small: MemoryProbe, large: MemoryProbe) -> "MemoryFit":
        """The line through two probes of different sizes. Noise can make the second probe's
        growth look smaller than it is; the slope is never taken below half the larger probe's
        average bytes a token, so a flat reading cannot promise unbounded micro-batches."""
        if large.tokens <= small.tokens:
            raise ValueError(f"the second probe ({large.tokens} tokens) must run more tokens "
                             f"than the first ({small.tokens})")
        slope = (large.peak_bytes - small.peak_bytes) / (large.tokens - small.tokens)
        slope = max(slope, large.peak_bytes / large.tokens / 2)
        return cls(fixed_bytes=max(large.peak_bytes - slope * large.tokens, 0.0),
                   per_token_bytes=slope)

    def rows_that_fit(self, available_bytes: float, row_tokens: int) -> int:
        """Most whole rows of `row_tokens` whose predicted peak is within `available_bytes`."""
        room = available_bytes - self.fixed_bytes
        return max(int(room // (self.per_token_bytes * row_tokens)), 0)


@dataclass(frozen=True)
class MemoryPlan:
    """What the learner trains with: checkpointing or not, and the micro-batch budget (rows
    x longest row, as `rlvr.algorithm.packing.plan_micro_batches` counts), with the figures
    that decided them (for the log line)."""

    gradient_checkpointing: bool
    max_tokens_per_micro_batch: int
    fit: MemoryFit
    available_bytes: float
    fits: bool = True  # False: a budget the config fixed is more than the fit allows

    def describe(self) -> str:
        return (f"{'with' if self.gradient_checkpointing else 'no'} activation checkpointing, "
                f"micro-batches of at most {self.max_tokens_per_micro_batch:,} tokens "
                f"(measured: {self.fit.per_token_bytes / 2 ** 20:.3f} MiB a token plus "
                f"{self.fit.fixed_bytes / GIB:.2f} GiB; {self.available_bytes / GIB:.1f} GiB "
                "free for them"
                + ("" if self.fits else "; algorithm.max_tokens_per_micro_batch is more than "
                   "that fit allows, kept as configured") + ")")


class MemoryPlanError(ValueError):
    """Not even one packed row fits the learner's memory, with activation checkpointing."""


# (rows, checkpointing) -> the probe of a forward and backward over that many full rows.
ProbeFn = Callable[[int, bool], MemoryProbe]


def plan_memory(probe: ProbeFn, available_bytes: Callable[[], float], row_tokens: int,
                checkpointing: bool | None, budget_tokens: int | None,
                agree: Callable[[int], int] = lambda rows: rows) -> MemoryPlan:
    """Checkpointing and budget for the learner: what the config fixed stays; what it left
    null (`checkpointing` None, `budget_tokens` None) is chosen here.

    Checkpointing, when left to choose: off if the budget (a fixed one, else one row) fits
    without it, since it costs a third more compute for every token, more than smaller
    micro-batches cost (2.25 s against 1.67 s an update, docs/gpu.md); else on. The budget,
    when left to choose: the most whole rows that fit. `available_bytes` is read after the
    probes (their gradients then exist, as during training). Raises MemoryPlanError when not
    one row fits; a fixed budget that does not fit is kept (`fits` False: the caller warns).

    `agree`: the rows that fit as every learner rank takes them (the fewest any rank fits, a
    collective), so that all ranks decide alike, probe alike and cut alike."""
    choices = [checkpointing] if checkpointing is not None else [False, True]
    wanted_rows = -(-budget_tokens // row_tokens) if budget_tokens is not None else 1
    for ckpt in choices:
        fit = MemoryFit.through(probe(1, ckpt), probe(2, ckpt))
        available = available_bytes()
        rows = agree(fit.rows_that_fit(available, row_tokens))
        if rows >= wanted_rows:
            return MemoryPlan(ckpt, budget_tokens or rows * row_tokens, fit, available)
    if rows >= 1:  # only a fixed budget can get here with a row to spare
        return MemoryPlan(choices[-1], budget_tokens or row_tokens, fit, available, fits=False)
    advice = ("" if choices[-1] else "model.gradient_checkpointing=true (or null), ")
    raise MemoryPlanError(
        f"one packed row of {row_tokens:,} tokens (algorithm.pack_length) needs about "
        f"{(fit.fixed_bytes + fit.per_token_bytes * row_tokens) / GIB:.1f} GiB for its forward "
        f"and backward{' with activation checkpointing' if choices[-1] else ''}, and "
        f"{max(available, 0) / GIB:.1f} GiB are free on the learner's GPU beside its weights, "
        f"gradients and optimizer state: set {advice}a smaller algorithm.pack_length, "
        "model.dtype=bfloat16 or model.lora.rank, shard over more GPUs, or raise "
        "model.max_memory_gb")


def probe_rows(rows: int, row_tokens: int, vocab_size: int) -> PackedBatch:
    """`rows` packed rows of `row_tokens` tokens, each one sequence of a 1-token prompt and a
    response filling the row: every position reaches the vocabulary projection, the most
    memory a row of that length can take. Fixed tokens, drawn without the global RNG."""
    generator = torch.Generator(device=HOST).manual_seed(0)
    seqs = []
    for i in range(rows):
        ids = torch.randint(0, vocab_size, (row_tokens,), generator=generator,
                            device=HOST).tolist()
        seqs.append(SequenceToPack(ids[:1], ids[1:], [0.0] * (row_tokens - 1), advantage=1.0,
                                   index=i))
    return pack_sequences(seqs, pack_length=row_tokens, share_prompts=False)


def probe_pass(model: torch.nn.Module, forward_fn, autocast: contextlib.AbstractContextManager,
               batch: PackedBatch, device: torch.device) -> MemoryProbe:
    """Forward and backward of `model` over `batch` (on `device`), as an update runs them, and
    the allocation peak above what was held before. Gradients accumulate into the parameters'
    (the caller discards them); no optimizer step, no global RNG drawn."""
    batch = batch.to(device)
    before = reset_peak_memory(device)
    with autocast:
        logprobs_RL, _ = forward_fn(model, batch, 1.0, True)
    logprobs_RL.float()[batch.response_mask_RL].sum().backward()
    return MemoryProbe(tokens=batch.num_tokens, peak_bytes=peak_memory(device) - before)


def memory_room(device: torch.device, pending_bytes: int, limit_bytes: int | None) -> float:
    """Bytes a micro-batch's forward and backward may take on `device` now: what is free
    (within `limit_bytes` of the whole device, if set), less `pending_bytes` still to be
    allocated for good (the optimizer's state before its first step) and the margin."""
    memory = device_memory(device)
    if memory is None:
        raise ValueError(f"{device} has no allocator figures to plan memory with")
    room = float(memory.free)
    if limit_bytes is not None:
        room = min(room, limit_bytes - memory.allocated)
    return room - pending_bytes - MARGIN_FRACTION * (limit_bytes or memory.total)
