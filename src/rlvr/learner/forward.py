"""Per-token logprobs (and entropy) of a packed batch under a causal LM.

Packed rows hold several units (a prompt and the responses sharing it); attention confines each
response to its prompt and itself, and position ids restart per prompt, so a packed row gives
the same logprobs as its sequences run one by one (tested). How each attention implementation
is told so is `rlvr.learner.attention`'s job: this module asks it for the decoder's inputs.

The learner runs the decoder and the vocabulary projection itself, at response positions only,
instead of the model's `forward`; so whatever an architecture's `forward` does to its logits
(Cohere multiplies them, Granite divides them, Gemma2 soft-caps them, MiniCPM3 scales the hidden
states before the head) is repeated here from `LOGIT_RECIPES`. Missing it would train the policy
at a different temperature than the engine samples at. `check_logit_path` compares this path
with the model's own `forward` once per loaded model and refuses one it does not reproduce.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from torch.distributed.fsdp import FSDPModule
from torch.utils.checkpoint import checkpoint

from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.device import HOST
from rlvr.learner.attention import packed_attention
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


# Response tokens whose [tokens, vocabulary] logits exist at once. The vocabulary projection
# and its softmax are a small model's largest activations (2,900 response tokens of SmolLM2 are
# 570 MB of float32 logits per copy, and autograd kept several copies alive until the backward
# pass); chunks bound them, each chunk's logits recomputed in the backward pass instead of kept.
LOGIT_CHUNK_TOKENS = 1024


def forward_logprobs(model: torch.nn.Module, batch: PackedBatch, temperature: float,
                     with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logprobs_RL[r, j] = log p(input_ids[r, j] | tokens before it in its sequence).

    Logits are divided by the sampling temperature, so these are comparable to the engine's
    logprobs. Only response positions are computed (prompt positions hold 0): the vocabulary
    projection and its softmax are the largest activations of a small model, and prompt tokens
    never reach the loss.
    """
    target_RL = batch.response_mask_RL
    logp_N, entropy_N = token_logprobs(model, response_hidden(model, batch),
                                       batch.input_ids_RL[target_RL], temperature, with_entropy)
    logprobs_RL = torch.zeros(target_RL.shape, dtype=logp_N.dtype, device=target_RL.device)
    logprobs_RL = logprobs_RL.masked_scatter(target_RL, logp_N)
    entropy_RL = None
    if entropy_N is not None:
        entropy_RL = torch.zeros(target_RL.shape, dtype=entropy_N.dtype,
                                 device=target_RL.device).masked_scatter(target_RL, entropy_N)
    return logprobs_RL, entropy_RL


