"""Per-token logprobs (and entropy) of a packed batch under a causal LM.

Packed rows hold several units (a prompt and the responses sharing it); a boolean causal mask
confines each response to its prompt and itself, and position ids restart per prompt, so a
packed row gives the same logprobs as its sequences run one by one (tested). Needs sdpa attention: eager attention silently ignores a
boolean 4-D mask, so `rlvr.models.load_causal_lm` pins sdpa.
"""

from __future__ import annotations

import torch

from rlvr.types import PackedBatch


def packed_attention_mask(segment_ids_RL: torch.Tensor,
                          parent_segment_RL: torch.Tensor) -> torch.Tensor:
    """[R, 1, L, L] bool: query i may attend key j iff j <= i and j lies in i's own chunk or in
    i's parent chunk (a response's prompt).

    Padding positions each form a chunk of their own (they attend to themselves only), so no
    query row is fully masked: a fully masked row makes sdpa return NaN, which would leak into
    gradients even though padding never reaches the loss.
    """
    rows, length = segment_ids_RL.shape
    unique_pad_RL = -2 - torch.arange(length).expand(rows, length)
    segment_RL = torch.where(segment_ids_RL >= 0, segment_ids_RL, unique_pad_RL)
    key_R1L = segment_RL[:, None, :]
    allowed_RLL = (key_R1L == segment_RL[:, :, None]) | (key_R1L == parent_segment_RL[:, :, None])
    causal_LL = torch.ones(length, length, dtype=torch.bool).tril()
    return (allowed_RLL & causal_LL)[:, None]


def forward_logprobs(model: torch.nn.Module, batch: PackedBatch, temperature: float,
                     with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logprobs_RL[r, j] = log p(input_ids[r, j] | tokens before it in its sequence).

    Logits are divided by the sampling temperature, so these are comparable to the engine's
    logprobs. Only response positions are computed (prompt positions hold 0): the vocabulary
    projection and its softmax are the largest activations of a small model, and prompt tokens
    never reach the loss.
    """
    mask_R1LL = packed_attention_mask(batch.segment_ids_RL, batch.parent_segment_RL)
    target_RL = batch.response_mask_RL
    rows_N = torch.arange(len(target_RL))[:, None].expand_as(target_RL)[target_RL]
    hidden_RLH = _hidden_states(model, batch, mask_R1LL)
    hidden_NH = hidden_RLH[rows_N, batch.predictor_pos_RL[target_RL]]
    logits_NV = model.get_output_embeddings()(hidden_NH).float() / temperature
    logp_NV = torch.log_softmax(logits_NV, dim=-1)
    token_logp_N = logp_NV.gather(-1, batch.input_ids_RL[target_RL][:, None]).squeeze(-1)
    logprobs_RL = torch.zeros(target_RL.shape, dtype=token_logp_N.dtype)
    logprobs_RL = logprobs_RL.masked_scatter(target_RL, token_logp_N)
    entropy_RL = None
    if with_entropy:
        with torch.no_grad():  # a metric only: keep it out of the graph
            entropy_N = -(logp_NV.exp() * logp_NV).sum(-1)
            entropy_RL = torch.zeros(target_RL.shape).masked_scatter(target_RL, entropy_N)
    return logprobs_RL, entropy_RL


def _hidden_states(model: torch.nn.Module, batch: PackedBatch, mask_R1LL: torch.Tensor):
    """Final hidden states [R, L, H] from the decoder stack, without the vocabulary projection."""
    if getattr(model.config, "final_logit_softcapping", None):
        raise NotImplementedError("models with final logit softcapping are not supported yet")
    out = model.get_decoder()(input_ids=batch.input_ids_RL, position_ids=batch.position_ids_RL,
                              attention_mask=mask_R1LL, use_cache=False)
    return out.last_hidden_state
