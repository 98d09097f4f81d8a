"""Per-token logprobs (and entropy) of a packed batch under a causal LM.

Packed rows hold several units (a prompt and the responses sharing it); a boolean causal mask
confines each response to its prompt and itself, and position ids restart per prompt, so a
packed row gives the same logprobs as its sequences run one by one (tested). Needs sdpa
attention: eager attention silently ignores a boolean 4-D mask, so `rlvr.models.load_causal_lm`
pins sdpa.

The learner runs the decoder and the vocabulary projection itself, at response positions only,
instead of the model's `forward`; so whatever an architecture's `forward` does to its logits
(Cohere multiplies them, Granite divides them, Gemma2 soft-caps them, MiniCPM3 scales the hidden
states before the head) is repeated here from `LOGIT_RECIPES`. Missing it would train the policy
at a different temperature than the engine samples at. `check_logit_path` compares this path
with the model's own `forward` once per loaded model and refuses one it does not reproduce.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch.distributed.fsdp import FSDPModule

from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.types import PackedBatch


@dataclass(frozen=True)
class LogitRecipe:
    """What an architecture's `forward` does between its decoder and its logits besides the
    output projection. Each step is named by the config attribute holding its value and is
    skipped when the attribute is missing or None, as the models' own forwards do."""

    hidden_divisor: str | None = None  # hidden states divided by it before the projection
    logit_multiplier: str | None = None
    logit_divisor: str | None = None
    softcap: str | None = None  # logits -> cap * tanh(logits / cap)


_PLAIN = LogitRecipe()
_TIMES_LOGIT_SCALE = LogitRecipe(logit_multiplier="logit_scale")
_OVER_LOGITS_SCALING = LogitRecipe(logit_divisor="logits_scaling")
_FINAL_SOFTCAP = LogitRecipe(softcap="final_logit_softcapping")

# Keyed on `config.model_type` rather than on attribute names, because a name does not say what
# a forward does with it: `logits_scaling` divides Granite's logits, multiplies HyperCLOVAX's and
# divides MiniCPM3's hidden states; and Gemma3's multimodal forward ignores the soft-cap its
# text config may hold, which Gemma3ForCausalLM applies. Read off each `*ForCausalLM.forward` of
# transformers 5.19 and tested against it (tests/learner/test_logit_scaling.py), except gemma3n
# (the multimodal one: its vision tower needs timm), whose forward is Gemma4's line for line.
LOGIT_RECIPES: dict[str, LogitRecipe] = {
    **dict.fromkeys(["cohere", "cohere2", "cohere2_moe"], _TIMES_LOGIT_SCALE),
    **dict.fromkeys(["granite", "granitemoe", "granitemoeshared", "granitemoehybrid"],
                    _OVER_LOGITS_SCALING),
    "hyperclovax": LogitRecipe(logit_multiplier="logits_scaling"),
    "falcon_h1": LogitRecipe(logit_multiplier="lm_head_multiplier"),
    "minicpm3": LogitRecipe(hidden_divisor="logits_scaling"),  # hidden_size / dim_model_base
    **dict.fromkeys(["gemma2", "gemma3_text", "gemma3n", "gemma3n_text", "gemma4", "gemma4_text",
                     "gemma4_unified", "gemma4_unified_text", "vaultgemma", "nanochat"],
                    _FINAL_SOFTCAP),
    "recurrent_gemma": LogitRecipe(softcap="logits_soft_cap"),
    "gemma3": _PLAIN,
}

# Settings that change the logits in some architecture's forward: the ones above, plus those of
# forwards rlvr cannot run (xLSTM, Inkling) and of MiniCPM's remote code (`dim_model_base`).
# An architecture missing from LOGIT_RECIPES that sets one is refused, not trusted to ignore it:
# on weights whose logits are still small (a fresh init) the probe cannot see a soft-cap.
LOGIT_SETTINGS = frozenset(
    ({getattr(r, f.name) for r in LOGIT_RECIPES.values() for f in fields(r)} - {None})
    | {"output_logit_soft_cap", "logits_mup_width_multiplier", "unpadded_vocab_size",
       "dim_model_base"})


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
    target_RL = batch.response_mask_RL
    logits_NV = response_logits(model, batch) / temperature
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


