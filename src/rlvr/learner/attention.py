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
- flash_attention_2: no mask; transformers' varlen path reads sequence starts off position ids
  restarting at 0, so every token sees its whole contiguous sequence: it cannot let responses
  share a prompt (`check_packed_attention`). CUDA with flash-attn only.
Other implementations (paged, flash 3 and 4) are refused.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

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


def _masked_inputs(build_mask: Callable[[torch.Tensor, torch.Tensor], object]
                   ) -> Callable[[PackedBatch], dict]:
    """Decoder inputs of an implementation that takes the rows as they are plus a mask built
    from their segments by `build_mask` (dense, additive or block)."""
    def decoder_inputs(batch: PackedBatch) -> dict:
        return {"input_ids": batch.input_ids_RL, "position_ids": batch.position_ids_RL,
                "attention_mask": build_mask(batch.segment_ids_RL, batch.parent_segment_RL)}

    return decoder_inputs


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
    "sdpa": PackedAttention(_masked_inputs(packed_attention_mask), shares_prompts=True),
    "eager": PackedAttention(_masked_inputs(packed_additive_mask), shares_prompts=True),
    "flex_attention": PackedAttention(_masked_inputs(packed_block_mask), shares_prompts=True,
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
