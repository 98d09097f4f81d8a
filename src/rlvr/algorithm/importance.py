"""Correction for the mismatch between the engine that sampled and the learner that trains.

The engine (another implementation, a bf16 copy, an older version of the weights when
generation runs ahead) and
the learner assign different probabilities to the same tokens. The ratio
rho = exp(logp_old - logp_engine) reweights each token's policy-gradient term:
- `none`: truncated importance sampling (TIS): each token weighted by its rho clamped to
  [lower, upper];
- `token`: masked importance sampling (MIS): tokens whose rho falls outside the bounds are
  dropped from the policy-gradient term, the rest weighted by their rho;
- `sequence`: sequence-level MIS: a sequence's rho is exp(mean of its tokens' log rho), the
  geometric mean; a sequence whose rho falls outside the bounds is dropped whole, the others
  weight every token by it. This is open-instruct's `rho_mask_sequence_level`
  (`grpo_utils.compute_rho_correction`) with its mask bounds set equal to its clamp bounds
  (its `test_rho_mask_sequence_level` gives token rhos [0.25, 1, 4] the weights [1, 1, 1]);
- `sequence_truncate`: the sequence's geometric-mean rho, clamped to the bounds, weights every
  token; no sequence is dropped. This is open-instruct's `rho_mask_sequence_level` with its
  mask bounds off (their default): what `--rho_mask_sequence_level` alone trains. Token rhos
  all 3 with bounds [0, 2]: `sequence` drops the sequence, `sequence_truncate` weights it 2;
- `sequence_token`: the sequence's geometric-mean rho only decides which sequences are dropped;
  each token of a kept sequence is weighted by its own rho clamped to the bounds, as in `none`
  (geometric rejection with token-level truncated IS). The weight then still corrects the
  token that drifted, not only the sequence's average drift.
One surprising token no longer drops its sequence in the sequence modes: only the sequence's
overall drift counts, and each token's log rho is clamped to +-10 before the mean, as
open-instruct clamps it (so one token of log rho 30 among 20 moves the mean by 0.5, not 1.5:
weight e^0.5 = 1.65, not a dropped sequence). The default is `none` (`algorithm.rho_mask`),
open-instruct's default too (its mask bounds are off unless set). Porting open-instruct's
flags: mask bounds off -> `none` (token level) or `sequence_truncate`; mask bounds equal to the
clamp bounds -> `token` or `sequence`; other mask bounds have no rlvr equivalent (one pair of
bounds here).
Dropped tokens leave only the policy-gradient term; the KL term stays on them, as in
open-instruct (the penalty keeps the policy near the reference whatever sampled the token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from rlvr.algorithm.sequences import sequence_mean_per_token
from rlvr.registry import Registry

# open-instruct's clamp of each token's log rho, before any sequence mean (`compute_rho_correction`)
LOG_RHO_CLAMP = 10.0


@dataclass(frozen=True)
class RhoCorrection:
    lower: float
    upper: float
    mask: str = "none"  # none | token | sequence | sequence_truncate | sequence_token


@dataclass
class RhoResult:
    weight_RL: torch.Tensor  # [R, L] detached weight of each kept token's policy-gradient term
    keep_RL: torch.Tensor  # [R, L] bool: response tokens whose policy-gradient term stays
    rho_RL: torch.Tensor  # [R, L] unclamped token rho (1 outside the response mask), for metrics


# (log_rho_RL, response_mask_RL, sequence_ids_RL or None, correction) -> (weight_RL, keep_RL):
# log rho is 0 outside the response mask; weights are read only where keep is true.
RhoMaskFn = Callable[[torch.Tensor, torch.Tensor, Optional[torch.Tensor], RhoCorrection],
                     tuple[torch.Tensor, torch.Tensor]]
RHO_MASKS: Registry[RhoMaskFn] = Registry("algorithm.rho_mask")


def rho_correction(old_logprobs_RL: torch.Tensor, engine_logprobs_RL: torch.Tensor,
                   response_mask_RL: torch.Tensor, sequence_ids_RL: torch.Tensor | None,
                   correction: RhoCorrection) -> RhoResult:
    if correction.mask not in RHO_MASKS:
        raise ValueError(f"rho mask '{correction.mask}' is not one of {tuple(RHO_MASKS)}")
    log_rho_RL = (old_logprobs_RL - engine_logprobs_RL).detach()
    log_rho_RL = torch.where(response_mask_RL, log_rho_RL, torch.zeros_like(log_rho_RL))
    log_rho_RL = log_rho_RL.clamp(-LOG_RHO_CLAMP, LOG_RHO_CLAMP)
    weight_RL, keep_RL = RHO_MASKS[correction.mask](log_rho_RL, response_mask_RL,
                                                    sequence_ids_RL, correction)
    return RhoResult(weight_RL=weight_RL, keep_RL=keep_RL, rho_RL=torch.exp(log_rho_RL))


def _inside(rho_RL: torch.Tensor, c: RhoCorrection) -> torch.Tensor:
    return (rho_RL >= c.lower) & (rho_RL <= c.upper)


def _sequence_rho(log_rho_RL: torch.Tensor, response_mask_RL: torch.Tensor,
                  sequence_ids_RL: torch.Tensor | None) -> torch.Tensor:
    """[R, L] the geometric mean of each sequence's token rhos, on each of its tokens."""
    if sequence_ids_RL is None:
        raise ValueError("sequence-level rho masking needs sequence ids")
    return torch.exp(sequence_mean_per_token(log_rho_RL, sequence_ids_RL, response_mask_RL))


