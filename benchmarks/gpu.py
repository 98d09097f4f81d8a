"""Learner speed and memory on whatever device runs it: seconds per update, tokens per second,
MFU and peak memory, for a model of a real shape built from its config (random weights, no
download), in the precision a GPU run uses (fp32 master weights, bf16 compute).

    python benchmarks/gpu.py                                   # Qwen2.5-1.5B's shape on CUDA
    python benchmarks/gpu.py --shape qwen2.5-0.5b --tokens 8192 --steps 5
    python benchmarks/gpu.py --model /path/to/hf-dir           # real weights from a directory
    python benchmarks/gpu.py --shape tiny --device cpu         # checks the script itself here

Each update is a DAPO step over packed rows of `--pack-length` tokens, `--tokens` in all, with
random responses making up half of every sequence; `--max-tokens-per-micro-batch` cuts it as
`algorithm.max_tokens_per_micro_batch` does. The first update (allocator warm-up, kernel
selection) is not counted. MFU uses `rlvr.metrics.default_peak_flops` for the device (bf16
dense peak of A100/H100/H200/L40) unless `--peak-tflops` is given. Generation speed is
`benchmarks/generation.py`'s job.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

# Model shapes from their published configs (hidden, layers, heads, kv heads, MLP, vocab).
SHAPES = {
    "qwen2.5-1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, intermediate_size=8960, vocab_size=151936,
                         tie_word_embeddings=True),
    "qwen2.5-0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
                         tie_word_embeddings=True),
    "qwen2.5-7b": dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, intermediate_size=18944, vocab_size=152064,
                       tie_word_embeddings=False),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=128, vocab_size=512,
                 tie_word_embeddings=True),
}


def build_model(args: argparse.Namespace) -> torch.nn.Module:
    from rlvr.models import load_causal_lm

    if args.model:
        return load_causal_lm(args.model, "float32", attn_implementation=args.attn)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hf_name = {"flex": "flex_attention"}.get(args.attn, args.attn)
    config = Qwen2Config(**SHAPES[args.shape], max_position_embeddings=32768,
                         attn_implementation=hf_name)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config)


def build_batch(args: argparse.Namespace, vocab_size: int):
    from rlvr.algorithm.packing import SequenceToPack, pack_sequences

    rng = random.Random(0)
    seqs, total = [], 0
    while total < args.tokens:
        length = rng.randint(args.pack_length // 4, args.pack_length // 2)
        prompt = [rng.randrange(3, vocab_size) for _ in range(length // 2)]
        response = [rng.randrange(3, vocab_size) for _ in range(length - len(prompt))]
        seqs.append(SequenceToPack(prompt, response, [-2.0] * len(response),
                                   advantage=rng.choice([-1.0, 1.0]), index=len(seqs)))
        total += length
    return pack_sequences(seqs, pack_length=args.pack_length, strategy="first_fit_decreasing")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    parser.add_argument("--model", default="", help="a local HF model directory instead")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--bf16", default="auto", choices=["auto", "on", "off"])
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "flex", "flash_attention_2"],
                        help="model.attn_implementation")
    parser.add_argument("--tokens", type=int, default=32768, help="tokens per update")
    parser.add_argument("--pack-length", type=int, default=4096)
    parser.add_argument("--max-tokens-per-micro-batch", type=int, default=16384)
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction,
                        default=True)
    parser.add_argument("--steps", type=int, default=3, help="timed updates (after a warm-up)")
    parser.add_argument("--peak-tflops", type=float, default=None)
    args = parser.parse_args()

    from rlvr.algorithm.losses import LossParams, compute_policy_loss
    from rlvr.device import describe_host, memory_metrics, resolve_device
    from rlvr.learner import Learner, LearnerSettings
    from rlvr.metrics import default_peak_flops, mfu, transformer_flops_per_token

    device = resolve_device(args.device)
    bf16 = device.bf16_compute(None if args.bf16 == "auto" else args.bf16 == "on")
    print(f"device: {device.describe()}")
    print(f"host: {describe_host()}")
    model = build_model(args).to(device.torch)
    num_params = sum(p.numel() for p in model.parameters())
    settings = LearnerSettings(learning_rate=1e-6, lr_scheduler_type="constant",
                               warm_up_steps=0, total_optimizer_steps=args.steps + 1,
                               bf16_autocast=bf16,
                               gradient_checkpointing=args.gradient_checkpointing,
                               max_tokens_per_micro_batch=args.max_tokens_per_micro_batch)
    learner = Learner(model, None, settings, device=device.torch)
    batch = build_batch(args, model.config.vocab_size)
    params = LossParams(0.2, 0.28, 0.0, 2, float(batch.num_response_tokens))
    loss = lambda inputs: compute_policy_loss("dapo", inputs, params)  # noqa: E731
    print(f"model: {args.model or args.shape}, {num_params / 1e6:,.1f} M parameters, "
          f"bf16 compute {bf16}, gradient checkpointing {args.gradient_checkpointing}")
    print(f"batch: {batch.num_tokens} tokens in {batch.num_rows} rows of {args.pack_length}, "
          f"{batch.num_response_tokens} response tokens, micro-batches of at most "
          f"{args.max_tokens_per_micro_batch} token slots")

    seconds, peaks = [], []
    for step in range(args.steps + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device.torch)
        start = time.perf_counter()
        result = learner.update(batch, loss, num_micro_batches=1, num_epochs=1, temperature=1.0)
        if device.type == "cuda":
            torch.cuda.synchronize(device.torch)
        took = time.perf_counter() - start
        label = "warm-up" if step == 0 else f"step {step}"
        memory = result.memory or memory_metrics(device.torch)
        print(f"  {label}: {took:.2f} s, grad norm {result.grad_norm:.3g}, "
              + ", ".join(f"{k.split('/')[1]} {v:.2f}" for k, v in sorted(memory.items())))
        if step:
            seconds.append(took)
            peaks.append(memory.get("memory/peak_gb", memory.get("memory/peak_rss_gb", 0.0)))
    per_step = statistics.median(seconds)
    tokens_per_second = batch.num_tokens / per_step
    flops = transformer_flops_per_token(num_params, model.config.num_hidden_layers,
                                        model.config.hidden_size,
                                        batch.num_tokens // max(len(batch.seq_lens_per_row), 1),
                                        training=True)
    peak = (args.peak_tflops * 1e12 if args.peak_tflops
            else default_peak_flops("bfloat16" if bf16 else "float32", torch.get_num_threads()))
    print(f"s/step {per_step:.3f} (median of {len(seconds)}) | tokens/s {tokens_per_second:,.0f}"
          f" | MFU {100 * mfu(flops, tokens_per_second, peak):.1f}% of {peak / 1e12:.3g} TFLOP/s"
          f" | peak memory {max(peaks):.2f} GB")


if __name__ == "__main__":
    main()
