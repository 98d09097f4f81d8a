"""How packed rows are confined for each attention implementation: the masks and decoder
inputs that let a packed row give the same logprobs as its sequences run one by one, and the
checks that refuse an implementation, device or window that cannot. It computes no logprobs
(`rlvr.learner.forward` does).

Packed rows hold several units (a prompt and the responses sharing it); attention confines each
response to its prompt and itself, and position ids restart per prompt. How attention is told so
depends on the model's attention implementation (`model.config._attn_implementation`, set by
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
- varlen (rlvr's, registered with transformers as `VARLEN`): no mask and no padding; the
  rows' tokens run as one stream [1, T] with the cumulative lengths of its sequences
  (`cu_seq_lens_q`), each sequence whole and causal (`sequence_inputs`). On CUDA in bf16 or
  fp16 the kernel is torch's own varlen flash attention (`torch.nn.attention.varlen`, no
  flash-attn needed): only the (query, key) pairs of a sequence are computed, never a padded
  square. Elsewhere (CPU, float32) each sequence runs through sdpa by itself, exact and
  differentiable, so the path is the same code on CPU and GPU. It cannot let responses share a
  prompt: pack with `share_prompts=False` (`packed_layout`).
- flash_attention_2: flash-attn's kernels through transformers, given the same stream and
  cumulative lengths as varlen. CUDA with flash-attn installed only.
Other implementations (paged, flash 3 and 4) are refused.

Which implementation and layout a run uses when `model.attn_implementation=auto` and
`algorithm.share_prompts` is null is `packed_layout`'s answer, from the device's default
attention (`rlvr.device.DEFAULT_ATTENTION`, decided by measurement).
"""

from __future__ import annotations

import inspect
import itertools
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from rlvr.device import DEFAULT_ATTENTION, HOST, WHOLE_SEQUENCE_ATTENTION
from rlvr.types import PackedBatch

try:  # torch's own varlen flash attention (torch 2.9 and later; its signature changed since)
    from torch.nn.attention.varlen import varlen_attn as _torch_varlen_attn
except ImportError:  # pragma: no cover - older torch
    _torch_varlen_attn = None
_VARLEN_PARAMETERS = (frozenset(inspect.signature(_torch_varlen_attn).parameters)
                      if _torch_varlen_attn is not None else frozenset())

VARLEN = "rlvr_varlen"  # the name `model.attn_implementation=varlen` is registered under
# `model.attn_implementation` values and transformers' names for them.
CONFIG_NAMES = {"sdpa": "sdpa", "eager": "eager", "flex": "flex_attention",
                "flash_attention_2": "flash_attention_2", "varlen": VARLEN}


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


@dataclass(frozen=True)
class DecoderInputs:
    """What the decoder is called with for a packed batch: its keyword arguments, and where the
    tokens it runs sit in the batch's [R, L] grid (`token_index_T`, a flat index into R * L;
    None where it runs the rows as they are)."""

    kwargs: dict
    token_index_T: torch.Tensor | None = None

    def to_rows(self, out_BTX: torch.Tensor, rows: int, length: int) -> torch.Tensor:
        """The decoder's per-token output [B, T, X] as [R, L, X] (zeros where no token ran)."""
        if self.token_index_T is None:
            return out_BTX.reshape(rows, length, -1)
        out_TX = out_BTX.reshape(-1, out_BTX.shape[-1])
        grid_NX = out_TX.new_zeros(rows * length, out_TX.shape[-1])
        return grid_NX.index_copy(0, self.token_index_T, out_TX).reshape(rows, length, -1)


def _masked_inputs(build_mask: Callable[[torch.Tensor, torch.Tensor], object]
                   ) -> Callable[[PackedBatch], DecoderInputs]:
    """Decoder inputs of an implementation that takes the rows as they are plus a mask built
    from their segments by `build_mask` (dense, additive or block)."""
    def decoder_inputs(batch: PackedBatch) -> DecoderInputs:
        return DecoderInputs({"input_ids": batch.input_ids_RL,
                              "position_ids": batch.position_ids_RL,
                              "attention_mask": build_mask(batch.segment_ids_RL,
                                                           batch.parent_segment_RL)})

    return decoder_inputs


