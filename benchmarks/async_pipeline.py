"""Seconds per training step, synchronous vs asynchronous generation, on the quick-start config;
and, with --curve, held-out reward against wall time for full runs.

    python benchmarks/async_pipeline.py [--steps 6] [--engine transformers|vllm]
    python benchmarks/async_pipeline.py --curve     # full quick-start runs, ~25 min here

Each variant is a separate `rlvr train configs/quickstart.yaml ...` process (fresh output dir,
no eval in the s/step runs). Seconds per step is wall time from the end of step 1 to the end of
the last step divided by the steps in between (`time/elapsed` in metrics.jsonl), so model
loading, engine start-up and the first step's warm-up are left out. Prints both figures and the
ratio. --curve runs the synchronous transformers engine and vLLM with async_steps=1, evaluating
every 5 steps, and prints eval/scores with the wall time at which each was measured.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

RLVR = str(Path(sys.executable).with_name("rlvr"))


def train(name: str, overrides: list[str], out: Path) -> list[dict]:
    cmd = [RLVR, "train", "configs/quickstart.yaml", f"experiment.output_dir={out}",
           "logging.progress_bar=false", "checkpoint.save_freq=0", "checkpoint.save_final=false",
           *overrides]
    print(f"[{name}] {' '.join(cmd[1:])}", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def seconds_per_step(rows: list[dict]) -> float:
    steps = [r for r in rows if r["training_step"] >= 1]
    return (steps[-1]["time/elapsed"] - steps[0]["time/elapsed"]) / (len(steps) - 1)


def step_time(args, tmp: Path) -> None:
    episodes = 64 * (args.steps + 1)  # the quick-start batch is 8 prompts x 8 samples
    common = [f"experiment.total_episodes={episodes}", "eval.local_eval_every=0",
              "eval.eval_at_start=false", f"rollout.engine={args.engine}"]
    sync = train("sync", common + ["rollout.async_steps=0"], tmp / "sync")
    asyn = train("async", common + [f"rollout.async_steps={args.async_steps}"], tmp / "async")
    s, a = seconds_per_step(sync), seconds_per_step(asyn)
    dropped = sum(r.get("async/stale_results_dropped", 0.0) for r in asyn)
    off = [r["async/num_steps_off_policy"] for r in asyn if "async/num_steps_off_policy" in r]
    print(f"quick-start, {args.engine} engine, {args.steps + 1} steps (s/step over steps 2..)")
    print(f"  sync               {s:7.2f} s/step")
    print(f"  async_steps={args.async_steps}      {a:7.2f} s/step   ({s / a:.2f}x faster; "
          f"{dropped:.0f} stale groups dropped, steps off policy max {max(off, default=0):.0f})")


def curve(args, tmp: Path) -> None:
    runs = {
        "transformers sync": ["rollout.engine=transformers", "rollout.async_steps=0"],
        "vllm async_steps=1": ["rollout.engine=vllm", "rollout.async_steps=1"],
    }
    for name, overrides in runs.items():
        rows = train(name, overrides, tmp / name.replace(" ", "_"))
        points = [f"{r['time/elapsed']:6.0f}s:{r['eval/scores']:.3f}"
                  for r in rows if "eval/scores" in r]
        print(f"{name:20s} eval/scores at wall time: {'  '.join(points)}")
        print(f"{'':20s} total {rows[-1]['time/elapsed']:.0f} s, "
              f"{seconds_per_step(rows):.1f} s/step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="timed steps (after a warm-up step)")
    parser.add_argument("--engine", default="transformers")
    parser.add_argument("--async-steps", type=int, default=1)
    parser.add_argument("--curve", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (curve if args.curve else step_time)(args, Path(tmp))


if __name__ == "__main__":
    main()