def token_logprobs(model: torch.nn.Module, hidden_NH: torch.Tensor, targets_N: torch.Tensor,
                   temperature: float, with_entropy: bool = False,
                   chunk_tokens: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Float32 logprob of each target [N] under the temperature-scaled distribution predicted
    from `hidden_NH` [N, H], and that distribution's entropy [N] (a metric: no gradient), at
    most `chunk_tokens` positions' logits at a time (`LOGIT_CHUNK_TOKENS`)."""
    chunk_tokens = chunk_tokens or LOGIT_CHUNK_TOKENS
    logps, entropies = [], []
    # At least one chunk, even an empty one: a rank with no response token still runs the head,
    # as sharded peers expect it to (its gradient is zero, not absent).
    for start in range(0, max(hidden_NH.shape[0], 1), chunk_tokens):
        chunk = _ChunkLogprobs(model, targets_N[start:start + chunk_tokens], temperature,
                               with_entropy)
        hidden_CH = hidden_NH[start:start + chunk_tokens]
        if torch.is_grad_enabled() and hidden_CH.requires_grad:
            logps.append(checkpoint(chunk, hidden_CH, use_reentrant=False))
        else:
            logps.append(chunk(hidden_CH))
        entropies.append(chunk.entropy_C)
    return torch.cat(logps), (torch.cat(entropies) if with_entropy else None)


class _ChunkLogprobs:
    """One chunk's logprobs from its hidden states (what `checkpoint` reruns in the backward
    pass): the output projection, eager (a library matmul, inside whatever hooks wrap the head
    module), then `head_logprobs`, compiled if `model.compile` compiled it (`compiled_head`).
    The eager head takes the entropy on the first run only, the rerun would repeat it for
    nothing; a compiled one takes it on the rerun too, so that the rerun runs the graph the
    first run ran: `checkpoint` hands the backward the rerun's saved tensors by position, and
    nothing promises that another graph saves the same ones (today's do). Fused, that costs one
    more read of the chunk's logits."""

    def __init__(self, model: torch.nn.Module, targets_C: torch.Tensor, temperature: float,
                 with_entropy: bool):
        self.model, self.targets_C, self.temperature = model, targets_C, temperature
        self.with_entropy = with_entropy
        self.entropy_C: torch.Tensor | None = None

    def __call__(self, hidden_CH: torch.Tensor) -> torch.Tensor:
        head = compiled_head(self.model)
        with_entropy = self.with_entropy and (head is not None or self.entropy_C is None)
        logp_C, entropy_C = (head or head_logprobs)(
            projected_logits(self.model, hidden_CH), self.targets_C, self.temperature,
            logit_steps(self.model), with_entropy)
        if self.entropy_C is None:
            self.entropy_C = entropy_C
        return logp_C


def head_logprobs(logits_CV: torch.Tensor, targets_C: torch.Tensor, temperature: float,
                  steps: LogitSteps, with_entropy: bool
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Float32 logprobs [C] of the targets from a chunk's output projection [C, V] (the compute
    dtype), after its `LogitSteps`, at `temperature`; and the distribution's entropy [C] (no
    gradient) if asked, else None. A pure function of tensors and numbers: `model.compile`
    compiles it (`rlvr.learner.compiling`), the eager path calls it as it is."""
    logits_CV = steps.apply(logits_CV).float() / temperature
    lse_C = torch.logsumexp(logits_CV, dim=-1)
    logp_C = logits_CV.gather(-1, targets_C[:, None]).squeeze(-1) - lse_C
    if not with_entropy:
        return logp_C, None
    logits_CV, lse_C = logits_CV.detach(), lse_C.detach()  # a metric: no gradient
    p_CV = torch.exp(logits_CV - lse_C[:, None])  # H = -sum p log p = lse - sum p * logit
    return logp_C, lse_C - (p_CV * logits_CV).sum(-1)


# The attribute where `rlvr.learner.compiling` keeps a model's compiled `head_logprobs`.
COMPILED_HEAD = "rlvr_compiled_head"


def compiled_head(model: torch.nn.Module) -> Callable | None:
    """The model's compiled `head_logprobs` (`model.compile`), or None: the eager one runs."""
    return getattr(model, COMPILED_HEAD, None)


