"""The learner's update on SmolLM2-135M, eager against compiled decoder layers (`model.compile`),
each with sdpa and with eager attention (`model.attn_implementation`), in one process,
alternating, against this machine's matmul peak measured in the same run.

    python benchmarks/compile.py [--updates 4] [--threads 2] [--attention sdpa eager] [--head]

With `--head`, both learners of an attention compile their layers, one with the vocabulary head
eager (its compiled head removed), one with it compiled too, as `model.compile` does.

A learner per setting on the same weights, the compiled ones compiling with inductor (as
`model.compile` does); each gets the same batches in turn, so all see the same machine state.
Batches have the quick start's shape (`configs/quickstart.yaml`, built by
`benchmarks/learners.py`'s `build_batch`): 8 addition prompts from SmolLM2's chat template, 8
responses each of 8-32 random tokens ("full"), and a late one of 2 prompts with 2-9-token
answers ("late"); the config's two micro-batches, bf16 autocast where the CPU has it natively
(as the run decides), DAPO's loss.
Printed per batch and setting: the first update (for the compiled learner, the compile), the
median of the next `--updates`, tokens per second and MFU, which counts as the run's
`learner_mfu` does (6N + 12LHS FLOPs per token, `rlvr.metrics.throughput`) and also by 6N
alone, against the peak of the dtype the learner computes in. The peak is measured again after
each batch's updates and the highest so far is used (this machine's speed drifts; the higher
peak gives the lower MFU).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlvr.device import cpu_name


def quick_start_batches(cfg, tokenizer) -> dict:
    """A full quick-start batch and a late one (few groups, short answers), built as
    `benchmarks/learners.py` builds its batches."""
    from learners import build_batch  # benchmarks/ is on sys.path when run as a script

    r = cfg.rollout

    def shape(prompts: int, response_length: int, seed: int) -> argparse.Namespace:
        return argparse.Namespace(prompts=prompts, samples=r.num_samples_per_prompt_rollout,
                                  response_length=response_length, seed=seed)

    return {"full": build_batch(shape(r.num_unique_prompts_rollout, r.response_length, 1), cfg,
                                tokenizer),
            "late": build_batch(shape(2, 9, 2), cfg, tokenizer)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=4, help="timed updates per setting")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--attention", nargs="+", default=["sdpa", "eager"],
                        choices=["sdpa", "eager"], help="model.attn_implementation values")
    parser.add_argument("--head", action="store_true",
                        help="compiled layers with an eager head against compiled layers and head")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from rlvr.algorithm.losses import LossParams, PolicyLoss
    from rlvr.config import load_config
    from rlvr.device import cpu_has_native_bf16, keep_freed_host_memory
    from rlvr.learner import Learner, LearnerSettings
    from rlvr.learner.forward import COMPILED_HEAD
    from rlvr.metrics.throughput import (ModelShape, measure_matmul_flops,
                                         transformer_flops_per_token)
    from rlvr.models import load_causal_lm, load_tokenizer, resolve_model_dir

    keep_freed_host_memory()  # as the run does on a CPU learner (model.keep_freed_host_memory)
    bf16 = cpu_has_native_bf16()
    dtype = torch.bfloat16 if bf16 else torch.float32
    def measure_peak() -> float:
        return max(measure_matmul_flops(dtype, size, seconds=1.0) for size in (1024, 2048, 4096))

    peak = measure_peak()
    print(f"CPU: {cpu_name()}, {args.threads} threads; learner computes in "
          f"{'bf16 (autocast)' if bf16 else 'fp32'}; matmul peak {peak / 1e9:.0f} GFLOP/s")

    model_dir = resolve_model_dir("smollm2-135m-instruct")
    tokenizer = load_tokenizer(model_dir)
    learners = {}
    for attention in args.attention:
        # (label, compile, keep the compiled head)
        modes = ([("compiled, eager head", True, False), ("compiled", True, True)] if args.head
                 else [("eager", False, False), ("compiled", True, True)])
        for mode, compile_, head in modes:
            settings = LearnerSettings(learning_rate=1e-7, lr_scheduler_type="constant",
                                       warm_up_steps=0, total_optimizer_steps=1000,
                                       bf16_autocast=bf16,
                                       compile_backend="inductor" if compile_ else None)
            torch.manual_seed(0)
            policy = load_causal_lm(model_dir, attn_implementation=attention)
            learners[f"{mode}, {attention} attention"] = Learner(policy, None, settings)
            if compile_ and not head:
                delattr(policy, COMPILED_HEAD)
    baseline = next(iter(learners))
    shape = ModelShape.of(learners[baseline].policy)

    cfg = load_config("configs/quickstart.yaml")
    for label, batch in quick_start_batches(cfg, tokenizer).items():
        loss = PolicyLoss("dapo", LossParams(0.2, 0.28, 0.0, 1, float(batch.num_response_tokens)))
        times: dict[str, list[float]] = {name: [] for name in learners}
        for _ in range(args.updates + 1):  # the first of each is the warm-up (or the compile)
            for name, learner in learners.items():
                start = time.perf_counter()
                learner.update(batch, loss, cfg.gradient_accumulation_steps, 1, 1.0)
                times[name].append(time.perf_counter() - start)
        again = measure_peak()
        peak = max(peak, again)
        rows, length = batch.input_ids_RL.shape
        seq_len = batch.num_tokens // batch.num_sequences
        full = transformer_flops_per_token(shape.num_params, shape.num_layers, shape.hidden_size,
                                           seq_len)
        print(f"\n{label}: {batch.num_sequences} sequences, {batch.num_tokens} tokens in {rows} "
              f"rows of {length}; median of {args.updates} updates after the first; peak measured "
              f"again: {again / 1e9:.0f} GFLOP/s, MFU against {peak / 1e9:.0f}")
        medians = {}
        for name, spent in times.items():
            medians[name] = statistics.median(spent[1:])
            tokens_per_second = batch.num_tokens / medians[name]
            print(f"  {name:39s} first {spent[0]:6.2f} s   {medians[name]:5.2f} s/update   "
                  f"{tokens_per_second:4.0f} tokens/s   MFU {full * tokens_per_second / peak:.1%}"
                  f" (6N only {6 * shape.num_params * tokens_per_second / peak:.1%})   "
                  f"all: {' '.join(f'{t:.2f}' for t in spent)}")
        for name in list(learners)[1:]:
            # Also the median of each round's ratio: the two updates of a round ran seconds
            # apart, so a machine that slows for minutes (a neighbour's load) skews it less.
            paired = statistics.median(
                b / t for b, t in zip(times[baseline][1:], times[name][1:]))
            print(f"  {name} against {baseline}: {medians[baseline] / medians[name]:.2f}x faster "
                  f"(median of the rounds' ratios {paired:.2f}x)")


if __name__ == "__main__":
    main()