@RHO_MASKS.register("none")
def _truncated(log_rho_RL: torch.Tensor, response_mask_RL: torch.Tensor,
               sequence_ids_RL: torch.Tensor | None, c: RhoCorrection
               ) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.exp(log_rho_RL).clamp(c.lower, c.upper), response_mask_RL


@RHO_MASKS.register("token")
def _token_mask(log_rho_RL: torch.Tensor, response_mask_RL: torch.Tensor,
                sequence_ids_RL: torch.Tensor | None, c: RhoCorrection
                ) -> tuple[torch.Tensor, torch.Tensor]:
    rho_RL = torch.exp(log_rho_RL)
    return rho_RL.clamp(c.lower, c.upper), response_mask_RL & _inside(rho_RL, c)


@RHO_MASKS.register("sequence")
def _sequence_mask(log_rho_RL: torch.Tensor, response_mask_RL: torch.Tensor,
                   sequence_ids_RL: torch.Tensor | None, c: RhoCorrection
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    seq_rho_RL = _sequence_rho(log_rho_RL, response_mask_RL, sequence_ids_RL)
    # A kept sequence's rho is inside the bounds: clamping it would change nothing.
    weight_RL = torch.where(response_mask_RL, seq_rho_RL, torch.ones_like(seq_rho_RL))
    return weight_RL, response_mask_RL & _inside(seq_rho_RL, c)


@RHO_MASKS.register("sequence_truncate")
def _sequence_truncated(log_rho_RL: torch.Tensor, response_mask_RL: torch.Tensor,
                        sequence_ids_RL: torch.Tensor | None, c: RhoCorrection
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    seq_rho_RL = _sequence_rho(log_rho_RL, response_mask_RL, sequence_ids_RL)
    weight_RL = torch.where(response_mask_RL, seq_rho_RL.clamp(c.lower, c.upper),
                            torch.ones_like(seq_rho_RL))
    return weight_RL, response_mask_RL


@RHO_MASKS.register("sequence_token")
def _sequence_mask_token_weight(log_rho_RL: torch.Tensor, response_mask_RL: torch.Tensor,
                                sequence_ids_RL: torch.Tensor | None, c: RhoCorrection
                                ) -> tuple[torch.Tensor, torch.Tensor]:
    seq_rho_RL = _sequence_rho(log_rho_RL, response_mask_RL, sequence_ids_RL)
    return (torch.exp(log_rho_RL).clamp(c.lower, c.upper),
            response_mask_RL & _inside(seq_rho_RL, c))
