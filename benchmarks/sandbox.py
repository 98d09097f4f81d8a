"""The code sandbox's cost: per-sample scoring time of the `code` verifier, this checkout against
another source tree (the code before the two-process sandbox, by default).

    python benchmarks/sandbox.py [--n 60] [--workers 2] [--task code_simple|humaneval]
                                 [--base /tmp/rlvr-base/src] [--rounds 3]

Workload: rows of the task (`code_simple`: the training task of the code path; `humaneval`:
164 problems with heavier tests), each answered three ways in turn: the reference solution
(passes), a wrong function (fails every test), a function that raises. Every answer starts a
sandbox; prose and broken fences, which start none, are left out.
Each tree is measured in a fresh interpreter with PYTHONPATH at its `src`, alternately, and the
best of `--rounds` is kept (a busy machine only slows a round down):
- latency: `verify_code` on one sample at a time in that process, as one scorer worker pays
  it: median and 90th percentile, in ms;
- throughput: the same samples through `RewardScorer(num_workers=--workers)`, as a training
  step's scoring pays it (worker start-up excluded): samples/s.
The sandbox changes only scoring: a step of B samples spends about B / throughput seconds in it,
so the throughput ratio is the step-time ratio of scoring. Timings taken while other work runs
on the machine are not comparable (say "not timed alone").
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "src"


def workload(task: str, n: int) -> list[tuple[str, str]]:
    """(completion, ground truth) pairs: reference, wrong, raising answers in turn. Built here,
    with this checkout, so both trees score the very same samples."""
    if task == "code_simple":
        from rlvr.data.code_tasks import code_simple_tasks, load_code_simple

        rows = load_code_simple("test", 0)
        solutions = [t.solution for t in code_simple_tasks("test", 0)]
    else:
        from rlvr.data.code_tasks import _humaneval_file, load_humaneval

        rows = load_humaneval("test", 0)
        with gzip.open(_humaneval_file(), "rt") as f:
            solutions = [(p := json.loads(line))["prompt"] + p["canonical_solution"]
                         for line in f if line.strip()]
    pairs = []
    for i in range(n):
        row, solution = rows[i % len(rows)], solutions[i % len(rows)]
        entry = json.loads(row.ground_truth)["entry_point"]
        answer = [solution, f"def {entry}(*args, **kwargs):\n    return None\n",
                  f"def {entry}(*args, **kwargs):\n    raise ValueError('no')\n"][i % 3]
        pairs.append((f"```python\n{answer}\n```", row.ground_truth))
    return pairs


def measure(pairs: list[tuple[str, str]], workers: int) -> dict:
    """In this process, with whatever `rlvr` is importable: the figures of the docstring."""
    from rlvr.rewards.code import verify_code
    from rlvr.rewards.scorer import RewardScorer, ScoreRequest

    verify_code(*pairs[0])  # warm-up: the namespace probe, imports
    latencies, scores = [], []
    for completion, truth in pairs:
        start = time.perf_counter()
        scores.append(verify_code(completion, truth))
        latencies.append(time.perf_counter() - start)
    name = "rlvr.rewards.code:verify_code"
    requests = [ScoreRequest(f"s{i}", c, t, (name,)) for i, (c, t) in enumerate(pairs)]
    with RewardScorer(num_workers=workers, timeout_s=30.0) as scorer:
        scorer.score(requests[:workers])  # wait for the workers (start-up is not scoring)
        start = time.perf_counter()
        outcomes = scorer.score(requests)
        elapsed = time.perf_counter() - start
    latencies.sort()
    return {"median_ms": 1000 * statistics.median(latencies),
            "p90_ms": 1000 * latencies[int(0.9 * (len(latencies) - 1))],
            "samples_per_s": len(requests) / elapsed, "mean_score": sum(scores) / len(scores),
            "errors": sum(o.error is not None for o in outcomes)}


def run_tree(src: str, pairs_file: str, workers: int) -> dict:
    done = subprocess.run([sys.executable, __file__, "--measure", pairs_file,
                           "--workers", str(workers)],
                          env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"measuring {src} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=["code_simple", "humaneval"], default="code_simple")
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", default="/tmp/rlvr-base/src")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # a pairs file: measure it here
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(json.loads(Path(args.measure).read_text()), args.workers)))
        return
    best: dict[str, dict] = {}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as pairs_file:
        json.dump(workload(args.task, args.n), pairs_file)
        pairs_file.flush()
        for _ in range(args.rounds):
            for label, src in (("old", args.base), ("new", str(HERE))):
                figures = run_tree(src, pairs_file.name, args.workers)
                keep = best.get(label)
                if keep is None or figures["samples_per_s"] > keep["samples_per_s"]:
                    best[label] = figures
    print(f"code verifier on {args.task}, {args.n} samples (reference / wrong / raising), "
          f"best of {args.rounds}, {os.cpu_count()} cores")
    print(f"{'tree':5s} {'median ms':>10s} {'p90 ms':>8s} {'samples/s':>10s} {'mean score':>11s}"
          f" {'errors':>7s}")
    for label in ("old", "new"):
        f = best[label]
        print(f"{label:5s} {f['median_ms']:10.1f} {f['p90_ms']:8.1f} {f['samples_per_s']:10.1f} "
              f"{f['mean_score']:11.3f} {f['errors']:7d}")
    print(f"new/old: latency {best['new']['median_ms'] / best['old']['median_ms']:.2f}x, "
          f"scoring time per step {best['old']['samples_per_s'] / best['new']['samples_per_s']:.2f}x")


if __name__ == "__main__":
    main()
