"""Seconds per learner update: one learner against two (FSDP2 over gloo, Ray actors).

The batch has the tiny config's shape (`configs/tiny.yaml`: prompts x samples, response length,
pack length, micro-batches, KL term so a reference model runs too): real chat-templated prompts
from the model's tokenizer, random responses of random length. Only the update is timed (split,
ship to the actors, forward/backward/AdamW, results back); generation and rewards are not.
The first update of each layout is a warm-up and is not counted.

Layouts, on this 2-core machine: one learner in this process (1 thread), one Ray actor with
1 and with 2 threads, and two Ray actors with 1 thread each (the cores split between ranks).
It first measures how much two busy processes get done at once compared with one: two learners
can at best be that much faster than one.

    python benchmarks/learners.py                                  # the tiny config's batch
    python benchmarks/learners.py --model smollm2-135m-instruct --prompts 8 --samples 8 \
        --response-length 64                                       # a model worth sharding
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import time

import torch


def _spin(_: int = 0) -> float:
    start = time.perf_counter()
    total = 0
    for i in range(5_000_000):
        total += i
    return time.perf_counter() - start


def parallel_capacity() -> float:
    """Work two CPU-bound processes finish at once, relative to one alone (2.0: two full
    cores; about 1.0 when the cores share one core's worth of time)."""
    alone = min(_spin() for _ in range(2))
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(_spin, range(2))  # start-up, not timed
        together = max(pool.map(_spin, range(2)))
    return 2 * alone / together


def build_batch(args: argparse.Namespace, cfg, tokenizer):
    from rlvr.algorithm.packing import SequenceToPack, pack_sequences

    rng = random.Random(args.seed)
    seqs = []
    for p in range(args.prompts):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": f"What is {a} + {b}? Answer with the number only."}],
            add_generation_prompt=True, tokenize=False)
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        for k in range(args.samples):
            n = rng.randint(max(1, args.response_length // 4), args.response_length)
            seqs.append(SequenceToPack(prompt, [rng.randrange(3, len(tokenizer)) for _ in range(n)],
                                       [-rng.random() - 1.0 for _ in range(n)],
                                       advantage=rng.choice([-1.0, 1.0]), index=len(seqs)))
    a = cfg.algorithm
    return pack_sequences(seqs, pack_length=max(a.pack_length, 2 * args.response_length),
                          pad_id=tokenizer.pad_token_id, strategy=a.packing)


def time_layout(name: str, group, batch, cfg, steps: int) -> list[float]:
    from rlvr.algorithm.losses import LossParams

    a = cfg.algorithm
    params = LossParams(clip_lower=a.clip_lower, clip_higher=a.clip_higher, beta=a.beta,
                        kl_estimator=a.kl_estimator, denominator=float(batch.num_response_tokens))
    times = []
    try:
        for _ in range(steps + 1):
            start = time.perf_counter()
            group.update(batch, a.loss_fn, params, cfg.gradient_accumulation_steps,
                         a.num_epochs, cfg.rollout.temperature)
            times.append(time.perf_counter() - start)
    finally:
        group.close()
    timed = times[1:]
    print(f"{name:<34} {statistics.median(timed):8.3f} s/update (median of {steps}; "
          f"min {min(timed):.3f}, warm-up {times[0]:.3f})", flush=True)
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/tiny.yaml")
    parser.add_argument("--model", default=None, help="override model.name_or_path")
    parser.add_argument("--prompts", type=int, default=None, help="default: the config's")
    parser.add_argument("--samples", type=int, default=None, help="default: the config's")
    parser.add_argument("--response-length", type=int, default=None)
    parser.add_argument("--sharding", default="fsdp", choices=["ddp", "fsdp"])
    parser.add_argument("--steps", type=int, default=10, help="timed updates per layout")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from rlvr.config import load_config
    from rlvr.distributed.learner_group import LearnerGroup
    from rlvr.distributed.learner_worker import LearnerSpec
    from rlvr.learner import LearnerSettings
    from rlvr.models import load_tokenizer, resolve_model_dir

    overrides = [f"model.name_or_path={args.model}"] if args.model else []
    cfg = load_config(args.config, overrides)
    r = cfg.rollout
    args.prompts = args.prompts or r.num_unique_prompts_rollout
    args.samples = args.samples or r.num_samples_per_prompt_rollout
    args.response_length = args.response_length or r.response_length
    model_dir = resolve_model_dir(cfg.model.name_or_path)
    batch = build_batch(args, cfg, load_tokenizer(model_dir))
    print(f"{cfg.model.name_or_path}: {args.prompts} prompts x {args.samples} samples, "
          f"{batch.num_rows} rows x {batch.input_ids_RL.shape[1]} tokens, "
          f"{batch.num_tokens} tokens ({batch.num_response_tokens} response), "
          f"{cfg.gradient_accumulation_steps} micro-batches, reference model: "
          f"{cfg.algorithm.beta > 0}", flush=True)

    opt = cfg.optimizer

    def spec(threads: int) -> LearnerSpec:
        # Constant rate, no warm-up: the timed updates are all real updates.
        settings = LearnerSettings(learning_rate=opt.learning_rate, lr_scheduler_type="constant",
                                   warm_up_steps=0, total_optimizer_steps=args.steps + 1,
                                   max_grad_norm=opt.max_grad_norm,
                                   bf16_autocast=bool(cfg.model.bf16_autocast))
        return LearnerSpec(model_dir=model_dir, settings=settings, dtype=cfg.model.dtype,
                           sharding=args.sharding, with_reference=cfg.algorithm.beta > 0,
                           num_threads=threads, timeout_s=300)

    print(f"two busy processes do {parallel_capacity():.2f}x the work of one "
          f"({os.cpu_count()} CPUs)", flush=True)
    torch.set_num_threads(1)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    time_layout("1 learner, in process, 1 thread", LearnerGroup(spec(1)), batch, cfg, args.steps)
    time_layout("1 learner, Ray actor, 1 thread", LearnerGroup(spec(1), 1, backend="ray"),
                batch, cfg, args.steps)
    time_layout("1 learner, Ray actor, 2 threads",
                LearnerGroup(spec(2), 1, backend="ray", cpus_per_learner=2), batch, cfg,
                args.steps)
    time_layout(f"2 learners ({args.sharding}), 1 thread each",
                LearnerGroup(spec(1), 2, backend="ray"), batch, cfg, args.steps)


if __name__ == "__main__":
    main()