def sequence_inputs(batch: PackedBatch) -> DecoderInputs:
    """Every unit of the batch as one whole causal sequence: the rows' tokens without their
    padding as one stream [1, T], with the cumulative sequence lengths [S + 1] (int32) and the
    longest length that varlen kernels take (transformers' `cu_seq_lens_q`, `max_length_q` and
    their key twins). Built from the host's `seq_lens_per_row`, so no device sync. Exact only
    when no response shares its prompt with a sibling (`share_prompts=False` packing): each
    unit is then one sequence."""
    if any(len(row) for row in batch.seq_lens_per_row) and \
            sum(map(len, batch.seq_lens_per_row)) < batch.num_sequences:
        raise ValueError(f"{batch.num_sequences} sequences in "
                         f"{sum(map(len, batch.seq_lens_per_row))} units: responses share a "
                         "prompt, which varlen attention cannot confine; pack with "
                         "share_prompts=False (see packed_layout)")
    length = batch.input_ids_RL.shape[1]
    lengths = [n for row in batch.seq_lens_per_row for n in row]
    starts = [r * length for r in range(len(batch.seq_lens_per_row))]
    index = [start + j for start, row in zip(starts, batch.seq_lens_per_row)
             for j in range(sum(row))]
    if not index:  # only empty rows (a rank kept in step): one padding slot, as its own sequence
        index, lengths = [0], [1]
    device = batch.input_ids_RL.device
    token_index_T = torch.tensor(index, dtype=torch.long, device=HOST).to(device)
    cu_seq_lens = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32,
                               device=HOST).to(device)
    longest = max(lengths)
    return DecoderInputs({"input_ids": batch.input_ids_RL.reshape(-1)[token_index_T][None],
                          "position_ids": batch.position_ids_RL.reshape(-1)[token_index_T][None],
                          "cu_seq_lens_q": cu_seq_lens, "cu_seq_lens_k": cu_seq_lens,
                          "max_length_q": longest, "max_length_k": longest},
                         token_index_T)


# --- rlvr's varlen attention, as a transformers attention function -----------------------------

def varlen_kernel(query: torch.Tensor) -> str:
    """Which kernel `varlen_attention_forward` runs for queries like `query`: torch's varlen
    flash attention on CUDA in 16 bits (sm80 and later), else sdpa one sequence at a time."""
    if query.is_cuda and query.dtype in (torch.bfloat16, torch.float16) and \
            _torch_varlen_attn is not None:
        return "torch varlen flash attention"
    return "sdpa per sequence"


