"""Generation tokens per second of the transformers engine on a GPU: today's dynamic decoding
against static decoding (one KV cache, fixed shapes) with and without CUDA graphs.

    python benchmarks/gpu_generation.py --shape smollm2-135m            # random weights
    python benchmarks/gpu_generation.py --model DIR --gsm8k             # real model, GSM8K prompts
    python benchmarks/gpu_generation.py --device cpu --shape tiny --prompts 2 --tokens 8  # dry run

Each mode starts its own engine over the same model and generates the same prompts (`--prompts`
x `--samples` rows, up to `--tokens` new tokens, temperature 1) once to warm up (the graph's
capture happens there) and once timed. Random weights rarely sample the stop token, so every row
runs to `--tokens`: the figure is decode throughput at that batch, not a task's. A greedy check
compares the modes' tokens on the first rows (bf16 kernels may part after some tokens). Prints
one JSON line per mode and a table; `--out` appends the lines to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import torch

sys.path.append(os.path.dirname(os.path.abspath(__file__)))
from generation import _prompts as gsm8k_prompts  # noqa: E402  (the CPU benchmark's)
from gpu import SHAPES  # noqa: E402

MODES = {  # name -> (transformers_decode, cuda_graphs, max_batch_rows or None for all rows)
    "dynamic": ("dynamic", False, 256),  # the engine as it was: rows dropped, 256 rows a chunk
    "static-eager": ("static", False, None),
    "static": ("static", True, None),
}


class _NoText:
    """Stands in for a tokenizer with random weights: the engine decodes only to report text."""

    def decode(self, ids, skip_special_tokens=True):
        return ""


def build(args, device: torch.device):
    from rlvr.models import load_causal_lm, load_tokenizer

    if args.model:
        tok = load_tokenizer(args.model)
        return load_causal_lm(args.model, args.dtype).to(device), tok, tok.eos_token_id
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**SHAPES[args.shape], max_position_embeddings=32768,
                         attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    return model.to(getattr(torch, args.dtype)), _NoText(), 2


def prompts(args, tokenizer, vocab: int) -> list[list[int]]:
    if args.gsm8k:
        return gsm8k_prompts(tokenizer, args.prompts)
    rng = random.Random(0)  # GSM8K's templated prompts are 100-220 tokens
    return [[rng.randrange(100, vocab - 100) for _ in range(rng.randint(args.prompt_min,
                                                                       args.prompt_max))]
            for _ in range(args.prompts)]


def run_mode(name: str, model, tokenizer, eos: int, batch, args) -> tuple[dict, list]:
    from rlvr.rollout.transformers.engine import TransformersEngine
    from rlvr.types import SamplingParams

    decode, graphs, rows = MODES[name]
    engine = TransformersEngine(model, tokenizer, (eos,), 0, decode=decode, cuda_graphs=graphs,
                                max_batch_rows=rows or len(batch) * args.samples)
    params = SamplingParams(n=args.samples, temperature=1.0, max_tokens=args.tokens, seed=1)
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    # Warm-up: static decoding on the timed shape (its graph is captured here); the dynamic
    # path has nothing to capture, so a short call warms its kernels.
    warm_batch, warm_params = ((batch, params) if decode == "static" else
                               (batch[:2], SamplingParams(n=2, temperature=1.0, max_tokens=8)))
    engine.generate(warm_batch, warm_params)
    sync()
    warm = time.perf_counter() - t0
    if model.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    groups = engine.generate(batch, params)
    sync()
    seconds = time.perf_counter() - t0
    tokens = sum(len(c.token_ids_T) for g in groups for c in g)
    greedy = engine.generate(batch[:args.check_prompts],
                             SamplingParams(n=2, temperature=0.0, max_tokens=args.check_tokens))
    record = {"mode": name, "rows": len(batch) * args.samples, "tokens": tokens,
              "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1),
              "warmup_s": round(warm, 2),
              "graphs": engine.static.graph_captures if engine.static else 0,
              "peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2)
              if model.device.type == "cuda" else None}
    return record, [(c.token_ids_T, c.logprobs_T) for g in greedy for c in g]


def agreement(ref: list, other: list) -> dict:
    """Greedy rows of `other` identical to `ref`'s, and where they first part on average."""
    same = sum(a[0] == b[0] for a, b in zip(ref, other))
    parts = [next((i for i, (x, y) in enumerate(zip(a[0], b[0])) if x != y), len(a[0]))
             for a, b in zip(ref, other)]
    # logprobs of the same tokens: up to (and with) the first token where the rows part
    gaps = [abs(x - y) for a, b, part in zip(ref, other, parts)
            for x, y in zip(a[1][:part + 1], b[1][:part + 1])]
    return {"identical_rows": f"{same}/{len(ref)}", "mean_first_diff": sum(parts) / len(parts),
            "max_logprob_gap_same_tokens": round(max(gaps), 5) if gaps else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m")
    parser.add_argument("--model", default="", help="a model directory instead of random weights")
    parser.add_argument("--gsm8k", action="store_true", help="GSM8K test prompts, chat template")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--prompt-min", type=int, default=100)
    parser.add_argument("--prompt-max", type=int, default=220)
    parser.add_argument("--check-prompts", type=int, default=8)
    parser.add_argument("--check-tokens", type=int, default=64)
    parser.add_argument("--modes", default="static,dynamic,static-eager")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    device = torch.device(args.device)
    model, tokenizer, eos = build(args, device)
    vocab = model.config.vocab_size
    batch = prompts(args, tokenizer, vocab)
    label = args.model or args.shape
    print(f"{label} on {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}: "
          f"{len(batch)} prompts x {args.samples} samples, up to {args.tokens} tokens, "
          f"{args.dtype}, torch {torch.__version__}", flush=True)
    records, greedy = [], {}
    for name in args.modes.split(","):
        record, greedy[name] = run_mode(name, model, tokenizer, eos, batch, args)
        record.update(model=label, device=str(device))
        first = args.modes.split(",")[0]
        if name != first:
            record["greedy_vs_" + first] = agreement(greedy[first], greedy[name])
        records.append(record)
        print(json.dumps(record), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(record) + "\n")
    base = next((r for r in records if r["mode"] == "dynamic"), records[-1])
    for r in records:
        print(f"  {r['mode']:>13}: {r['tokens_per_s']:>9.0f} tok/s  "
              f"({r['tokens_per_s'] / base['tokens_per_s']:.1f}x dynamic), {r['seconds']:.2f} s, "
              f"warm-up {r['warmup_s']:.1f} s, peak {r['peak_gb']} GB", flush=True)


if __name__ == "__main__":
    main()
