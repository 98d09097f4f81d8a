"""Minutes until the model is better: rlvr against TRL's GRPOTrainer, wall seconds of training
until the held-out greedy accuracy first reaches a level (0.9 by default).

    python benchmarks/time_to_accuracy.py [--seeds 1 2 3] [--level 0.9] [--max-steps 20]
                                          [--save-every 2] [--frameworks rlvr trl]
    python benchmarks/time_to_accuracy.py --smoke   # seconds: the tiny model, rlvr, 2 steps

`--smoke` runs the whole path (training, checkpoints, the evaluator, the report) on
`configs/tiny.yaml` with its own engine, rlvr only, so the test suite can run it
(tests/benchmarks); its figures mean nothing.

The same work on both sides: SmolLM2-135M-Instruct, the quick start's task (single-digit
addition, scored by the last number in the answer), 8 prompts x 8 samples a step, 32 new tokens
at temperature 1, learning rate 2e-5 (2 warm-up steps, then constant), no KL term, DAPO's
clipping (0.2 / 0.28) and token-level loss, rewards normalised per group. Each framework runs
alone, in its own process with both cores, with its best settings for this machine:
- rlvr: `configs/quickstart.yaml` as shipped (vLLM in process for generation, its weights in
  bf16 where the CPU has bf16 natively, packed sequences, bf16 matmuls likewise);
- TRL 1.16: `use_cpu=True`, generation with transformers (TRL's vLLM modes need CUDA), bf16
  where native (else fp32), the whole batch in one pass (no accumulation), no gradient
  checkpointing, and the allocator setting rlvr's process has (glibc keeps freed memory,
  `rlvr.device.keep_freed_host_memory`; a setting of the process, not of the framework).
Every `--save-every` steps each side saves a checkpoint; the clock stops while it saves, so
the time is training time only (generation, scoring, updates, weight sync). After training, one
evaluator (rlvr's, vLLM, greedy, the quick start's 32 held-out prompts of that seed, which
neither side trains on) scores every checkpoint of both sides the same way, outside either
framework's timing. Printed: per seed, when each side first reached the level; the means; and
`ratio TRL / rlvr`. A side that fails prints why and no ratio is made from it; a side that
never reaches the level within --max-steps gives a bound (">"), never a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rlvr.device import cpu_name

TASK = dict(prompts=8, group=8, response_length=32, learning_rate=2e-5, warmup=2)


QUICKSTART = "configs/quickstart.yaml"
SMOKE_CONFIG = "configs/tiny.yaml"


def quickstart_overrides(seed: int, out: Path, max_steps: int, extra: list[str] = ()) -> list:
    per_step = TASK["prompts"] * TASK["group"]
    return [f"experiment.seed={seed}", f"experiment.output_dir={out}",
            f"experiment.total_episodes={per_step * max_steps}", "eval.local_eval_every=0",
            "eval.eval_at_start=false", "checkpoint.save_freq=0",
            "checkpoint.save_final=false", "logging.progress_bar=false", *extra]


# ---- children: one framework's training, or the evaluation --------------------------------

def train_rlvr(args) -> None:
    from rlvr.run.build import build_run
    from rlvr.checkpoint.models import save_model_checkpoint
    from rlvr.config import load_config
    from rlvr.run.loop import one_training_step

    out = Path(args.out)
    cfg = load_config(args.config, quickstart_overrides(args.seed, out, args.max_steps))
    run = build_run(cfg)
    clock, stamps = 0.0, []
    try:
        for step in range(1, args.max_steps + 1):
            start = time.perf_counter()
            one_training_step(run, step)
            clock += time.perf_counter() - start
            if step % args.save_every == 0:  # untimed
                path = save_model_checkpoint(run.learner.policy, run.tokenizer, out, step, -1)
                stamps.append({"step": step, "seconds": clock, "path": str(path)})
    finally:
        run.close()
    (out / "clock.json").write_text(json.dumps(stamps))


def train_trl(args) -> None:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.run.build import build_data
    from rlvr.config import load_config
    from rlvr.device import cpu_has_native_bf16, keep_freed_host_memory
    from rlvr.models import load_causal_lm, load_tokenizer, resolve_model_dir

    keep_freed_host_memory()  # the process-wide allocator setting rlvr's process has too
    out = Path(args.out)
    cfg = load_config(args.config, quickstart_overrides(args.seed, out, args.max_steps))
    _, tokenizer, data = build_data(cfg)  # the same held-out prompts are left out
    held_out = {p.id for s in data.eval_sets for p in s.prompts}
    train = [p for _, prompts, _ in data.train.sources for p in prompts if p.id not in held_out]
    dataset = Dataset.from_list([{"prompt": list(p.messages), "ground_truth": p.ground_truth}
                                 for p in train])
    bf16 = cpu_has_native_bf16()
    per_step = TASK["prompts"] * TASK["group"]
    config = GRPOConfig(
        output_dir=str(out / "trl"), use_cpu=True, bf16=bf16, report_to=[],
        per_device_train_batch_size=per_step, gradient_accumulation_steps=1,
        num_generations=TASK["group"], max_completion_length=TASK["response_length"],
        temperature=1.0, beta=0.0, num_iterations=1, learning_rate=TASK["learning_rate"],
        lr_scheduler_type="constant_with_warmup", warmup_steps=TASK["warmup"],
        loss_type="dapo", epsilon=0.2, epsilon_high=0.28, scale_rewards="group",
        max_steps=args.max_steps, logging_steps=1, save_strategy="no", seed=args.seed,
        dataloader_num_workers=0)
    model_dir = resolve_model_dir(cfg.model.name_or_path)
    stamps: list[dict] = []

    class Clock(TrainerCallback):
        def __init__(self):
            self.clock, self.started = 0.0, None

        def on_step_begin(self, *a, **k):
            self.started = time.perf_counter()

        def on_step_end(self, a_, state, control, model=None, **k):
            self.clock += time.perf_counter() - self.started
            if state.global_step % args.save_every == 0:  # untimed
                path = out / "checkpoints" / f"step_{state.global_step:04d}"
                model.save_pretrained(path)
                tokenizer.save_pretrained(path)
                stamps.append({"step": state.global_step, "seconds": self.clock,
                               "path": str(path)})

    torch.manual_seed(args.seed)
    trainer = GRPOTrainer(model=load_causal_lm(model_dir), reward_funcs=_last_number_reward,
                          args=config, train_dataset=dataset,
                          processing_class=load_tokenizer(model_dir), callbacks=[Clock()])
    trainer.train()
    (out / "clock.json").write_text(json.dumps(stamps))


def _last_number_reward(completions, ground_truth, **_):
    from rlvr.rewards.gsm8k import verify_last_number

    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [verify_last_number(t, g) for t, g in zip(texts, ground_truth)]


def evaluate(args) -> None:
    """Greedy accuracy of every checkpoint listed in the runs' clock files, one engine, the
    weights swapped in place between checkpoints; written next to each clock file."""
    from safetensors.torch import load_file

    from rlvr.run.build import build_data
    from rlvr.config import load_config
    from rlvr.producer.evaluation import Evaluator
    from rlvr.rewards.scorer import RewardScorer
    from rlvr.rollout import create_engine
    from rlvr.run.settings import engine_settings, eval_settings, scorer_settings

    engine_name = "transformers" if args.config == SMOKE_CONFIG else "vllm"
    cfg = load_config(args.config, quickstart_overrides(args.seed, Path(args.out), 1,
                                                        [f"rollout.engine={engine_name}"]))
    model_dir, tokenizer, data = build_data(cfg)
    evaluator = Evaluator(data.eval_sets, eval_settings(cfg))
    # fp32 weights whatever the CPU: one fixed evaluator for both sides and every session's runs
    engine = create_engine(engine_name, model_dir, engine_settings(cfg, "cpu", bf16=False),
                           (tokenizer.eos_token_id,), tokenizer.pad_token_id)
    scorer = RewardScorer.from_settings(scorer_settings(cfg, tokenizer))
    try:
        base = evaluator.run(engine, scorer).metrics["eval/scores"]
        for clock_file in args.clocks:
            stamps = json.loads(Path(clock_file).read_text())
            for i, stamp in enumerate(stamps, start=1):
                weights = {}
                for f in sorted(Path(stamp["path"]).glob("*.safetensors")):
                    weights.update(load_file(str(f)))
                engine.update_weights(weights.items(), version=i)
                stamp["accuracy"] = evaluator.run(engine, scorer).metrics["eval/scores"]
                if stamp["accuracy"] >= args.level:  # later ones are not needed
                    break
            Path(clock_file).with_name("accuracy.json").write_text(
                json.dumps({"base": base, "stamps": stamps}))
    finally:
        scorer.close()
        engine.close()


# ---- the driver -------------------------------------------------------------------------

def child(kind: str, args, extra: list[str]) -> tuple[bool, str]:
    cmd = [sys.executable, __file__, "--child", kind, "--seed", str(args.seed_now),
           "--max-steps", str(args.max_steps), "--save-every", str(args.save_every),
           "--level", str(args.level), "--out", str(args.out_now), "--config", args.config,
           *extra]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return done.returncode == 0, done.stderr[-2000:]


class Never(float):
    """Did not reach the level; the value is the training seconds it ran without reaching it
    (a lower bound on its time to the level)."""


def first_reached(out: Path, level: float) -> tuple[float, str]:
    result = json.loads((out / "accuracy.json").read_text())
    for stamp in result["stamps"]:
        if stamp.get("accuracy", -1) >= level:
            return stamp["seconds"], f"step {stamp['step']}"
    last = result["stamps"][-1] if result["stamps"] else {"step": 0, "seconds": 0.0}
    best = max((s.get("accuracy", 0.0) for s in result["stamps"]), default=0.0)
    return Never(last["seconds"]), \
        f"not within {last['step']} steps ({last['seconds']:.0f} s, best {best:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--level", type=float, default=0.9)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--frameworks", nargs="+", default=["rlvr", "trl"],
                        choices=["rlvr", "trl"])
    parser.add_argument("--output-dir", default="runs/time_to_accuracy")
    parser.add_argument("--child", choices=["rlvr", "trl", "eval"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="")
    parser.add_argument("--clocks", nargs="*", default=[])
    parser.add_argument("--config", default=QUICKSTART)
    parser.add_argument("--smoke", action="store_true",
                        help="the tiny model, rlvr only, 2 steps: the path, not a figure")
    args = parser.parse_args()
    if args.smoke:
        args.config, args.frameworks, args.seeds = SMOKE_CONFIG, ["rlvr"], args.seeds[:1]
        args.max_steps, args.save_every = 2, 1
    if args.child:
        {"rlvr": train_rlvr, "trl": train_trl, "eval": evaluate}[args.child](args)
        return
    print(f"time to held-out accuracy {args.level} on {cpu_name()} ({os.cpu_count()} cores), "
          f"up to {args.max_steps} steps, checkpoints every {args.save_every}", flush=True)
    reached: dict[str, list] = {f: [] for f in args.frameworks}
    for seed in args.seeds:
        args.seed_now = seed
        clocks, failed = [], set()
        for framework in args.frameworks:
            args.out_now = Path(args.output_dir) / f"{framework}_seed{seed}"
            ok, err = child(framework, args, [])
            if not ok:
                print(f"seed {seed} {framework}: FAILED: {err}", flush=True)
                failed.add(framework)
                continue
            clocks.append(str(args.out_now / "clock.json"))
        args.out_now = Path(args.output_dir)
        ok, err = child("eval", args, ["--clocks", *clocks]) if clocks else (True, "")
        if not ok:
            print(f"seed {seed} evaluation FAILED: {err}", flush=True)
            failed |= set(args.frameworks)
        for framework in args.frameworks:
            if framework in failed:
                reached[framework].append("failed")
                continue
            seconds, where = first_reached(Path(args.output_dir) / f"{framework}_seed{seed}",
                                           args.level)
            reached[framework].append(seconds)
            shown = where if isinstance(seconds, Never) else f"{seconds:.0f} s ({where})"
            print(f"seed {seed} {framework:4s}: {shown}", flush=True)
    report(reached, args)


def report(reached: dict[str, list], args) -> None:
    print(f"\nwall seconds of training until held-out accuracy >= {args.level}:")
    means, bounded = {}, set()
    for framework, values in reached.items():
        shown = ", ".join("failed" if v == "failed" else f">{v:.0f}" if isinstance(v, Never)
                          else f"{v:.0f}" for v in values)
        if "failed" not in values:
            means[framework] = sum(values) / len(values)
            if any(isinstance(v, Never) for v in values):
                bounded.add(framework)
        mean = (f"   mean {'>' if framework in bounded else ''}{means[framework]:.0f} s"
                if framework in means else "")
        print(f"  {framework:4s} seeds {args.seeds}: {shown}{mean}")
    if set(reached) != {"rlvr", "trl"}:
        return
    if "failed" in reached["rlvr"] + reached["trl"]:
        print("no ratio: a side failed (see above)")
    elif "rlvr" in bounded:
        print("no ratio: rlvr did not reach the level in every seed")
    elif "trl" in bounded:  # TRL's seconds without reaching it bound its time from below
        print(f"ratio TRL / rlvr: >{means['trl'] / means['rlvr']:.2f}x (TRL did not reach "
              f"{args.level} within {args.max_steps} steps in every seed; a lower bound)")
    else:
        print(f"ratio TRL / rlvr: {means['trl'] / means['rlvr']:.2f}x")


if __name__ == "__main__":
    main()
