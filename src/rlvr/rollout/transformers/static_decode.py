"""Static-shape decoding for the transformers engine: the GPU path.

The dynamic path (`TransformersEngine._generate_dynamic`) grows transformers' cache by one token
per step, drops finished rows from it and reads every sampled token back to the host: right for
a CPU, where compute is the cost and a dropped row is compute saved. On a GPU the cost of a small
model's decode step is launches and host round trips, not arithmetic, so this path keeps every
shape fixed for the whole generation instead:

- one preallocated KV cache (`SlotKVCache`) holding every row of the call; each prompt is
  prefilled once and its keys and values copied to its `n` sample rows;
- all rows decode together until every row has finished (a finished row's later tokens are
  computed and thrown away: cheaper on a GPU than reshaping the batch);
- the attention mask is an explicit 4-D mask kept in place, so transformers builds none and
  the step has no data-dependent host code;
- so the decode step can be captured once as a CUDA graph and replayed for every token;
- sampled tokens stay on the device and the host looks at them only every `sync_every` steps
  (to stop early and to look for stop strings).

It relies on one contract of transformers' decoder models, the one every attention layer uses:
`past_key_values.update(key, value, layer_idx, ...)` returns the keys and values to attend to.
Models with sliding-window or non-attention layers, or attention kernels that take no explicit
mask, are not served (`unsupported_reason`), and the engine keeps the dynamic path for them.

What it is not: a scheduler. It serves one `generate` call's rows, all of the same length
budget; vLLM's paged, continuously batched engine is still the fast engine where it installs.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Callable

import torch

from rlvr.types import SamplingParams

log = logging.getLogger(__name__)

# Attention kernels that take the explicit mask this path builds: sdpa takes a boolean mask
# (True: attend), eager an additive one.
MASKED_ATTENTION = ("sdpa", "eager")
LENGTH_BUCKET = 64  # cache lengths round up to this, so calls of similar lengths share a graph


GROUPED_DECODE = "rlvr_grouped_decode"  # the decode step's attention (grouped_decode_attention)


def grouped_decode_attention(module: torch.nn.Module, query_BHqD: torch.Tensor,
                             key_BGLD: torch.Tensor, value_BGLD: torch.Tensor,
                             attention_mask: torch.Tensor | None, scaling: float | None = None,
                             dropout: float = 0.0, **kwargs) -> tuple[torch.Tensor, None]:
    """One decode step's attention with grouped KV heads, without copying them per query head.

    transformers' sdpa path repeats every KV head for each query head of its group when a mask
    is given (torch's GQA kernels take none), which on a long static cache copies it several
    times per layer per token: the decode step's largest cost on a GPU. With one query position
    the group's query heads can stand as that many positions of one KV head instead (the mask
    [B, 1, 1, L] is the same for all of them), so sdpa reads each KV head once.
    Shapes: query [B, Hq, 1, D], key/value [B, G, L, D] with Hq = G * heads per group; returns
    [B, 1, Hq, D] as transformers' attention functions do."""
    b, hq, q, d = query_BHqD.shape
    g = key_BGLD.shape[1]
    if q != 1:  # not a decode step: transformers' own sdpa path
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query_BHqD, key_BGLD, value_BGLD, attention_mask,
                                      dropout=dropout, scaling=scaling, **kwargs)
    # Query heads h*k..h*k+k-1 share KV head h (transformers' repeat_kv order).
    query_BGkD = query_BHqD.reshape(b, g, hq // g, d)
    out_BGkD = torch.nn.functional.scaled_dot_product_attention(
        query_BGkD, key_BGLD, value_BGLD, attn_mask=attention_mask, scale=scaling)
    return out_BGkD.reshape(b, hq, 1, d).transpose(1, 2).contiguous(), None


def register_grouped_decode_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(GROUPED_DECODE, grouped_decode_attention)


@contextlib.contextmanager
def attention_as(model: torch.nn.Module, name: str):
    """The model's layers run attention function `name` inside the block (they look it up by
    the config's name on every call)."""
    configs = {id(c): c for c in (model.config, model.config.get_text_config())}.values()
    before = [c._attn_implementation for c in configs]
    try:
        for c in configs:
            c._attn_implementation = name
        yield
    finally:
        for c, b in zip(configs, before):
            c._attn_implementation = b


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why this path cannot decode `model` (the engine then decodes dynamically), or None."""
    config = getattr(model, "config", None)
    if config is None:
        return "the model has no transformers config"
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    attn = getattr(config, "_attn_implementation", None)
    if attn not in MASKED_ATTENTION:
        return f"its attention implementation {attn!r} takes no explicit mask"
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        return f"it has layers other than full attention ({sorted(set(layer_types))})"
    if getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True):
        return "it uses sliding-window attention"
    if getattr(config, "is_encoder_decoder", False):
        return "it is an encoder-decoder model"
    return None


class SlotKVCache:
    """Keys and values of every layer in fixed tensors [B, H, L, D]; the next `update` writes
    at slot `write_at_1` (a device tensor, so a captured graph writes where it is told). Eager
    callers may set `visible` to the number of slots attention sees (the prefill sees only
    its prompt); a graph sees all L, the mask hiding what is not yet written."""

    def __init__(self, rows: int, length: int, device: torch.device, dtype: torch.dtype):
        self.rows, self.length, self.device, self.dtype = rows, length, device, dtype
        self.keys: list[torch.Tensor] = []  # [B, H, L, D] per layer, made on first update
        self.values: list[torch.Tensor] = []
        self.write_at_1 = torch.zeros(1, dtype=torch.long, device=device)
        self.visible: int | None = None

    def update(self, key_BHtD: torch.Tensor, value_BHtD: torch.Tensor, layer_idx: int,
               *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        if layer_idx == len(self.keys):  # the first call for this layer: allocate it
            b, h, _, d = key_BHtD.shape
            self.keys.append(torch.zeros(b, h, self.length, d, dtype=key_BHtD.dtype,
                                         device=self.device))
            self.values.append(torch.zeros(b, h, self.length, value_BHtD.shape[-1],
                                           dtype=value_BHtD.dtype, device=self.device))
        slots_t = self.write_at_1 + torch.arange(key_BHtD.shape[2], device=self.device)
        self.keys[layer_idx].index_copy_(2, slots_t, key_BHtD)
        self.values[layer_idx].index_copy_(2, slots_t, value_BHtD)
        if self.visible is not None:
            return (self.keys[layer_idx][:, :, :self.visible],
                    self.values[layer_idx][:, :, :self.visible])
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        # Read only where a model is not given position ids; this path always gives them.
        return self.visible or 0

    def fill_from(self, prefill: "SlotKVCache", source_rows_B: torch.Tensor) -> None:
        """Row b of this cache gets row source_rows_B[b] of `prefill`'s slots [0, its L)."""
        width = prefill.length
        for mine, theirs in ((self.keys, prefill.keys), (self.values, prefill.values)):
            if not mine:  # allocate like the prefill's layers, with this cache's rows
                for t in theirs:
                    mine.append(torch.zeros(self.rows, t.shape[1], self.length, t.shape[3],
                                            dtype=t.dtype, device=self.device))
            for dst, src in zip(mine, theirs):
                dst[:, :, :width].copy_(src.index_select(0, source_rows_B))


def prefill_mask(attn_PW: torch.Tensor, kind: str, dtype: torch.dtype) -> torch.Tensor:
    """[P, 1, W, W]: query i of row p attends key j <= i when j is a prompt token. A query at a
    padding position attends itself alone: a row with nothing to attend to would be NaN there
    and poison the keys other rows mask out (0 x NaN is NaN)."""
    w = attn_PW.shape[1]
    causal_WW = torch.ones(w, w, dtype=torch.bool, device=attn_PW.device).tril()
    allowed_PWW = causal_WW[None] & attn_PW.bool()[:, None, :]
    allowed_PWW |= torch.eye(w, dtype=torch.bool, device=attn_PW.device)[None]
    return _as_kind(allowed_PWW[:, None], kind, dtype)


def decode_mask(attn_BW: torch.Tensor, length: int, kind: str,
                dtype: torch.dtype) -> torch.Tensor:
    """[B, 1, 1, L]: the prompt's tokens visible, every later slot hidden until written (the
    caller opens slot W + t before step t)."""
    allowed_BL = torch.zeros(attn_BW.shape[0], length, dtype=torch.bool, device=attn_BW.device)
    allowed_BL[:, :attn_BW.shape[1]] = attn_BW.bool()
    return _as_kind(allowed_BL[:, None, None], kind, dtype)


def _as_kind(allowed: torch.Tensor, kind: str, dtype: torch.dtype) -> torch.Tensor:
    if kind == "sdpa":
        return allowed
    # eager: added to the scores; the dtype's lowest finite value, so no row is all -inf
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(dtype).min)


