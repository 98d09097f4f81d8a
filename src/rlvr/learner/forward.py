"""Per-token logprobs (and entropy) of a packed batch under a causal LM.

Packed rows hold several units (a prompt and the responses sharing it); attention confines each
response to its prompt and itself, and position ids restart per prompt, so a packed row gives
the same logprobs as its sequences run one by one (tested). How attention is told so depends on
the model's attention implementation (`model.config._attn_implementation`, set by
`rlvr.models.load_causal_lm`), never on the device: `PACKED_ATTENTION` maps each to its decoder
inputs.
- sdpa: a dense boolean [R, 1, L, L] mask (`packed_attention_mask`); any device. Every query
  still scores every key of its row, so its cost grows with the row length squared.
- eager: transformers' explicit attention (two matmuls and a float32 softmax, every score kept
  for the backward pass), which adds its mask to the scores: the same visibility as an additive
  float mask (`packed_additive_mask`); a boolean one would be added as 0/1 and hide nothing.
  Any device. Its scores cost memory and time growing with the row length squared, but on
  short rows of a bf16 CPU learner, compiled (`model.compile`: inductor fuses the masking and
  softmax), it beats sdpa's CPU flash kernel, whose bf16 backward is slow at those shapes
  (`benchmarks/compile.py`, `benchmarks/attention.py`).
- flex_attention: the same visibility as a block-sparse `BlockMask` (`packed_block_mask`):
  blocks of keys no query of a block may see are skipped. torch 2.13 has no flex backward on
  CPU (`check_attention_backward` refuses it there).
- flash_attention_2: no mask; transformers' varlen path reads sequence starts off position ids
  restarting at 0, so every token sees its whole contiguous sequence: it cannot let responses
  share a prompt (`check_packed_attention`). CUDA with flash-attn only.
Other implementations (paged, flash 3 and 4) are refused.

The learner runs the decoder and the vocabulary projection itself, at response positions only,
instead of the model's `forward`; so whatever an architecture's `forward` does to its logits
(Cohere multiplies them, Granite divides them, Gemma2 soft-caps them, MiniCPM3 scales the hidden
states before the head) is repeated here from `LOGIT_RECIPES`. Missing it would train the policy
at a different temperature than the engine samples at. `check_logit_path` compares this path
with the model's own `forward` once per loaded model and refuses one it does not reproduce.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from typing import Callable

import torch
from torch.distributed.fsdp import FSDPModule
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
from torch.utils.checkpoint import checkpoint

from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.device import HOST
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
    device = segment_ids_RL.device
    unique_pad_RL = -2 - torch.arange(length, device=device).expand(rows, length)
    segment_RL = torch.where(segment_ids_RL >= 0, segment_ids_RL, unique_pad_RL)
    key_R1L = segment_RL[:, None, :]
    allowed_RLL = (key_R1L == segment_RL[:, :, None]) | (key_R1L == parent_segment_RL[:, :, None])
    causal_LL = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    return (allowed_RLL & causal_LL)[:, None]


def packed_additive_mask(segment_ids_RL: torch.Tensor,
                         parent_segment_RL: torch.Tensor) -> torch.Tensor:
    """`packed_attention_mask` as float32 [R, 1, L, L] to add to attention scores: 0 where a
    query may attend, float32's lowest where it may not. Lowest rather than -inf, so a row with
    no visible key could not turn the softmax into NaN; float32 whatever the compute dtype, so
    the masked scores (and the softmax eager attention takes in float32) are float32 too."""
    allowed_R1LL = packed_attention_mask(segment_ids_RL, parent_segment_RL)
    hidden = torch.finfo(torch.float32).min
    return torch.zeros(allowed_R1LL.shape, dtype=torch.float32,
                       device=allowed_R1LL.device).masked_fill_(~allowed_R1LL, hidden)


def packed_block_mask(segment_ids_RL: torch.Tensor, parent_segment_RL: torch.Tensor) -> BlockMask:
    """The visibility of `packed_attention_mask` as a flex-attention `BlockMask` [R, 1, L, L],
    except that padding sees nothing: flex gives a query with no key a zero output (sdpa gives
    NaN), and whole blocks of padding are then skipped."""
    rows, length = segment_ids_RL.shape
    # Segment and parent in one code per token (-1 on padding), so the mask reads one value per
    # position: torch 2.13's CPU flex kernel fails to compile (C++ errors) when its shapes
    # change and the mask_mod loads more than two values.
    stride = length + 2  # segments lie in [0, L), parents + 1 in [0, L]
    code_RL = torch.where(segment_ids_RL >= 0,
                          segment_ids_RL * stride + parent_segment_RL + 1, -1)

    def may_attend(row, head, query, key):  # scalar indices, vmapped by create_block_mask
        query_code, key_code = code_RL[row, query], code_RL[row, key]
        key_segment = key_code // stride
        own_chunk = query_code // stride == key_segment
        parent_chunk = query_code % stride - 1 == key_segment  # never for a padding query
        return (key <= query) & (key_code >= 0) & (own_chunk | parent_chunk)

    return create_block_mask(may_attend, B=rows, H=None, Q_LEN=length, KV_LEN=length,
                             device=segment_ids_RL.device)


def _dense_mask_inputs(batch: PackedBatch) -> dict:
    return {"input_ids": batch.input_ids_RL, "position_ids": batch.position_ids_RL,
            "attention_mask": packed_attention_mask(batch.segment_ids_RL,
                                                    batch.parent_segment_RL)}


def _additive_mask_inputs(batch: PackedBatch) -> dict:
    return {"input_ids": batch.input_ids_RL, "position_ids": batch.position_ids_RL,
            "attention_mask": packed_additive_mask(batch.segment_ids_RL,
                                                   batch.parent_segment_RL)}


def _block_mask_inputs(batch: PackedBatch) -> dict:
    return {"input_ids": batch.input_ids_RL, "position_ids": batch.position_ids_RL,
            "attention_mask": packed_block_mask(batch.segment_ids_RL, batch.parent_segment_RL)}


def _varlen_inputs(batch: PackedBatch) -> dict:
    """All rows as one [1, R*L] sequence and no mask: transformers' flash path then cuts it
    where position ids restart at 0 (each padding slot, at position 0, is a sequence of its
    own). Exact only while each prompt has a single response after it: a second one continues
    the prompt's positions, so it would see its sibling."""
    # A response chunk is numbered right after its prompt's; a sibling comes later.
    sibling_RL = (batch.parent_segment_RL >= 0) & (
        batch.segment_ids_RL - batch.parent_segment_RL > 1)
    if bool(sibling_RL.any()):  # one device sync, as the varlen path itself has
        raise ValueError("flash_attention_2 got a batch whose responses share a prompt; pack "
                         "it with share_prompts=False (see check_packed_attention)")
    return {"input_ids": batch.input_ids_RL.reshape(1, -1),
            "position_ids": batch.position_ids_RL.reshape(1, -1)}