def response_logits(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """Float32 logits [N, V] predicting the batch's N response tokens (row-major order)."""
    mask_R1LL = packed_attention_mask(batch.segment_ids_RL, batch.parent_segment_RL)
    target_RL = batch.response_mask_RL
    rows_N = torch.arange(len(target_RL))[:, None].expand_as(target_RL)[target_RL]
    hidden_RLH = _hidden_states(model, batch, mask_R1LL)
    hidden_NH = hidden_RLH[rows_N, batch.predictor_pos_RL[target_RL]]
    return output_logits(model, hidden_NH)


def output_logits(model: torch.nn.Module, hidden_NH: torch.Tensor) -> torch.Tensor:
    """Float32 logits [N, V] from final hidden states [N, H], as the model's own `forward`
    computes them: the output projection plus its architecture's `LOGIT_RECIPES` steps."""
    recipe = LOGIT_RECIPES.get(model.config.model_type, _PLAIN)
    config = model.config.get_text_config()  # a multimodal config nests the values
    if (divisor := _setting(config, recipe.hidden_divisor)) is not None:
        hidden_NH = hidden_NH / divisor
    logits_NV = model.get_output_embeddings()(hidden_NH)
    # Each step runs in the model's dtype and order, as its forward does, so a 16-bit model's
    # logits match its forward's bit for bit too; only then are they upcast for the softmax.
    if (multiplier := _setting(config, recipe.logit_multiplier)) is not None:
        logits_NV = logits_NV * multiplier
    if (divisor := _setting(config, recipe.logit_divisor)) is not None:
        logits_NV = logits_NV / divisor
    if (cap := _setting(config, recipe.softcap)) is not None:
        logits_NV = torch.tanh(logits_NV / cap) * cap
    return logits_NV.float()


def _setting(config, name: str | None) -> float | None:
    return getattr(config, name, None) if name is not None else None


def _hidden_states(model: torch.nn.Module, batch: PackedBatch, mask_R1LL: torch.Tensor):
    """Final hidden states [R, L, H] from the decoder stack, without the vocabulary projection."""
    out = model.get_decoder()(input_ids=batch.input_ids_RL, position_ids=batch.position_ids_RL,
                              attention_mask=mask_R1LL, use_cache=False)
    return out.last_hidden_state


# Tolerances on the relative gap (logits, packing) for float32 and for 16-bit weights. Same
# inputs give the same logits in either dtype (0 measured); a packed row against its sequence
# run alone differs by kernel rounding, which bfloat16 accumulates over the layers (0.03
# measured on SmolLM2-135M, 3e-6 in float32). A 1% temperature error is a gap of 0.01.
_FLOAT32_TOLERANCES = (1e-5, 1e-3)
_HALF_TOLERANCES = (1e-3, 0.1)


def check_logit_path(model: torch.nn.Module) -> None:
    """Raise ValueError unless `forward_logprobs` reproduces the model's own `forward`.

    Call it once per loaded model, before `shard_policy` (on a sharded model the learner's path
    only runs inside the root's FSDP hooks). A 6-token prompt with two 5-token responses is
    packed into one row, and two things are compared:
    - the logits: `model(...)` is given the very same packed row, so both paths run the same
      decoder computation and any difference comes from what follows it;
    - the packing: the second response's logits against `model(...)` on its sequence alone,
      which recurrent layers (they ignore the attention mask) fail.
    Logits are compared up to a per-position constant, which softmax ignores, relative to their
    size (`_TOLERANCES`).
    """
    if isinstance(model, FSDPModule):
        raise ValueError("check_logit_path needs the unsharded model: call it before "
                         "shard_policy")
    name = f"{type(model).__name__} (model_type '{model.config.model_type}')"
    _refuse_unknown_logit_settings(model, name)
    first, second = _probe_sequences(model.config.get_text_config().vocab_size)
    batch = pack_sequences([first, second], pack_length=16)
    was_training = model.training
    model.eval()  # dropout would tell the paths apart
    try:
        with torch.no_grad():
            try:
                ours_NV = response_logits(model, batch)
            except Exception as error:  # whatever it is, the learner cannot train this model
                raise ValueError(f"{name}: the learner's path (`get_decoder()` on the packed "
                                 f"row, then `get_output_embeddings()`) fails: {error}") from error
            own_NV = _own_logits_on_row(model, batch)
            alone_NV = _own_response_logits(model, second)
    finally:
        model.train(was_training)
    logit_tolerance, packing_tolerance = (
        _FLOAT32_TOLERANCES if next(model.parameters()).dtype == torch.float32
        else _HALF_TOLERANCES)
    if own_NV.shape != ours_NV.shape:
        raise ValueError(f"{name}: its forward gives {own_NV.shape[-1]} logits per token, the "
                         f"learner {ours_NV.shape[-1]} (a padded vocabulary it cuts?)")
    if (gap := _relative_gap(own_NV, ours_NV)) > logit_tolerance:
        raise ValueError(
            f"{name}: its forward's logits differ from the learner's by {gap:.3g} relative "
            f"(tolerance {logit_tolerance:g}): {_describe(own_NV, ours_NV)}. The learner would "
            "train on other probabilities than the engine samples from: add what its forward "
            "does to LOGIT_RECIPES in rlvr/learner/forward.py, with a test.")
    n = len(first.response_ids)
    if (gap := _relative_gap(alone_NV, ours_NV[n:])) > packing_tolerance:
        raise ValueError(
            f"{name}: a response packed after a sibling gets logits {gap:.3g} (relative) away "
            f"from its sequence run alone (tolerance {packing_tolerance:g}): its decoder lets "
            "packed sequences see each other (recurrent or state-space layers, or attention "
            "that ignores a 4-D mask), so it cannot be trained on packed rows.")


def _refuse_unknown_logit_settings(model: torch.nn.Module, name: str) -> None:
    if model.config.model_type in LOGIT_RECIPES:
        return
    config = model.config.get_text_config()
    found = {k: getattr(config, k) for k in sorted(LOGIT_SETTINGS)
             if getattr(config, k, None) is not None}
    if found:
        raise ValueError(
            f"{name} is not in LOGIT_RECIPES but its config sets {found}, which other "
            "architectures' forwards apply to their logits; the learner, which computes the "
            "logits itself, would ignore it. Add the architecture to LOGIT_RECIPES in "
            "rlvr/learner/forward.py, with a test.")


def _probe_sequences(vocab_size: int) -> tuple[SequenceToPack, SequenceToPack]:
    """One prompt, two responses: fixed pseudo-random tokens, the same on every machine."""
    ids = torch.randint(0, vocab_size, (16,), generator=torch.Generator().manual_seed(0)).tolist()
    return (SequenceToPack(ids[:6], ids[6:11], [0.0] * 5, advantage=0.0, index=0),
            SequenceToPack(ids[:6], ids[11:16], [0.0] * 5, advantage=0.0, index=1))


def _own_logits_on_row(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """Float32 logits [N, V] of `model(...)` on the batch's one packed row, at the positions
    predicting its response tokens."""
    mask_R1LL = packed_attention_mask(batch.segment_ids_RL, batch.parent_segment_RL)
    logits_RLV = model(input_ids=batch.input_ids_RL, position_ids=batch.position_ids_RL,
                       attention_mask=mask_R1LL, use_cache=False).logits
    target_L = batch.response_mask_RL[0]
    return logits_RLV[0, batch.predictor_pos_RL[0, target_L]].float()


def _own_response_logits(model: torch.nn.Module, seq: SequenceToPack) -> torch.Tensor:
    """Float32 logits [T, V] of `model(...)` on `seq` alone, predicting its response tokens."""
    ids_1L = torch.tensor([seq.prompt_ids + seq.response_ids])
    return model(input_ids=ids_1L, use_cache=False).logits[0, len(seq.prompt_ids) - 1:-1].float()


def _centered(logits_NV: torch.Tensor) -> torch.Tensor:
    return logits_NV - logits_NV.mean(-1, keepdim=True)


def _relative_gap(own_NV: torch.Tensor, ours_NV: torch.Tensor) -> float:
    own_NV, ours_NV = _centered(own_NV), _centered(ours_NV)
    return float((own_NV - ours_NV).norm() / own_NV.norm())


def _describe(own_NV: torch.Tensor, ours_NV: torch.Tensor) -> str:
    """What the difference looks like: the closest single scale between the two is a
    temperature, and what it leaves unexplained is something else."""
    own_NV, ours_NV = _centered(own_NV), _centered(ours_NV)
    scale = float((own_NV * ours_NV).sum() / (ours_NV * ours_NV).sum())
    residual = float((own_NV - scale * ours_NV).norm() / own_NV.norm())
    if residual < 0.01:  # ours = own / scale: the model's distribution at temperature `scale`
        return (f"its logits are {scale:.4g} times the learner's, so the learner sees its "
                f"distribution at temperature {scale:.4g}")
    return (f"not a rescaling, since the closest scale ({scale:.3g}) leaves {residual:.2g} of the "
            "difference; a soft-cap, a bias or another head")


def check_attention_window(model: torch.nn.Module, max_sequence_length: int) -> None:
    """Raise ValueError if the model's sliding-window attention is shorter than a sequence.

    Packed rows carry one boolean 4-D mask for every layer (`packed_attention_mask`), which has
    no window: a sliding-window layer would see keys its own forward hides, and logprobs drift
    (0.78 nats measured on a tiny Gemma2 with a window of 4). While every sequence fits in the
    window the two agree, so only longer sequences are refused.
    """
    config = model.config.get_text_config()
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if window is None or (layer_types is not None and "sliding_attention" not in layer_types):
        return
    if window < max_sequence_length:
        raise ValueError(
            f"{type(model).__name__} attends through a sliding window of {window} tokens, "
            f"shorter than the longest sequence ({max_sequence_length} = "
            "data.max_prompt_length + rollout.response_length): the learner's packed mask has "
            "no window, so its logprobs would differ from the model's. Shorten the sequences "
            f"to at most {window} tokens.")
