"""Seconds per training step, synchronous vs asynchronous generation, on the quick-start config;
and, with --curve, held-out reward against wall time for full runs.

    python benchmarks/async_pipeline.py [--steps 6] [--engine transformers|vllm] [--actors]
    python benchmarks/async_pipeline.py --curve [--seeds 1 2] [--level 0.9] [--runs NAME ...]
    python benchmarks/async_pipeline.py --smoke --steps 1   # seconds, configs/tiny.yaml

Each variant is a separate `rlvr train configs/quickstart.yaml ...` process (fresh output dir,
no eval in the s/step runs). Seconds per step is wall time from the end of step 1 to the end of
the last step divided by the steps in between (`time/elapsed` in metrics.jsonl), so model
loading, engine start-up and the first step's warm-up are left out. Prints both figures and the
ratio. --actors runs the engine as a Ray actor and the learner as another (each in its own
process; weights broadcast from the learner). --curve runs full quick-start runs (eval every 5
steps) with the transformers engine synchronously, vLLM synchronously, vLLM with
async_steps=1, vLLM synchronously with fp32 weights, with one micro-batch, with compiled
decoder layers, with eager attention (compiled or not) and with glibc's default allocator
(`--runs` picks), per seed, prints eval/scores with the wall time at which each was measured,
the peak RSS, and when each first reached --level. Every run gets an empty cache of compiled
kernels (TORCHINDUCTOR_CACHE_DIR), so compiling costs what it costs a first run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RLVR = str(Path(sys.executable).with_name("rlvr"))


def train(name: str, overrides: list[str], out: Path,
          config: str = "configs/quickstart.yaml") -> list[dict]:
    cmd = [RLVR, "train", config, f"experiment.output_dir={out}",
           "logging.progress_bar=false", "checkpoint.save_freq=0", "checkpoint.save_final=false",
           *overrides]
    print(f"[{name}] {' '.join(cmd[1:])}", flush=True)
    # A cache of compiled kernels of its own, empty: every run compiles as a user's first does.
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor_cache")}
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def seconds_per_step(rows: list[dict]) -> float:
    steps = [r for r in rows if r["training_step"] >= 1]
    return (steps[-1]["time/elapsed"] - steps[0]["time/elapsed"]) / (len(steps) - 1)


def layout(args) -> list[str]:
    return ["distributed.launcher=ray", "rollout.num_engines=1"] if args.actors else []


def step_time(args, tmp: Path) -> None:
    # The quick-start batch is 8 prompts x 8 samples; --smoke's tiny one 4 x 4.
    episodes = (16 if args.smoke else 64) * (args.steps + 1)
    config = "configs/tiny.yaml" if args.smoke else "configs/quickstart.yaml"
    common = [f"experiment.total_episodes={episodes}", "eval.local_eval_every=0",
              "eval.eval_at_start=false", f"rollout.engine={args.engine}", *layout(args)]
    sync = train("sync", common + ["rollout.async_steps=0"], tmp / "sync", config)
    asyn = train("async", common + [f"rollout.async_steps={args.async_steps}"], tmp / "async",
                 config)
    s, a = seconds_per_step(sync), seconds_per_step(asyn)
    dropped = sum(r.get("async/stale_results_dropped", 0.0) for r in asyn)
    off = [r["async/num_steps_off_policy"] for r in asyn if "async/num_steps_off_policy" in r]
    where = "engine and learner actors" if args.actors else "one process"
    print(f"quick-start, {args.engine} engine, {where}, {args.steps + 1} steps "
          "(s/step over steps 2..)")
    print(f"  sync               {s:7.2f} s/step")
    print(f"  async_steps={args.async_steps}      {a:7.2f} s/step   ({s / a:.2f}x faster; "
          f"{dropped:.0f} stale groups dropped, steps off policy max {max(off, default=0):.0f})")


CURVE_RUNS = {
    "transformers sync": ["rollout.engine=transformers", "rollout.async_steps=0"],
    "vllm sync": ["rollout.engine=vllm", "rollout.async_steps=0"],
    "vllm async_steps=1": ["rollout.engine=vllm", "rollout.async_steps=1"],
    # the engine's weights in fp32 (rollout.dtype=auto is bf16 where the CPU has it natively)
    "vllm sync, fp32 engine": ["rollout.engine=vllm", "rollout.async_steps=0",
                               "rollout.dtype=float32"],
    # the whole batch in one forward and backward (the quick start splits it in two)
    "vllm sync, one micro-batch": ["rollout.engine=vllm", "rollout.async_steps=0",
                                   "algorithm.gradient_accumulation_steps=1"],
    # each decoder layer compiled (model.compile; the compile counts in the wall time)
    "vllm sync, compiled": ["rollout.engine=vllm", "rollout.async_steps=0", "model.compile=true"],
    # transformers' eager attention (explicit matmuls and softmax, an additive mask), then also
    # compiled: inductor fuses its masking and softmax
    "vllm sync, eager attention": ["rollout.engine=vllm", "rollout.async_steps=0",
                                   "model.attn_implementation=eager"],
    "vllm sync, compiled, eager attention": ["rollout.engine=vllm", "rollout.async_steps=0",
                                             "model.compile=true",
                                             "model.attn_implementation=eager"],
    # glibc's default allocator behaviour (freed large blocks unmapped; rlvr.device)
    "vllm sync, malloc trims": ["rollout.engine=vllm", "rollout.async_steps=0",
                                "model.keep_freed_host_memory=false"],
}


def first_time_at(rows: list[dict], level: float) -> float | None:
    """Wall time of the first eval at or above `level` (None if never)."""
    return next((r["time/elapsed"] for r in rows if r.get("eval/scores", -1) >= level), None)


def curve(args, tmp: Path) -> None:
    runs = {name: CURVE_RUNS[name] for name in args.runs}
    reached: dict[str, list[float | None]] = {name: [] for name in runs}
    for seed in args.seeds:
        for name, overrides in runs.items():
            rows = train(f"{name} seed {seed}", [*overrides, f"experiment.seed={seed}",
                                                 *layout(args)],
                         tmp / f"{name.replace(' ', '_')}_{seed}")
            points = [f"{r['time/elapsed']:4.0f}s:{r['eval/scores']:.2f}"
                      for r in rows if "eval/scores" in r]
            print(f"{name:20s} seed {seed}  eval/scores at wall time: {'  '.join(points)}")
            peak_rss = max(r.get("memory/peak_rss_gb", 0.0) for r in rows)
            print(f"{'':28s} total {rows[-1]['time/elapsed']:.0f} s, "
                  f"{seconds_per_step(rows):.1f} s/step, peak RSS {peak_rss:.1f} GB", flush=True)
            reached[name].append(first_time_at(rows, args.level))
    print(f"first eval >= {args.level} (wall seconds; seeds {args.seeds}):")
    for name, times in reached.items():
        shown = ", ".join("never" if t is None else f"{t:.0f}" for t in times)
        done = [t for t in times if t is not None]
        mean = f"mean {sum(done) / len(done):.0f} s" if len(done) == len(times) else ""
        print(f"  {name:20s} {shown}   {mean}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="timed steps (after a warm-up step)")
    parser.add_argument("--engine", default="transformers")
    parser.add_argument("--async-steps", type=int, default=1)
    parser.add_argument("--actors", action="store_true",
                        help="engine and learner as Ray actors (distributed.launcher=ray)")
    parser.add_argument("--curve", action="store_true")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="--curve: seeds")
    parser.add_argument("--runs", nargs="+", default=list(CURVE_RUNS), choices=list(CURVE_RUNS),
                        metavar="NAME", help=f"--curve: which of {list(CURVE_RUNS)}")
    parser.add_argument("--level", type=float, default=0.9,
                        help="--curve: report when eval/scores first reaches this")
    parser.add_argument("--smoke", action="store_true",
                        help="the tiny model's config, not the quick start's: the path, not a "
                             "figure (tests/benchmarks)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (curve if args.curve else step_time)(args, Path(tmp))


if __name__ == "__main__":
    main()
