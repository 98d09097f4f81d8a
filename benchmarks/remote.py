"""The quick start generating in process vs on inference servers: seconds per step and
held-out accuracy, for in-process vLLM, one server and two servers, weights by disk and by
broadcast. One invocation runs every variant in turn (never side by side), same seed.

    python benchmarks/remote.py [--steps 20] [--seed 1] [--variants in_process disk_1 ...]
    python benchmarks/remote.py --variants in_process split_cores_async in_process_async

The last form is the overlap experiment: a server bound to one core generating step t+1 while
the learner trains step t on the other (`rollout.async_steps=1`), against synchronous
in-process generation and the same overlap inside one process.

Each variant is a separate `rlvr train configs/quickstart.yaml rollout.engine=...` process.
The local launcher starts the servers for the remote variants and stops them after; their
start-up (about a minute for vLLM here) is outside the step timings. s/step is wall time from
the end of step 1 to the end of the last step over the steps in between (`time/elapsed`), so
loading and warm-up are left out; also printed: mean `time/generation` and
`time/weight_sync` per step, and the held-out greedy accuracy (`eval/scores`) at the start and
the end (eval every 5 steps: its time is inside s/step, the same for every variant).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from rlvr.device import cpu_name

RLVR = str(Path(sys.executable).with_name("rlvr"))

VARIANTS = {
    "in_process": ["rollout.engine=vllm"],
    "disk_1": ["rollout.engine=remote", "rollout.num_servers=1", "rollout.weight_update=disk"],
    "disk_2": ["rollout.engine=remote", "rollout.num_servers=2", "rollout.weight_update=disk"],
    "broadcast_1": ["rollout.engine=remote", "rollout.num_servers=1",
                    "rollout.weight_update=broadcast"],
    "broadcast_2": ["rollout.engine=remote", "rollout.num_servers=2",
                    "rollout.weight_update=broadcast"],
    # Overlap on 2 cores (issue 19): one server bound to core 1, the learner on one thread,
    # generation of step t+1 while step t trains; against the same overlap in one process.
    "split_cores_async": ["rollout.engine=remote", "rollout.num_servers=1",
                          "rollout.vllm.cpu_threads_bind=1", "model.num_threads=1",
                          "rollout.async_steps=1"],
    "in_process_async": ["rollout.engine=vllm", "rollout.async_steps=1"],
}
DEFAULT = ["in_process", "disk_1", "disk_2", "broadcast_1", "broadcast_2"]


def train(name: str, overrides: list[str], out: Path) -> list[dict] | None:
    cmd = [RLVR, "train", "configs/quickstart.yaml", f"experiment.output_dir={out}",
           "logging.progress_bar=false", "checkpoint.save_freq=0", "checkpoint.save_final=false",
           *overrides]
    print(f"[{name}] {' '.join(cmd[1:])}", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"  {name} FAILED ({done.returncode}): {done.stderr[-1500:]}", flush=True)
        return None
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def summary(rows: list[dict]) -> dict[str, float]:
    steps = [r for r in rows if r["training_step"] >= 1]
    evals = [r["eval/scores"] for r in rows if "eval/scores" in r]
    mean = lambda key: sum(r.get(key, 0.0) for r in steps[1:]) / max(len(steps) - 1, 1)
    return {"s_per_step": (steps[-1]["time/elapsed"] - steps[0]["time/elapsed"])
            / (len(steps) - 1),
            "generation": mean("time/generation"), "sync": mean("time/weight_sync"),
            "eval_first": evals[0] if evals else float("nan"),
            "eval_last": evals[-1] if evals else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--variants", nargs="+", default=DEFAULT, choices=list(VARIANTS))
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.variants:
            rows = train(name, [*VARIANTS[name], f"experiment.total_episodes={64 * args.steps}",
                                f"experiment.seed={args.seed}"], Path(tmp) / name)
            if rows is not None:
                results[name] = summary(rows)
    print(f"\nquick start, {args.steps} steps, seed {args.seed}, on {cpu_name()}")
    print(f"{'variant':12s} {'s/step':>7s} {'gen s':>6s} {'sync s':>6s} {'eval start':>10s} "
          f"{'eval end':>9s}")
    for name in args.variants:
        if name not in results:
            print(f"{name:12s} failed: no figures")
            continue
        r = results[name]
        print(f"{name:12s} {r['s_per_step']:7.2f} {r['generation']:6.2f} {r['sync']:6.2f} "
              f"{r['eval_first']:10.2f} {r['eval_last']:9.2f}")


if __name__ == "__main__":
    main()