def response_hidden(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """Final hidden states [N, H] of the positions predicting the batch's N response tokens
    (row-major order)."""
    target_RL = batch.response_mask_RL
    rows_N = torch.arange(len(target_RL), device=target_RL.device)[:, None].expand_as(
        target_RL)[target_RL]
    hidden_RLH = _hidden_states(model, batch)
    return hidden_RLH[rows_N, batch.predictor_pos_RL[target_RL]]


def response_logits(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """Float32 logits [N, V] predicting the batch's N response tokens (row-major order), all at
    once: for checks (`check_logit_path`), not for training."""
    return output_logits(model, response_hidden(model, batch))


def output_logits(model: torch.nn.Module, hidden_NH: torch.Tensor) -> torch.Tensor:
    """Float32 logits [N, V] from final hidden states [N, H], as the model's own `forward`
    computes them: the output projection plus its architecture's `LOGIT_RECIPES` steps."""
    return logit_steps(model).apply(projected_logits(model, hidden_NH)).float()


def projected_logits(model: torch.nn.Module, hidden_NH: torch.Tensor) -> torch.Tensor:
    """The output projection's logits [N, V] (the compute dtype) from final hidden states
    [N, H], divided first where the architecture's recipe says (`hidden_divisor`); the recipe's
    steps after the projection are `logit_steps`'."""
    recipe = LOGIT_RECIPES.get(model.config.model_type, _PLAIN)
    config = model.config.get_text_config()  # a multimodal config nests the values
    if (divisor := _setting(config, recipe.hidden_divisor)) is not None:
        hidden_NH = hidden_NH / divisor
    return model.get_output_embeddings()(hidden_NH)


@dataclass(frozen=True)
class LogitSteps:
    """The values of a model's `LOGIT_RECIPES` steps after the output projection (None:
    skipped), to apply to its logits as its `forward` does."""

    multiplier: float | None = None
    divisor: float | None = None
    cap: float | None = None

    def apply(self, logits_NV: torch.Tensor) -> torch.Tensor:
        # Each step runs in the model's dtype and order, as its forward does, so a 16-bit
        # model's logits match its forward's bit for bit too (compiled too: `compile_head` has
        # inductor round as eager does); only then are they upcast for the softmax.
        if self.multiplier is not None:
            logits_NV = logits_NV * self.multiplier
        if self.divisor is not None:
            logits_NV = logits_NV / self.divisor
        if self.cap is not None:
            logits_NV = torch.tanh(logits_NV / self.cap) * self.cap
        return logits_NV


def logit_steps(model: torch.nn.Module) -> LogitSteps:
    """The model's `LOGIT_RECIPES` steps after the projection, with its config's values."""
    recipe = LOGIT_RECIPES.get(model.config.model_type, _PLAIN)
    config = model.config.get_text_config()
    return LogitSteps(_setting(config, recipe.logit_multiplier),
                      _setting(config, recipe.logit_divisor), _setting(config, recipe.softcap))


def _setting(config, name: str | None) -> float | None:
    return getattr(config, name, None) if name is not None else None


def _hidden_states(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """Final hidden states [R, L, H] from the decoder stack, without the vocabulary projection."""
    inputs = packed_attention(model).decoder_inputs(batch)
    out = model.get_decoder()(**inputs.kwargs, use_cache=False)
    return inputs.to_rows(out.last_hidden_state, *batch.input_ids_RL.shape)  # varlen: [1, T]


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
    packed into one row (the prompt once, if the model's attention lets responses share it),
    and two things are compared:
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
    device = next(model.parameters()).device
    share = packed_attention(model).shares_prompts
    batch = pack_sequences([first, second], pack_length=32, share_prompts=share).to(device)
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
    generator = torch.Generator(device=HOST).manual_seed(0)
    ids = torch.randint(0, vocab_size, (16,), generator=generator, device=HOST).tolist()
    return (SequenceToPack(ids[:6], ids[6:11], [0.0] * 5, advantage=0.0, index=0),
            SequenceToPack(ids[:6], ids[11:16], [0.0] * 5, advantage=0.0, index=1))


def _own_logits_on_row(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """Float32 logits [N, V] of `model(...)` on the batch's one packed row, at the positions
    predicting its response tokens."""
    inputs = packed_attention(model).decoder_inputs(batch)
    logits_RLV = inputs.to_rows(model(**inputs.kwargs, use_cache=False).logits,
                                *batch.input_ids_RL.shape)
    target_L = batch.response_mask_RL[0]
    return logits_RLV[0, batch.predictor_pos_RL[0, target_L]].float()


def _own_response_logits(model: torch.nn.Module, seq: SequenceToPack) -> torch.Tensor:
    """Float32 logits [T, V] of `model(...)` on `seq` alone, predicting its response tokens."""
    ids_1L = torch.tensor([seq.prompt_ids + seq.response_ids],
                          device=next(model.parameters()).device)
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