def open_slot(mask_B11L: torch.Tensor, slot: int) -> None:
    """Make slot `slot` visible to every row (in place: a captured graph reads this tensor)."""
    mask_B11L[..., slot] = True if mask_B11L.dtype == torch.bool else 0.0


@dataclass
class _Graph:
    """One captured decode step and the tensors it reads and writes, for one (rows, length)."""

    rows: int
    length: int
    cache: SlotKVCache
    token_B1: torch.Tensor
    position_B1: torch.Tensor
    mask_B11L: torch.Tensor
    logits_BV: torch.Tensor | None = None
    graph: "torch.cuda.CUDAGraph | None" = None


Sampler = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class StaticDecoder:
    """Decodes one chunk of prompts with fixed shapes (module docstring). `cuda_graphs` captures
    the decode step on CUDA; a capture that fails is logged once and the step runs eagerly."""

    def __init__(self, model: torch.nn.Module, cuda_graphs: bool = True, sync_every: int = 16):
        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.kind = model.config._attn_implementation  # the prefill's; the mask's kind
        register_grouped_decode_attention()
        self.use_graphs = cuda_graphs and self.device.type == "cuda"
        self.sync_every = sync_every
        self._graph: _Graph | None = None  # the last shape's graph: steps repeat their shape
        self.graph_captures = 0  # how many graphs were captured (tests and benchmarks read it)

    def decode(self, prompts: list[list[int]], params: SamplingParams, pad_token_id: int,
               stop_ids: tuple[int, ...], sample: Sampler, forward_lock,
               stop_string_end: Callable[[list[int], int], bool]) -> tuple[list[list[int]],
                                                                          list[list[float]],
                                                                          list[bool]]:
        """Tokens, logprobs and whether each row stopped (vs ran out of length), for rows in
        prompt-major order (row i * n + k is sample k of prompt i)."""
        n, steps = params.n, params.max_tokens
        attn_PW, ids_PW = self._left_pad(prompts, pad_token_id)
        width = ids_PW.shape[1]
        rows = len(prompts) * n
        length = -(-(width + steps) // LENGTH_BUCKET) * LENGTH_BUCKET
        state = self._state(rows, length)
        logits_BV = self._prefill(ids_PW, attn_PW, n, state, forward_lock)
        attn_BW = attn_PW.repeat_interleave(n, dim=0)
        state.mask_B11L.copy_(decode_mask(attn_BW, length, self.kind, self.dtype))
        state.position_B1.copy_(attn_BW.sum(dim=1, keepdim=True))  # first answer position
        stop_ids_S = torch.tensor(stop_ids, dtype=torch.long, device=self.device)
        tokens_BT = torch.zeros(rows, steps, dtype=torch.long, device=self.device)
        logprobs_BT = torch.zeros(rows, steps, dtype=torch.float32, device=self.device)
        stopped_B = torch.zeros(rows, dtype=torch.bool, device=self.device)
        end_B = torch.full((rows,), steps, dtype=torch.long, device=self.device)
        checked = 0  # steps whose stop strings the host has looked at
        for t in range(steps):
            tok_B, logp_B = sample(logits_BV)
            tokens_BT[:, t], logprobs_BT[:, t] = tok_B, logp_B
            hit_B = torch.isin(tok_B, stop_ids_S) & ~stopped_B
            end_B = torch.where(hit_B, t + 1, end_B)
            stopped_B |= hit_B
            last = t == steps - 1
            if last or (t + 1) % self.sync_every == 0:
                checked = self._check_stop_strings(tokens_BT, stopped_B, end_B, checked, t + 1,
                                                   stop_string_end, params)
                if last or bool(stopped_B.all()):
                    break
            state.token_B1.copy_(tok_B[:, None])
            open_slot(state.mask_B11L, width + t)
            state.cache.write_at_1.fill_(width + t)
            with forward_lock:
                logits_BV = self._step(state)
            state.position_B1.add_(1)
        ends = end_B.tolist()
        tokens, logprobs = tokens_BT.tolist(), logprobs_BT.tolist()
        return ([row[:e] for row, e in zip(tokens, ends)],
                [row[:e] for row, e in zip(logprobs, ends)],
                stopped_B.tolist())

    # -- the pieces ---------------------------------------------------------------------------

    def _left_pad(self, prompts: list[list[int]],
                  pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        ids = [[pad_token_id] * (width - len(p)) + list(p) for p in prompts]
        attn = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
        return (torch.tensor(attn, dtype=torch.long, device=self.device),
                torch.tensor(ids, dtype=torch.long, device=self.device))

    def _state(self, rows: int, length: int) -> _Graph:
        if self._graph is not None and (self._graph.rows, self._graph.length) == (rows, length):
            return self._graph
        self._graph = None  # free the last shape's cache and graph before making new ones
        cache = SlotKVCache(rows, length, self.device, self.dtype)
        mask_dtype = torch.bool if self.kind == "sdpa" else self.dtype
        self._graph = _Graph(rows, length, cache,
                             token_B1=torch.zeros(rows, 1, dtype=torch.long, device=self.device),
                             position_B1=torch.zeros(rows, 1, dtype=torch.long,
                                                     device=self.device),
                             mask_B11L=torch.zeros(rows, 1, 1, length, dtype=mask_dtype,
                                                   device=self.device))
        return self._graph

    def _prefill(self, ids_PW: torch.Tensor, attn_PW: torch.Tensor, n: int, state: _Graph,
                 forward_lock) -> torch.Tensor:
        """Each prompt once; its keys and values copied to its n rows. Returns [B, V] logits
        of the first answer token."""
        prompts, width = ids_PW.shape
        prefill = SlotKVCache(prompts, width, self.device, self.dtype)
        prefill.visible = width
        with forward_lock:
            out = self.model(input_ids=ids_PW, position_ids=(attn_PW.cumsum(-1) - 1).clamp(min=0),
                             attention_mask=prefill_mask(attn_PW, self.kind, self.dtype),
                             past_key_values=prefill, use_cache=True, logits_to_keep=1)
        rows_B = torch.arange(prompts, device=self.device).repeat_interleave(n)
        state.cache.fill_from(prefill, rows_B)
        return out.logits[:, -1].float().repeat_interleave(n, dim=0)

    def _forward(self, state: _Graph) -> torch.Tensor:
        with attention_as(self.model, GROUPED_DECODE):
            out = self.model(input_ids=state.token_B1, position_ids=state.position_B1,
                             attention_mask=state.mask_B11L, past_key_values=state.cache,
                             use_cache=True)
        return out.logits[:, -1].float()

    def _step(self, state: _Graph) -> torch.Tensor:
        if not self.use_graphs:
            return self._forward(state)
        if state.graph is None:
            try:
                self._capture(state)
            except Exception as e:  # a model or torch that cannot be captured: run eagerly
                log.warning("transformers engine: the decode step could not be captured as a "
                            "CUDA graph (%s: %s); decoding eagerly", type(e).__name__, e)
                self.use_graphs = False
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)  # a half-made capture left behind
                return self._forward(state)
        state.graph.replay()
        return state.logits_BV

    def _capture(self, state: _Graph) -> None:
        """Warm up on a side stream (as torch's graph docs ask), then capture one step. The
        warm-up writes the slot this step is about to write anyway, so nothing is lost."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._forward(state)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: with asynchronous generation the learner launches work from another
        # thread while this one captures; only this thread's calls are bound by the capture.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            state.logits_BV = self._forward(state)
        state.graph = graph
        self.graph_captures += 1

    def _check_stop_strings(self, tokens_BT: torch.Tensor, stopped_B: torch.Tensor,
                            end_B: torch.Tensor, checked: int, upto: int,
                            stop_string_end: Callable[[list[int], int], bool],
                            params: SamplingParams) -> int:
        """Ends, at the first token that completes a stop string, each live row among steps
        [checked, upto); in place on the device tensors. Returns `upto`."""
        if not params.stop_strings:
            return upto
        live = (~stopped_B).nonzero().squeeze(1).tolist()
        if not live:
            return upto
        block = tokens_BT[live, :upto].tolist()
        for row, toks in zip(live, block):
            for t in range(checked, upto):
                if stop_string_end(toks, t + 1):
                    stopped_B[row], end_B[row] = True, t + 1
                    break
        return upto
