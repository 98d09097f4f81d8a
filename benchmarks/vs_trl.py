"""GRPO throughput: rlvr against TRL's GRPOTrainer on the same work, as completion tokens per
second of training (generation, scoring and the update), and seconds per step.

Same model, same prompts (single-digit addition), same group size, response length limit and
reward (last number), one optimizer step per step, sampling at temperature 1, no KL term. Each
framework runs in its own process with one torch thread, one after the other, so neither slows
the other (NOTES: two busy processes with 2 threads each slow each other badly). The first step
of each is a warm-up and is not counted. rlvr runs as a user would run it: `rollout.engine=auto`
(vLLM where installed); TRL generates with transformers (its vLLM modes need CUDA). The two
sides' policies drift apart and may write answers of different lengths, so the ratio is of
completion tokens per second (each side's own generated tokens over its own wall time), not of
seconds per step; both are printed. Both processes keep freed host memory (glibc: no mmap, no
trim, `rlvr.device.keep_freed_host_memory`), which rlvr sets for its own process on CPU.

    python benchmarks/vs_trl.py                      # SmolLM2-135M, 8 prompts x 8, 64 tokens
    python benchmarks/vs_trl.py --model tiny-llama   # a quick check of the harness
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def run_rlvr(args: argparse.Namespace) -> list[float]:
    from rlvr.config import load_config
    from rlvr.run.build import build_run
    from rlvr.run.loop import one_training_step

    steps = args.steps + 1
    cfg = load_config(None, [
        f"model.name_or_path={args.model}", "model.num_threads=1",
        "rollout.vllm.cpu_threads_bind=0",  # vLLM, if it generates, on one core too
        f"experiment.output_dir={args.output_dir}/rlvr",
        f"experiment.total_episodes={steps * args.prompts * args.group}",
        f"rollout.num_unique_prompts_rollout={args.prompts}",
        f"rollout.num_samples_per_prompt_rollout={args.group}",
        f"rollout.response_length={args.response_length}", "rollout.temperature=1.0",
        "algorithm.beta=0.0", "algorithm.filter_zero_std_samples=false",
        "algorithm.pack_length=1024", f"optimizer.learning_rate={args.learning_rate}",
        "data.eval_holdout=0", "logging.progress_bar=false", "checkpoint.save_final=false",
    ])
    run = build_run(cfg)
    times, tokens = [], []
    try:
        for step in range(1, steps + 1):
            start = time.perf_counter()
            metrics = one_training_step(run, step)
            times.append(time.perf_counter() - start)
            tokens.append(metrics["val/sequence_lengths"] * args.prompts * args.group)
    finally:
        run.close()
    return {"seconds": times[1:], "tokens": tokens[1:]}


def _last_number_reward(completions, ground_truth, **_):
    from rlvr.rewards.gsm8k import verify_last_number

    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [verify_last_number(t, g) for t, g in zip(texts, ground_truth)]


def run_trl(args: argparse.Namespace) -> list[float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.data.tasks import PROCEDURAL_TASKS
    from rlvr.device import keep_freed_host_memory
    from rlvr.models import load_causal_lm, load_tokenizer, resolve_model_dir

    keep_freed_host_memory()  # the process-wide allocator setting rlvr's process has too
    steps = args.steps + 1
    examples = PROCEDURAL_TASKS["addition"]("train", 1)[: steps * args.prompts]
    dataset = Dataset.from_list([{"prompt": list(e.messages), "ground_truth": e.ground_truth}
                                 for e in examples])
    model_dir = resolve_model_dir(args.model)
    config = GRPOConfig(
        output_dir=f"{args.output_dir}/trl", use_cpu=True, bf16=False, report_to=[],
        per_device_train_batch_size=args.prompts * args.group, gradient_accumulation_steps=1,
        num_generations=args.group, max_completion_length=args.response_length,
        temperature=1.0, beta=0.0, num_iterations=1, learning_rate=args.learning_rate,
        max_steps=steps, logging_steps=1, save_strategy="no", seed=1, shuffle_dataset=False)
    stamps: list[float] = []
    lengths: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            stamps.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            stamps.append(time.perf_counter())

        def on_log(self, args_, state, control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                lengths.append(float(logs["completions/mean_length"]))

    trainer = GRPOTrainer(model=load_causal_lm(model_dir), reward_funcs=_last_number_reward,
                          args=config, train_dataset=dataset,
                          processing_class=load_tokenizer(model_dir), callbacks=[StepClock()])
    trainer.train()
    # TRL generates inside the step, so begin -> end covers generation, scoring and the update.
    seconds = [stamps[i + 1] - stamps[i] for i in range(0, len(stamps) - 1, 2)]
    if len(lengths) != len(seconds):
        raise SystemExit(f"TRL logged {len(lengths)} completion lengths for {len(seconds)} steps")
    return {"seconds": seconds[1:],
            "tokens": [n * args.prompts * args.group for n in lengths][1:]}


def _child(which: str, args: argparse.Namespace) -> dict[str, list[float]] | None:
    """Run one framework in a fresh single-threaded process; its step times and completion
    tokens per step, or None (after saying why) if it failed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error"}
    cmd = [sys.executable, __file__, "--child", which] + [
        f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k != "child" and v]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"{which} failed (exit {out.returncode}), so no ratio:\n{out.stderr[-3000:]}")
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--response-length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up")
    parser.add_argument("--learning-rate", type=float, default=1e-6)
    parser.add_argument("--output-dir", default="runs/bench_vs_trl")
    parser.add_argument("--child", choices=["rlvr", "trl"])
    args = parser.parse_args()
    if args.child:
        import torch

        torch.set_num_threads(1)
        times = run_rlvr(args) if args.child == "rlvr" else run_trl(args)
        print(json.dumps(times))
        return
    print(f"model={args.model} prompts={args.prompts} group={args.group} "
          f"response_length={args.response_length} timed_steps={args.steps}, 1 thread each")
    results = {which: _child(which, args) for which in ("rlvr", "trl")}
    rates = {}
    for which, got in results.items():
        if got is None:
            continue
        seconds, tokens = got["seconds"], got["tokens"]
        rates[which] = sum(tokens) / sum(seconds)
        print(f"{which:5s} {sum(seconds) / len(seconds):7.2f} s/step ("
              f"{', '.join(f'{t:.1f}' for t in seconds)}), {sum(tokens) / len(tokens):.0f} "
              f"completion tokens/step, {rates[which]:.1f} tokens/s")
    if len(rates) == 2:
        print(f"ratio TRL / rlvr: {rates['rlvr'] / rates['trl']:.2f}x  (completion tokens per "
              "second, rlvr's over TRL's)")


if __name__ == "__main__":
    main()