@dataclass(frozen=True)
class PackedAttention:
    """How one attention implementation is told what each token of a packed row may see."""

    decoder_inputs: Callable[[PackedBatch], dict]  # keyword arguments of the decoder's forward
    shares_prompts: bool  # can a response see a prompt that sibling responses also see?
    # Why it cannot differentiate on a device (a message), or None if it can.
    backward_error: Callable[[torch.device], str | None] = lambda device: None


def _flex_backward_error(device: torch.device) -> str | None:
    """Asks torch rather than assuming: a tiny differentiable flex call on `device` (eager,
    so no compilation; torch 2.13 refuses every CPU one before computing anything)."""
    query = torch.zeros(1, 1, 16, 8, device=device, requires_grad=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "called without torch.compile"
            flex_attention(query, query, query).sum().backward()
    except (NotImplementedError, RuntimeError, ValueError) as error:
        return str(error)
    return None


# Keyed on transformers' names for the implementations (`model.config._attn_implementation`).
PACKED_ATTENTION: dict[str, PackedAttention] = {
    "sdpa": PackedAttention(_dense_mask_inputs, shares_prompts=True),
    "eager": PackedAttention(_additive_mask_inputs, shares_prompts=True),
    "flex_attention": PackedAttention(_block_mask_inputs, shares_prompts=True,
                                      backward_error=_flex_backward_error),
    "flash_attention_2": PackedAttention(_varlen_inputs, shares_prompts=False),
}


def packed_attention(model: torch.nn.Module) -> PackedAttention:
    """The packed-row inputs of the model's attention implementation; ValueError for one that
    rlvr does not know how to confine to packed sequences."""
    name = model.config._attn_implementation
    if name not in PACKED_ATTENTION:
        raise ValueError(f"{type(model).__name__} runs attn_implementation={name!r}, so it "
                         "cannot be trained on packed rows (rlvr gives no mask of that "
                         f"implementation's kind): load it with one of {sorted(PACKED_ATTENTION)} "
                         "(rlvr.models.load_causal_lm)")
    return PACKED_ATTENTION[name]


def check_packed_attention(model: torch.nn.Module, share_prompts: bool = True) -> None:
    """Raise ValueError if the model's attention cannot give packed rows their layout.

    `share_prompts` says whether packing puts a group's responses after one copy of their
    prompt (`rlvr.algorithm.packing.pack_sequences`, on by default and the trainer's only
    layout): each response must then see the prompt but not its siblings, a mask that
    flash-attention's variable-length kernels (one contiguous causal sequence per token)
    cannot express.
    """
    attention, name = packed_attention(model), model.config._attn_implementation
    if share_prompts and not attention.shares_prompts:
        raise ValueError(
            f"attn_implementation={name!r} attends within contiguous sequences only, but "
            "packing shares each group's prompt among its responses (a response sees the "
            "prompt, not its siblings), which needs a mask: use flex (a block-sparse mask) or "
            "sdpa, or pack without shared prompts")


def check_attention_backward(model: torch.nn.Module, device: torch.device) -> None:
    """Raise ValueError if the model's attention cannot be differentiated on `device` (where
    the learner trains): flex attention has no CPU backward in torch 2.13."""
    if (error := packed_attention(model).backward_error(device)) is not None:
        raise ValueError(f"attn_implementation={model.config._attn_implementation!r} cannot "
                         f"train on {device}: {error} Use sdpa there.")


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
    pass); the entropy is taken on the first run only, the rerun would repeat it for nothing."""

    def __init__(self, model: torch.nn.Module, targets_C: torch.Tensor, temperature: float,
                 with_entropy: bool):
        self.model, self.targets_C, self.temperature = model, targets_C, temperature
        self.with_entropy = with_entropy
        self.entropy_C: torch.Tensor | None = None

    def __call__(self, hidden_CH: torch.Tensor) -> torch.Tensor:
        logits_CV = output_logits(self.model, hidden_CH) / self.temperature
        lse_C = torch.logsumexp(logits_CV, dim=-1)
        logp_C = logits_CV.gather(-1, self.targets_C[:, None]).squeeze(-1) - lse_C
        if self.with_entropy and self.entropy_C is None:
            with torch.no_grad():  # H = -sum p log p = lse - sum p * logit
                p_CV = torch.exp(logits_CV - lse_C[:, None])
                self.entropy_C = lse_C - (p_CV * logits_CV).sum(-1)
        return logp_C


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


def _hidden_states(model: torch.nn.Module, batch: PackedBatch) -> torch.Tensor:
    """Final hidden states [R, L, H] from the decoder stack, without the vocabulary projection."""
    inputs = packed_attention(model).decoder_inputs(batch)
    out = model.get_decoder()(**inputs, use_cache=False)
    return out.last_hidden_state.reshape(*batch.input_ids_RL.shape, -1)  # varlen runs [1, R*L]


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
    logits_RLV = model(**inputs, use_cache=False).logits.reshape(*batch.input_ids_RL.shape, -1)
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


def check_attention_window(model: torch.nn.Module, max_sequence_length: int) -> None:
    """Raise ValueError if the model's sliding-window attention is shorter than a sequence.

    Packed rows carry one mask for every layer (`packed_attention_mask` and its kin),
    which has no window: a sliding-window layer would see keys its own forward hides, and logprobs drift
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
