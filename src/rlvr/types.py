"""Records that flow between the stages of a training step.

data -> `Prompt` -> rollout -> `Completion` -> rewards -> `Sample` -> algorithm/packing ->
`PackedBatch` -> learner.

Shape convention: tensor names carry a suffix of their dimensions. `R` rows of a packed batch,
`L` the packed row length, `B` sequences, `T` tokens of one sequence, `G` samples per group.
These records hold no behaviour beyond trivial derived properties; each stage owns its logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class Prompt:
    """One training or evaluation prompt, already tokenized with the chat template.

    `verifiers` names the reward functions that score completions of this prompt (a row may name
    several; how their scores combine is the reward stage's business).
    """

    id: str  # stable across runs: "<source>/<row index>"
    messages: tuple[dict[str, str], ...]
    token_ids: tuple[int, ...]  # chat template applied, generation prompt appended
    ground_truth: str
    verifiers: tuple[str, ...]
    source: str  # dataset name, for per-source metrics


@dataclass(frozen=True)
class SamplingParams:
    """What an engine needs to sample; it knows nothing about rewards or training."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 128
    stop_strings: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None


@dataclass
class Completion:
    """One sampled continuation of a prompt.

    `logprobs_T[i]` is the engine's log-probability of `token_ids_T[i]` under the
    temperature-scaled distribution it sampled from (before top-p truncation), so the learner can
    compare it with its own logprob of the same token at the same temperature.
    `finish_reason` is "stop" if an EOS/stop id/stop string ended it, "length" if it hit max_tokens.
    `model_version` is the learner step whose weights produced it (for staleness accounting).
    """

    token_ids_T: list[int]
    logprobs_T: list[float]
    finish_reason: FinishReason
    text: str
    model_version: int = 0

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass
class RewardOutcome:
    """Score of one completion plus what went wrong while computing it (never raised)."""

    score: float
    error: str | None = None  # exception text, if a verifier raised
    timed_out: bool = False
    per_verifier: dict[str, float] = field(default_factory=dict)


@dataclass
class Sample:
    """A prompt, one of its completions, the reward, and the group-relative advantage."""

    prompt: Prompt
    completion: Completion
    reward: float
    advantage: float = 0.0


@dataclass
class PackedBatch:
    """Sequences (prompt + response) packed into rows of at most `L` tokens.

    Every per-token tensor is aligned so that position `j` holds the value for predicting
    `input_ids_RL[:, j]` from the tokens before it: `response_mask_RL[r, j]` is True where token `j`
    is a response token (its logprob counts in the loss). Position ids restart at 0 at every
    sequence start; `seq_lens_per_row` lets the model confine attention to each sequence.
    """

    input_ids_RL: torch.Tensor  # [R, L] long, pad id 0 past the last sequence of a row
    position_ids_RL: torch.Tensor  # [R, L] long, restarting per sequence
    response_mask_RL: torch.Tensor  # [R, L] bool
    advantages_RL: torch.Tensor  # [R, L] float, the sequence's advantage on its response tokens
    engine_logprobs_RL: torch.Tensor  # [R, L] float, the engine's logprob of each response token
    sequence_index_RL: torch.Tensor  # [R, L] long, index of the sample in the step, -1 on padding
    seq_lens_per_row: list[list[int]]  # lengths of the packed sequences, in order, per row

    @property
    def num_rows(self) -> int:
        return int(self.input_ids_RL.shape[0])

    @property
    def num_response_tokens(self) -> int:
        return int(self.response_mask_RL.sum().item())

    def select_rows(self, rows: list[int]) -> "PackedBatch":
        """A sub-batch of whole rows (a micro-batch); sequences are never split across rows."""
        idx = torch.tensor(rows, dtype=torch.long)
        return PackedBatch(
            input_ids_RL=self.input_ids_RL[idx],
            position_ids_RL=self.position_ids_RL[idx],
            response_mask_RL=self.response_mask_RL[idx],
            advantages_RL=self.advantages_RL[idx],
            engine_logprobs_RL=self.engine_logprobs_RL[idx],
            sequence_index_RL=self.sequence_index_RL[idx],
            seq_lens_per_row=[self.seq_lens_per_row[i] for i in rows],
        )
