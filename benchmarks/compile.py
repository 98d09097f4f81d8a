"""The learner's update on SmolLM2-135M, eager against compiled decoder layers (`model.compile`),
in one process, alternating, against this machine's matmul peak measured in the same run.

    python benchmarks/compile.py [--updates 4] [--threads 2]

Two learners on the same weights, one compiling with inductor (as `model.compile` does); each
gets the same batches in turn, so both see the same machine state. Batches have the quick
start's shape: 8 addition prompts from SmolLM2's chat template, 8 responses each of 12-24
random tokens ("full", about 1,450 tokens), and a late one of 2 prompts with 6-9-token answers
("late"); the quick start's two micro-batches, bf16 autocast where the CPU has it natively (as
the run decides), DAPO's loss. Printed per batch and setting: the first update (for the
compiled learner, the compile), the median of the next `--updates`, tokens per second and MFU,
which counts as the run's `learner_mfu` does (6N + 12LHS FLOPs per token,
`rlvr.metrics.throughput`) and also by 6N alone, against the peak of the dtype the learner
computes in.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from rlvr.device import cpu_name


def quick_start_batch(tokenizer, prompts: int, answer_tokens: tuple[int, int], seed: int):
    from rlvr.algorithm.packing import SequenceToPack, pack_sequences

    rng = random.Random(seed)
    seqs = []
    for _ in range(prompts):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        messages = [{"role": "user", "content": f"What is {a} + {b}? Answer with the number."}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                               tokenize=True, return_dict=False)
        for k in range(8):
            n = rng.randint(*answer_tokens)
            seqs.append(SequenceToPack(list(prompt), [rng.randrange(3, 49000) for _ in range(n)],
                                       [-1.0] * n, advantage=(-1.0) ** k, index=len(seqs)))
    return pack_sequences(seqs, pack_length=256, pad_id=tokenizer.pad_token_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=4, help="timed updates per setting")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from rlvr.algorithm.losses import LossParams, PolicyLoss
    from rlvr.device import cpu_has_native_bf16, keep_freed_host_memory
    from rlvr.learner import Learner, LearnerSettings
    from rlvr.metrics.throughput import (ModelShape, measure_matmul_flops,
                                         transformer_flops_per_token)
    from rlvr.models import load_causal_lm, load_tokenizer, resolve_model_dir

    keep_freed_host_memory()  # as the run does on a CPU learner (model.keep_freed_host_memory)
    bf16 = cpu_has_native_bf16()
    dtype = torch.bfloat16 if bf16 else torch.float32
    peak = max(measure_matmul_flops(dtype, size, seconds=1.0) for size in (1024, 2048, 4096))
    print(f"CPU: {cpu_name()}, {args.threads} threads; learner computes in "
          f"{'bf16 (autocast)' if bf16 else 'fp32'}; matmul peak {peak / 1e9:.0f} GFLOP/s")

    model_dir = resolve_model_dir("smollm2-135m-instruct")
    tokenizer = load_tokenizer(model_dir)
    learners = {}
    for name, compile_ in (("eager", False), ("compiled", True)):
        settings = LearnerSettings(learning_rate=1e-7, lr_scheduler_type="constant",
                                   warm_up_steps=0, total_optimizer_steps=1000,
                                   bf16_autocast=bf16,
                                   compile_backend="inductor" if compile_ else None)
        torch.manual_seed(0)
        learners[name] = Learner(load_causal_lm(model_dir), None, settings)
    shape = ModelShape.of(learners["eager"].policy)

    batches = {"full": quick_start_batch(tokenizer, 8, (12, 24), seed=1),
               "late": quick_start_batch(tokenizer, 2, (6, 9), seed=2)}
    for label, batch in batches.items():
        loss = PolicyLoss("dapo", LossParams(0.2, 0.28, 0.0, 1, float(batch.num_response_tokens)))
        times: dict[str, list[float]] = {name: [] for name in learners}
        for _ in range(args.updates + 1):  # the first of each is the warm-up (or the compile)
            for name, learner in learners.items():
                start = time.perf_counter()
                learner.update(batch, loss, 2, 1, 1.0)
                times[name].append(time.perf_counter() - start)
        rows, length = batch.input_ids_RL.shape
        seq_len = batch.num_tokens // batch.num_sequences
        full = transformer_flops_per_token(shape.num_params, shape.num_layers, shape.hidden_size,
                                           seq_len)
        print(f"\n{label}: {batch.num_sequences} sequences, {batch.num_tokens} tokens in {rows} "
              f"rows of {length}; median of {args.updates} updates after the first")
        medians = {}
        for name, spent in times.items():
            medians[name] = statistics.median(spent[1:])
            tokens_per_second = batch.num_tokens / medians[name]
            print(f"  {name:9s} first {spent[0]:6.2f} s   {medians[name]:5.2f} s/update   "
                  f"{tokens_per_second:4.0f} tokens/s   MFU {full * tokens_per_second / peak:.1%}"
                  f" (6N only {6 * shape.num_params * tokens_per_second / peak:.1%})   "
                  f"all: {' '.join(f'{t:.2f}' for t in spent)}")
        print(f"  compiled / eager: {medians['eager'] / medians['compiled']:.2f}x faster")


if __name__ == "__main__":
    main()