def autocast_inputs(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The tensors in autocast's 16-bit dtype where autocast is on for their device, as
    autocast casts sdpa's inputs: it cannot see into an attention function of rlvr's own.
    Under autocast over float32 weights the residual stream stays float32, and so do the
    query and key, since transformers casts the rotary embedding's cos and sin to the hidden
    states' dtype: uncast, they took the per-sequence sdpa path on CUDA instead of the flash
    kernel (1,120 cuDNN calls an update for 40 sequences of a 28-layer model, the GPU idle
    40% of it: profiled on an H200, docs/gpu.md)."""
    device_type = tensors[0].device.type
    if not torch.is_autocast_enabled(device_type):
        return tensors
    dtype = torch.get_autocast_dtype(device_type)
    return tuple(t.to(dtype) for t in tensors)


def _flash_varlen(query_THD: torch.Tensor, key_TKD: torch.Tensor, value_TKD: torch.Tensor,
                  cu_seq_lens: torch.Tensor, longest: int, scale: float) -> torch.Tensor:
    """torch's `varlen_attn`, causal, called as the installed torch's signature wants: torch 2.9
    and 2.10 take `is_causal`, later ones a `window_size` of (-1, 0); `enable_gqa` (2.12 and
    later) lets fewer key heads serve the query heads, else the keys are repeated."""
    heads, key_heads = query_THD.shape[1], key_TKD.shape[1]
    options: dict = {}
    if "window_size" in _VARLEN_PARAMETERS:
        options["window_size"] = (-1, 0)
    else:
        options["is_causal"] = True
    if "scale" in _VARLEN_PARAMETERS:
        options["scale"] = scale
    elif abs(scale - query_THD.shape[-1] ** -0.5) > 1e-12:
        raise ValueError(f"this torch's varlen_attn has no scale argument, and the model scales "
                         f"attention by {scale}, not 1/sqrt(head_dim)")
    if key_heads != heads:
        if "enable_gqa" in _VARLEN_PARAMETERS:
            options["enable_gqa"] = True
        else:
            key_TKD = key_TKD.repeat_interleave(heads // key_heads, dim=1)
            value_TKD = value_TKD.repeat_interleave(heads // key_heads, dim=1)
    cu_seq_lens = cu_seq_lens.to(torch.int32)
    return _torch_varlen_attn(query_THD, key_TKD, value_TKD, cu_seq_lens, cu_seq_lens, longest,
                              longest, **options)


def _sdpa_per_sequence(query_THD: torch.Tensor, key_TKD: torch.Tensor, value_TKD: torch.Tensor,
                       cu_seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """The same attention as `_flash_varlen`, each sequence through causal sdpa by itself: exact
    on any device and dtype (one sync to read the lengths)."""
    bounds = cu_seq_lens.tolist()
    gqa = key_TKD.shape[1] != query_THD.shape[1]
    outs = []
    for start, end in zip(bounds[:-1], bounds[1:]):
        q_1HSD, k_1KSD, v_1KSD = (x[start:end].transpose(0, 1)[None]
                                  for x in (query_THD, key_TKD, value_TKD))
        out_1HSD = F.scaled_dot_product_attention(q_1HSD, k_1KSD, v_1KSD, is_causal=True,
                                                  scale=scale, enable_gqa=gqa)
        outs.append(out_1HSD[0].transpose(0, 1))
    return torch.cat(outs)


def varlen_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, attention_mask: torch.Tensor | None,
                             scaling: float | None = None, dropout: float = 0.0,
                             cu_seq_lens_q: torch.Tensor | None = None,
                             max_length_q: int | None = None, **kwargs
                             ) -> tuple[torch.Tensor, None]:
    """transformers' attention-function interface (`AttentionInterface`): query [B, H, T, D],
    key and value [B, K, T, D] -> output [B, T, H, D]. With `cu_seq_lens_q` (`sequence_inputs`)
    the one row holds those sequences; without it every row is one causal sequence. Sliding
    windows are ignored (`check_attention_window` refuses sequences longer than one)."""
    if dropout:
        raise ValueError("varlen attention has no dropout (the learner turns it off)")
    if kwargs.get("softcap") or kwargs.get("s_aux") is not None:
        raise ValueError("varlen attention has no soft-cap and no attention sinks")
    if kwargs.get("is_causal") is False:
        raise ValueError("varlen attention is causal only")
    batch, _, tokens, head_dim = query.shape
    if cu_seq_lens_q is None:  # plain rows (the model called on its own): one sequence each
        if attention_mask is not None or key.shape[2] != tokens:
            raise ValueError("varlen attention runs whole causal sequences: no padding mask "
                             "and no cache")
        cu_seq_lens_q = torch.arange(0, (batch + 1) * tokens, tokens, dtype=torch.int32,
                                     device=query.device)
        max_length_q = tokens
    elif batch != 1:
        raise ValueError(f"cumulative lengths describe one stream of tokens, not {batch} rows")
    scale = scaling if scaling is not None else head_dim ** -0.5
    query_THD, key_TKD, value_TKD = autocast_inputs(
        *(x.transpose(1, 2).reshape(-1, x.shape[1], head_dim).contiguous()
          for x in (query, key, value)))
    if varlen_kernel(query_THD) == "sdpa per sequence":
        out_THD = _sdpa_per_sequence(query_THD, key_TKD, value_TKD, cu_seq_lens_q, scale)
    else:
        # max_length_q as it came: an int, or a SymInt under torch.compile, which int() would
        # specialise (a recompilation for every new longest length).
        out_THD = _flash_varlen(query_THD, key_TKD, value_TKD, cu_seq_lens_q, max_length_q,
                                scale)
    return out_THD.reshape(batch, tokens, *out_THD.shape[1:]), None


def register_varlen_attention() -> None:
    """Make `VARLEN` an attention implementation transformers models load with (its registry is
    global; registering again changes nothing). No mask function is registered, so transformers
    builds no mask for it."""
    from transformers import AttentionInterface

    AttentionInterface.register(VARLEN, varlen_attention_forward)


@dataclass(frozen=True)
class PackedAttention:
    """How one attention implementation is told what each token of a packed row may see."""

    decoder_inputs: Callable[[PackedBatch], DecoderInputs]
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
    "sdpa": PackedAttention(_masked_inputs(packed_attention_mask), shares_prompts=True),
    "eager": PackedAttention(_masked_inputs(packed_additive_mask), shares_prompts=True),
    "flex_attention": PackedAttention(_masked_inputs(packed_block_mask), shares_prompts=True,
                                      backward_error=_flex_backward_error),
    "flash_attention_2": PackedAttention(sequence_inputs, shares_prompts=False),
    VARLEN: PackedAttention(sequence_inputs, shares_prompts=False),
}


@dataclass(frozen=True)
class PackedLayout:
    """How a run's learner packs rows and attends within them."""

    attention: str  # a `model.attn_implementation` value (never auto)
    share_prompts: bool  # `pack_sequences(share_prompts=...)`


def packed_layout(attention: str, share_prompts: bool | None, device_type: str) -> PackedLayout:
    """`model.attn_implementation` and `algorithm.share_prompts` resolved for a learner on
    `device_type`. auto: the device's default attention (`rlvr.device.DEFAULT_ATTENTION`),
    unless prompts are to be shared and it cannot share them: then sdpa, which can on any
    device; with share_prompts false, the device's whole-sequence attention
    (`WHOLE_SEQUENCE_ATTENTION`: varlen on CUDA). share_prompts null: shared where the
    attention can confine them (fewer tokens), else each sequence whole. ValueError for shared
    prompts under an attention that cannot."""
    if attention == "auto" and share_prompts is False:
        attention = WHOLE_SEQUENCE_ATTENTION[device_type]
    elif attention == "auto":
        attention = DEFAULT_ATTENTION[device_type]
        if share_prompts and not PACKED_ATTENTION[CONFIG_NAMES[attention]].shares_prompts:
            attention = "sdpa"
    can_share = PACKED_ATTENTION[CONFIG_NAMES[attention]].shares_prompts
    if share_prompts and not can_share:
        raise ValueError(f"algorithm.share_prompts=true needs attention that lets responses see "
                         f"a shared prompt but not each other (sdpa, eager, flex), not "
                         f"model.attn_implementation={attention}")
    return PackedLayout(attention, can_share if share_prompts is None else share_prompts)


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
    prompt (`rlvr.algorithm.packing.pack_sequences`; `algorithm.share_prompts`, resolved by
    `packed_layout`): each response must then see the prompt but not its siblings, a mask that
    variable-length kernels (one contiguous causal sequence per token) cannot express.
    """
    attention, name = packed_attention(model), model.config._attn_implementation
    if share_prompts and not attention.shares_prompts:
        raise ValueError(
            f"attn_implementation={name!r} attends within contiguous sequences only, but "
            "packing shares each group's prompt among its responses (a response sees the "
            "prompt, not its siblings), which needs a mask: use flex (a block-sparse mask) or "
            "sdpa, or pack without shared prompts (algorithm.share_prompts=false)")


def check_attention_backward(model: torch.nn.Module, device: torch.device) -> None:
    """Raise ValueError if the model's attention cannot be differentiated on `device` (where
    the learner trains): flex attention has no CPU backward in torch 2.13."""
    if (error := packed_attention(model).backward_error(device)) is not None:
        raise ValueError(f"attn_implementation={model.config._attn_implementation!r} cannot "
                         f"train on {device}: {error} Use sdpa there.")


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
            "data.max_prompt_length + the episode's tokens): the learner's packed mask has "
            "no window, so its logprobs would differ from the model's. Shorten the sequences "
            f"to at most {window} tokens.")
