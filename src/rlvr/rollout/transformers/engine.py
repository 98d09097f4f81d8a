"""Sampling with plain transformers: batched, KV-cached, one token per step for all live rows.

Why our own decoding loop rather than `model.generate`: we need the logprob of every sampled token
under the temperature-scaled distribution without keeping [B, T, V] scores around, and we drop
rows from the batch as soon as they finish (`generate` runs every row until the longest ends,
which with GRPO's spread of lengths wastes most of the compute on a CPU).

Two decoding paths, chosen by `rollout.transformers_decode`: `dynamic` (this module's loop,
rows dropped as they finish: the CPU's) and `static` (`rlvr.rollout.transformers.static_decode`: fixed shapes,
one KV cache for the whole call, the decode step captured as a CUDA graph: the GPU's). `auto` is
static on CUDA where the model allows it, else dynamic. Both sample with `sample_tokens` and
report the same logprobs.

vLLM is the fast engine where it installs; this one serves tests, CPUs, and models vLLM does
not support yet. It knows nothing about rewards or chat templates; it decodes text only to report
it and to detect stop strings.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Iterable

import torch

from rlvr.device import resolve_device
from rlvr.models import load_causal_lm, load_tokenizer
from rlvr.rollout.base import EngineSettings
from rlvr.rollout.transformers.static_decode import StaticDecoder, unsupported_reason
from rlvr.types import Completion, SamplingParams

log = logging.getLogger(__name__)
DECODE_MODES = ("auto", "static", "dynamic")  # rollout.transformers_decode


def create_transformers_engine(model_dir: str, cfg: EngineSettings, eos_token_ids: tuple[int, ...],
                               pad_token_id: int) -> "TransformersEngine":
    device = resolve_device(cfg.device)
    model = load_causal_lm(model_dir, cfg.dtype).to(device.torch)
    return TransformersEngine(model, load_tokenizer(model_dir), eos_token_ids, pad_token_id,
                              cfg.max_batch_rows, inflight_updates=cfg.inflight_updates,
                              decode=cfg.transformers_decode, cuda_graphs=cfg.cuda_graphs)


class TransformersEngine:
    def __init__(self, model: torch.nn.Module, tokenizer, eos_token_ids: tuple[int, ...],
                 pad_token_id: int, max_batch_rows: int = 256, inflight_updates: bool = False,
                 decode: str = "auto", cuda_graphs: bool = True):
        self.model = model.eval()
        self.device = next(model.parameters()).device  # every tensor of a generation goes here
        self.tokenizer = tokenizer
        self.eos_token_ids = tuple(eos_token_ids)
        self.pad_token_id = pad_token_id
        self.max_batch_rows = max_batch_rows
        self.version = 0
        # Weights change only under this lock. Without in-flight updates a generate call holds it
        # throughout (an update waits for the batch); with them, only each forward pass does,
        # so new weights apply between two tokens and a sample may span several versions.
        self.inflight_updates = inflight_updates
        self._lock = threading.RLock()
        self.static = self._static_decoder(decode, cuda_graphs)  # None: the dynamic path

    def _static_decoder(self, decode: str, cuda_graphs: bool) -> StaticDecoder | None:
        if decode not in DECODE_MODES:
            raise ValueError(f"transformers_decode={decode!r} is not one of {DECODE_MODES}")
        if decode == "dynamic" or (decode == "auto" and self.device.type != "cuda"):
            return None
        reason = unsupported_reason(self.model)
        if reason is not None:
            log.warning("transformers engine: static decoding cannot serve this model (%s); "
                        "decoding dynamically", reason)
            return None
        return StaticDecoder(self.model, cuda_graphs=cuda_graphs)

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        gen = torch.Generator(device=self.device)
        gen.manual_seed(params.seed if params.seed is not None else torch.seed())
        per_chunk = max(1, self.max_batch_rows // params.n)
        flat: list[Completion] = []
        with (contextlib.nullcontext() if self.inflight_updates else self._lock):
            for start in range(0, len(prompts), per_chunk):
                flat += self._generate_chunk([list(p) for p in prompts[start:start + per_chunk]],
                                             params, gen)
        return [flat[i * params.n:(i + 1) * params.n] for i in range(len(prompts))]

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        state = self.model.state_dict()
        with self._lock, torch.no_grad():
            for name, tensor in named_tensors:
                if name not in state:
                    raise KeyError(f"engine has no weight named '{name}'")
                state[name].copy_(tensor)  # copy_ casts to the engine's dtype
            # Under the lock: a prefill taking it between the copy and this line would sample
            # with the new weights and stamp the old version, one update staler than it is.
            self.version = version

    def close(self) -> None:
        pass

    def _generate_chunk(self, prompts: list[list[int]], params: SamplingParams,
                        gen: torch.Generator) -> list[Completion]:
        """Rows are prompt-major: row i * n + k is the k-th sample of prompt i."""
        if self.static is None:
            return self._generate_dynamic(prompts, params, gen)
        stop_ids = self.eos_token_ids + tuple(params.stop_token_ids)
        with self._lock:
            version = self.version  # the oldest weights any of these samples sees
        tokens, logprobs, stopped = self.static.decode(
            prompts, params, self.pad_token_id, stop_ids,
            sample=lambda logits_BV: sample_tokens(logits_BV, params.temperature, params.top_p,
                                                   gen),
            forward_lock=self._lock,
            stop_string_end=lambda toks, end: self._stop_string_at(toks, end, params))
        return self._completions(tokens, logprobs, stopped, version)

    def _completions(self, tokens: list[list[int]], logprobs: list[list[float]],
                     stopped: list[bool], version: int) -> list[Completion]:
        return [Completion(token_ids_T=t, logprobs_T=lp, finish_reason="stop" if s else "length",
                           text=self.tokenizer.decode(t, skip_special_tokens=True),
                           model_version=version)
                for t, lp, s in zip(tokens, logprobs, stopped)]

    def _stop_string_at(self, tokens: list[int], end: int, params: SamplingParams) -> bool:
        """Whether tokens[:end] ends in a stop string: the test the dynamic path makes after
        each token (a stop string spans at most len(s) tokens; only that tail is decoded)."""
        tail = max(len(s) for s in params.stop_strings) + 1
        text = self.tokenizer.decode(tokens[max(0, end - tail):end], skip_special_tokens=False)
        return any(s in text for s in params.stop_strings)

    def _generate_dynamic(self, prompts: list[list[int]], params: SamplingParams,
                          gen: torch.Generator) -> list[Completion]:
        stop_ids = torch.tensor(self.eos_token_ids + tuple(params.stop_token_ids),
                                dtype=torch.long, device=self.device)
        input_ids_PL, attn_PL = self._left_pad(prompts)
        pos_PL = (attn_PL.cumsum(-1) - 1).clamp(min=0)
        # Prefill each prompt once, then copy its KV cache to its n sample rows.
        with self._lock:
            version = self.version  # the oldest weights any of these samples sees
            out = self.model(input_ids=input_ids_PL, attention_mask=attn_PL, position_ids=pos_PL,
                             use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        if params.n > 1:
            cache.batch_repeat_interleave(params.n)
        logits_bV = out.logits[:, -1].float().repeat_interleave(params.n, dim=0)
        attn_BP = attn_PL.repeat_interleave(params.n, dim=0)
        next_pos_b = pos_PL[:, -1].repeat_interleave(params.n) + 1
        rows = [p for p in prompts for _ in range(params.n)]
        live_b = torch.arange(len(rows), device=self.device)  # original index of each live row
        tokens: list[list[int]] = [[] for _ in rows]
        logprobs: list[list[float]] = [[] for _ in rows]
        stopped = [False] * len(rows)
        for t in range(params.max_tokens):
            tok_b, logp_b = sample_tokens(logits_bV, params.temperature, params.top_p, gen)
            for row, tok, lp in zip(live_b.tolist(), tok_b.tolist(), logp_b.tolist()):
                tokens[row].append(tok)
                logprobs[row].append(lp)
            done_b = torch.isin(tok_b, stop_ids) | self._hit_stop_string(live_b, tokens, params)
            for row in live_b[done_b].tolist():
                stopped[row] = True
            if t == params.max_tokens - 1 or bool(done_b.all()):
                break
            if bool(done_b.any()):
                keep_b = (~done_b).nonzero().squeeze(1)
                cache.batch_select_indices(keep_b)
                attn_BP, next_pos_b, live_b, tok_b = (
                    attn_BP[keep_b], next_pos_b[keep_b], live_b[keep_b], tok_b[keep_b])
            attn_BP = torch.cat([attn_BP, attn_BP.new_ones(len(live_b), 1)], dim=1)
            with self._lock:
                out = self.model(input_ids=tok_b[:, None], attention_mask=attn_BP,
                                 position_ids=next_pos_b[:, None], past_key_values=cache,
                                 use_cache=True)
            cache, logits_bV = out.past_key_values, out.logits[:, -1].float()
            next_pos_b = next_pos_b + 1
        return self._completions(tokens, logprobs, stopped, version)

    def _left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        input_ids_BP = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long,
                                  device=self.device)
        attn_BP = torch.zeros((len(rows), width), dtype=torch.long, device=self.device)
        for i, r in enumerate(rows):
            input_ids_BP[i, width - len(r):] = torch.tensor(r, dtype=torch.long,
                                                            device=self.device)
            attn_BP[i, width - len(r):] = 1
        return input_ids_BP, attn_BP

    def _hit_stop_string(self, live_b: torch.Tensor, tokens: list[list[int]],
                         params: SamplingParams) -> torch.Tensor:
        hit_b = torch.zeros(len(live_b), dtype=torch.bool, device=live_b.device)
        if not params.stop_strings:
            return hit_b
        for j, row in enumerate(live_b.tolist()):
            hit_b[j] = self._stop_string_at(tokens[row], len(tokens[row]), params)
        return hit_b


def sample_tokens(logits_BV: torch.Tensor, temperature: float, top_p: float,
                  gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; return it and its logprob under the distribution it was drawn
    from: softmax(logits / temperature), truncated to the top-p nucleus and renormalised.

    One convention for every engine (vLLM's `processed_logprobs` is the same): the logprob of
    what was actually sampled, which is what importance sampling needs. With top_p = 1 it equals
    the learner's logprob at the same temperature; with top_p < 1 it is higher by the log of the
    nucleus mass, which is why the config refuses rho correction with top_p < 1.
    temperature 0 means greedy (logprob at temperature 1).
    """
    if temperature == 0:
        logp_BV = torch.log_softmax(logits_BV, dim=-1)
        tok_B = logp_BV.argmax(dim=-1)
        return tok_B, logp_BV.gather(1, tok_B[:, None]).squeeze(1)
    logp_BV = torch.log_softmax(logits_BV / temperature, dim=-1)
    probs_BV = logp_BV.exp()
    if top_p < 1.0:
        sorted_BV, order_BV = probs_BV.sort(dim=-1, descending=True)
        # Drop a token when the mass before it already reaches top_p (the top token always stays).
        drop_BV = (sorted_BV.cumsum(dim=-1) - sorted_BV) >= top_p
        sorted_BV = sorted_BV.masked_fill(drop_BV, 0.0)
        probs_BV = torch.zeros_like(probs_BV).scatter(1, order_BV, sorted_BV)
        # Renormalise over the nucleus: log p - log(kept mass) for the kept tokens.
        logp_BV = logp_BV - torch.log(probs_BV.sum(dim=-1, keepdim=True))
    tok_B = torch.multinomial(probs_BV, 1, generator=gen).squeeze(1)
    return tok_B, logp_BV.gather(1, tok_B[:, None]).squeeze(1)
