"""Seconds per pass over packed rows: sdpa with a dense mask against eager attention with the
same mask, additive, and flex attention with a block mask (`model.attn_implementation` sdpa |
eager | flex, `rlvr.learner.attention`), on this machine.

All run the learner's own path (`forward_logprobs`) on one model with the same weights, built
from a config (SmolLM2-135M's shape by default, random weights: nothing to download). Batches
hold the quick start's groups (a 44-token prompt shared by 8 responses of 8-32 tokens) packed
into rows of each length, the same number of tokens per batch, so only attention's share of the
work changes with the row length. Passes:
- train: forward + backward of the summed logprobs (the learner's step, without the optimizer);
  flex only where torch can differentiate it (`check_attention_backward`: not on CPU in 2.13);
  with --bf16 under bf16 autocast, as the learner computes where bf16 is native;
- no-grad forward: what the reference model and logprob recomputation run; flex compiled, as
  transformers calls it (the first call per shape compiles: its time is printed apart), and,
  with --flex-eager, flex's unfused reference implementation (it materialises every score);
- attention alone: one layer's attention at the model's head shapes, mask built once, to show
  the kernels' ratio before the rest of the layer dilutes it.
Settings alternate within each repeat (noise from other processes hits both alike); figures
are medians, with the minimum.

    python benchmarks/attention.py                           # 30 layers, rows of 256/512/1024
    python benchmarks/attention.py --layers 4 --repeats 3    # a quicker look
    python benchmarks/attention.py --bf16 --lengths 256 512   # a bf16 learner's train pass
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Callable

import torch

SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                    tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=100000.0)


def build_models(layers: int, device: torch.device) -> dict[str, torch.nn.Module]:
    """The same weights under each attention implementation (transformers' names)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    def build(attn_implementation: str) -> torch.nn.Module:  # a config each: it holds the choice
        config = LlamaConfig(**SMOLLM2_135M, num_hidden_layers=layers)
        return LlamaForCausalLM._from_config(config, attn_implementation=attn_implementation)

    torch.manual_seed(0)
    models = {"sdpa": build("sdpa"), "eager": build("eager"), "flex": build("flex_attention")}
    for name in ("eager", "flex"):
        models[name].load_state_dict(models["sdpa"].state_dict())
    return {name: model.to(device).eval() for name, model in models.items()}  # no dropout


def build_batch(row_length: int, rows: int, seed: int):
    """Quick-start groups packed in order until `rows` rows are full."""
    from rlvr.algorithm.packing import SequenceToPack, pack_sequences

    rng = random.Random(seed)
    seqs: list[SequenceToPack] = []
    while True:
        prompt = [rng.randrange(3, 49152) for _ in range(44)]
        group = []
        for _ in range(8):
            n = rng.randint(8, 32)
            group.append(SequenceToPack(prompt, [rng.randrange(3, 49152) for _ in range(n)],
                                        [-1.0] * n, advantage=1.0, index=len(seqs) + len(group)))
        if pack_sequences(seqs + group, row_length).num_rows > rows:
            return pack_sequences(seqs, row_length)
        seqs += group


def _sync() -> None:
    if torch.accelerator.is_available():
        torch.accelerator.synchronize()


def timed(fn: Callable[[], object]) -> float:
    _sync()
    start = time.perf_counter()
    fn()
    _sync()
    return time.perf_counter() - start


def train_pass(model, batch, bf16: bool) -> None:
    from rlvr.learner.forward import forward_logprobs

    autocast = torch.autocast(batch.input_ids_RL.device.type, dtype=torch.bfloat16, enabled=bf16)
    with autocast:
        logprobs_RL, _ = forward_logprobs(model, batch, temperature=1.0)
    logprobs_RL.sum().backward()
    model.zero_grad(set_to_none=True)


def forward_pass(model, batch) -> None:
    from rlvr.learner.forward import forward_logprobs

    with torch.no_grad():
        forward_logprobs(model, batch, temperature=1.0)


def attention_passes(batch, model) -> dict[str, Callable[[], object]]:
    """One layer's attention (no grad) at the model's shapes, each with its mask prebuilt;
    sdpa and eager through the very functions the model's layers call (transformers')."""
    from torch.nn.attention.flex_attention import flex_attention
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.models.llama.modeling_llama import eager_attention_forward

    from rlvr.learner.attention import (packed_additive_mask, packed_attention_mask,
                                        packed_block_mask)

    config = model.config
    rows, length = batch.input_ids_RL.shape
    head_dim = config.hidden_size // config.num_attention_heads
    device = batch.input_ids_RL.device
    query = torch.randn(rows, config.num_attention_heads, length, head_dim, device=device)
    key = torch.randn(rows, config.num_key_value_heads, length, head_dim, device=device)
    dense = packed_attention_mask(batch.segment_ids_RL, batch.parent_segment_RL)
    additive = packed_additive_mask(batch.segment_ids_RL, batch.parent_segment_RL)
    block = packed_block_mask(batch.segment_ids_RL, batch.parent_segment_RL)
    compiled = torch.compile(flex_attention)
    layer = model.model.layers[0].self_attn  # its head groups and scaling; in eval: no dropout
    return {"sdpa": lambda: sdpa_attention_forward(layer, query, key, key, dense,
                                                   scaling=layer.scaling),
            "eager": lambda: eager_attention_forward(layer, query, key, key, additive,
                                                     scaling=layer.scaling),
            "flex": lambda: compiled(query, key, key, block_mask=block, enable_gqa=True)}


def race(passes: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """First call of each (compilation) timed apart, then `repeats` interleaved rounds."""
    first = {name: timed(fn) for name, fn in passes.items()}
    times: dict[str, list[float]] = {name: [] for name in passes}
    for _ in range(repeats):
        for name, fn in passes.items():
            times[name].append(timed(fn))
    for name, t in times.items():
        print(f"    {name:<11} {statistics.median(t):8.4f} s/iteration (median of {repeats}; "
              f"min {min(t):.4f}; first call {first[name]:.2f} s)", flush=True)
    for name in ("eager", "flex"):
        if "sdpa" in times and name in times:
            ratio = statistics.median(times[name]) / statistics.median(times["sdpa"])
            per_round = [f / s for f, s in zip(times[name], times["sdpa"])]
            print(f"    {name} / sdpa = {ratio:.3f} (per round {min(per_round):.3f}-"
                  f"{max(per_round):.3f}; below 1 means {name} is faster)", flush=True)
    return times


def with_eager_flex(fn: Callable[[], object]) -> Callable[[], object]:
    """`fn` run through flex's unfused reference implementation instead of the compiled one."""
    import transformers.integrations.flex_attention as hf_flex
    from torch.nn.attention.flex_attention import flex_attention

    def run():
        compiled = hf_flex.compile_friendly_flex_attention
        hf_flex.compile_friendly_flex_attention = (
            lambda query, key, value, training=False, **kwargs:
            flex_attention(query, key, value, **kwargs))
        try:
            return fn()
        finally:
            hf_flex.compile_friendly_flex_attention = compiled
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=30, help="30: SmolLM2-135M")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--tokens", type=int, default=1024, help="token slots per batch")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--flex-eager", action="store_true",
                        help="also time flex's unfused implementation (no-grad forward)")
    parser.add_argument("--bf16", action="store_true",
                        help="train passes under bf16 autocast (as a bf16 learner computes)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import warnings

    from rlvr.device import describe_host, resolve_device
    from rlvr.learner.attention import check_attention_backward, packed_block_mask

    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
    torch.set_num_threads(args.threads)
    device = resolve_device("auto").torch
    print(f"host: {describe_host()}, capability {torch.backends.cpu.get_cpu_capability()}; "
          f"computing on {device}, float32"
          f"{' (train passes: bf16 autocast)' if args.bf16 else ''}", flush=True)
    models = build_models(args.layers, device)
    print(f"model: SmolLM2-135M's shape with {args.layers} layers, "
          f"{sum(p.numel() for p in models['sdpa'].parameters()) / 1e6:.1f}M parameters")
    try:
        check_attention_backward(models["flex"], device)
        flex_trains = True
    except ValueError as error:
        flex_trains = False
        print(f"flex train pass skipped: {error}")
    for length in args.lengths:
        batch = build_batch(length, max(1, args.tokens // length), args.seed).to(device)
        rows, width = batch.input_ids_RL.shape
        block = packed_block_mask(batch.segment_ids_RL, batch.parent_segment_RL)
        computed = int(block.kv_num_blocks.sum() + block.full_kv_num_blocks.sum())
        print(f"\nrows of {length}: {rows} x {width} tokens ({batch.num_tokens} real, "
              f"{batch.num_sequences} sequences); flex computes {computed} of "
              f"{block.kv_indices.numel()} {block.BLOCK_SIZE[0]}x{block.BLOCK_SIZE[1]} blocks",
              flush=True)
        train = {name: (lambda m=models[name]: train_pass(m, batch, args.bf16))
                 for name in ("sdpa", "eager") + (("flex",) if flex_trains else ())}
        print("  train (forward + backward):", flush=True)
        race(train, args.repeats)
        forward = {name: (lambda m=model: forward_pass(m, batch)) for name, model in
                   models.items()}
        if args.flex_eager:
            forward["flex eager"] = with_eager_flex(forward["flex"])
        print("  no-grad forward:", flush=True)
        race(forward, args.repeats)
        print("  attention alone, one layer (no grad):", flush=True)
        race(attention_passes(batch, models["sdpa"]), 4 * args.repeats)


if __name__ == "__main__":
    main()
