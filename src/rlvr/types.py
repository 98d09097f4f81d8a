"""Records that flow between the stages of a training step.

data -> `Prompt` -> rollout -> `Completion` -> rewards -> `Sample` -> algorithm/packing ->
`PackedBatch` -> learner.

Shape convention: tensor names carry a suffix of their dimensions. `R` rows of a packed batch,
`L` the packed row length, `B` sequences, `T` tokens of one sequence, `G` samples per group.
These records hold no behaviour beyond trivial derived properties; each stage owns its logic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import torch

FinishReason = Literal["stop", "length"]
# The only ends a sample may have: an engine's other reasons ("abort": a server stopping, or a
# request dropped) mean the sample was cut short, and every engine refuses it.
FINISH_REASONS: tuple[str, ...] = get_args(FinishReason)


@dataclass(frozen=True)
class Prompt:
    """One training or evaluation prompt, already tokenized with the chat template.

    `verifiers` names the reward functions that score completions of this prompt (a row may name
    several; how their scores combine is the reward stage's business). `metadata_json` holds
    the row's other fields as JSON text (the record stays immutable and hashable), for
    verifiers that declare `metadata`; `metadata` gives them as a dict.
    """

    id: str  # stable across runs: "<source>/<row index>"
    messages: tuple[dict[str, str], ...]
    token_ids: tuple[int, ...]  # chat template applied, generation prompt appended
    ground_truth: str
    verifiers: tuple[str, ...]
    source: str  # dataset name, for per-source metrics
    metadata_json: str = ""  # "" when the source keeps none

    @property
    def metadata(self) -> dict[str, Any]:
        """The row's other fields, a fresh dict each call."""
        return json.loads(self.metadata_json) if self.metadata_json else {}


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

    `logprobs_T[i]` is the engine's log-probability of `token_ids_T[i]` under the distribution it
    was sampled from: temperature-scaled, truncated to the top-p nucleus and renormalised (every
    engine follows this). With top_p = 1 the learner's logprob at the same temperature is the
    same quantity; with top_p < 1 it is lower by the log of the nucleus mass.
    `finish_reason` is "stop" if an EOS/stop id/stop string ended it, "length" if it hit max_tokens.
    `model_version` is the policy version (weight updates applied) that produced it, for
    staleness accounting: the oldest version of any of its tokens.

    A completion built by a workflow over several turns (`rlvr.workflows`) also holds tokens the
    model did not sample (feedback, tool output, the chat template's turn markers):
    `loss_mask_T[i]` is 1 for a token the model sampled, 0 for one it was given, whose logprob
    is 0.0 and which receives no gradient. `versions_T[i]` is the version that sampled token i.
    None means every token is the model's, of `model_version` (one engine call).
    """

    token_ids_T: list[int]
    logprobs_T: list[float]
    finish_reason: FinishReason
    text: str
    model_version: int = 0
    loss_mask_T: list[int] | None = None
    versions_T: list[int] | None = None

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

    A row holds units: a prompt followed by the responses that share it (a group's samples share
    their prompt, so it is run once), or a prompt with a single response. Attention is confined
    to a chunk and its parent: a response chunk sees its prompt chunk and its own earlier tokens,
    never a sibling response. Position ids restart at 0 for every prompt and continue from the
    prompt length within each response. Per-token values sit at the position of the token they
    concern: `response_mask_RL[r, j]` is True where token `j` is a response token, whose logprob
    is predicted by the hidden state at `predictor_pos_RL[r, j]` (j - 1, or the prompt's last
    position for a response's first token).
    """

    input_ids_RL: torch.Tensor  # [R, L] long, pad id past the last unit of a row
    position_ids_RL: torch.Tensor  # [R, L] long
    response_mask_RL: torch.Tensor  # [R, L] bool
    advantages_RL: torch.Tensor  # [R, L] float, the sequence's advantage on its response tokens
    engine_logprobs_RL: torch.Tensor  # [R, L] float, the engine's logprob of each response token
    sequence_index_RL: torch.Tensor  # [R, L] long, sample index; a shared prompt carries its
    #                                  first sample's; -1 on padding
    segment_ids_RL: torch.Tensor  # [R, L] long, chunk id within the row, -1 on padding
    parent_segment_RL: torch.Tensor  # [R, L] long, the chunk a response chunk also sees, else -1
    predictor_pos_RL: torch.Tensor  # [R, L] long, see above; -1 where not a response token
    seq_lens_per_row: list[list[int]]  # token counts of the units packed in each row, in order
    num_sequences: int = 0  # samples in the batch

    @property
    def num_rows(self) -> int:
        return int(self.input_ids_RL.shape[0])

    @property
    def num_response_tokens(self) -> int:
        return int(self.response_mask_RL.sum().item())

    @property
    def num_tokens(self) -> int:
        """Tokens that run through the model (shared prompts once), padding excluded."""
        return sum(sum(lens) for lens in self.seq_lens_per_row)

    def select_rows(self, rows: list[int]) -> "PackedBatch":
        """A sub-batch of whole rows (a micro-batch); units are never split across rows."""
        idx = torch.tensor(rows, dtype=torch.long, device=self.input_ids_RL.device)
        seq_RL = self.sequence_index_RL[idx]
        return PackedBatch(
            input_ids_RL=self.input_ids_RL[idx],
            position_ids_RL=self.position_ids_RL[idx],
            response_mask_RL=self.response_mask_RL[idx],
            advantages_RL=self.advantages_RL[idx],
            engine_logprobs_RL=self.engine_logprobs_RL[idx],
            sequence_index_RL=seq_RL,
            segment_ids_RL=self.segment_ids_RL[idx],
            parent_segment_RL=self.parent_segment_RL[idx],
            predictor_pos_RL=self.predictor_pos_RL[idx],
            seq_lens_per_row=[self.seq_lens_per_row[i] for i in rows],
            num_sequences=int(seq_RL[self.response_mask_RL[idx]].unique().numel()),
        )

    def trimmed(self) -> "PackedBatch":
        """Without the columns past its longest row (a sub-batch is padded to the longest row
        of the batch it came from). Units start at column 0, so the cut is pure padding."""
        width = max(1, max((sum(lens) for lens in self.seq_lens_per_row), default=1))
        if width == self.input_ids_RL.shape[1]:
            return self
        return PackedBatch(**{f: getattr(self, f)[:, :width] for f in _PACKED_TENSORS},
                           seq_lens_per_row=self.seq_lens_per_row,
                           num_sequences=self.num_sequences)

    def to(self, device: torch.device, non_blocking: bool = False) -> "PackedBatch":
        """The same batch on `device` (itself when it is there already). Batches are built on
        the host; the learner moves each micro-batch to its device just before its forward."""
        if self.input_ids_RL.device == device:
            return self
        moved = {f: getattr(self, f).to(device, non_blocking=non_blocking)
                 for f in _PACKED_TENSORS}
        return PackedBatch(**moved, seq_lens_per_row=self.seq_lens_per_row,
                           num_sequences=self.num_sequences)


_PACKED_TENSORS = ("input_ids_RL", "position_ids_RL", "response_mask_RL", "advantages_RL",
                   "engine_logprobs_RL", "sequence_index_RL", "segment_ids_RL",
                   "parent_segment_RL", "predictor_pos_RL")
