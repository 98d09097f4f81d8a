"""This machine's matmul peak, and where a quick-start step's time goes against it.

    python benchmarks/peak.py [--steps 3] [--config configs/quickstart.yaml] [key=value ...]

1. The peak: square matmuls (1024 to 4096) in fp32 and bf16, on 1 and 2 threads, best rate.
2. One quick-start step profiled: `rlvr.run.build.build_run` on the config, steps 1..N-1 as warm-up,
   step N under torch.profiler, reported as generation, scoring, batching (advantages,
   filtering, packing), the learner's forward, loss, backward and optimizer (its
   `record_function` spans), weight sync, and the rest.
3. The learner's MFU on that step: 6N + 12LHS FLOPs per token (rlvr.metrics.throughput) at
   the measured tokens per second of the update, against the peak of the dtype the learner
   computes in (bf16 where the CPU has it natively, else fp32), both measured in this run.
"""

from __future__ import annotations

import argparse
import time

import torch

from rlvr.device import cpu_name


def peak_table() -> dict[tuple[str, int], float]:
    from rlvr.metrics.throughput import measure_matmul_flops

    previous = torch.get_num_threads()
    table = {}
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
                table[(name, threads)] = max(measure_matmul_flops(dtype, size, seconds=1.0)
                                             for size in (1024, 2048, 4096))
    finally:
        torch.set_num_threads(previous)
    return table


SPANS = ("learner.reference", "learner.forward", "learner.loss", "learner.backward",
         "learner.optimizer")


def profile_step(config: str, steps: int, overrides: list[str]
                 ) -> tuple[dict[str, float], dict[str, float], object]:
    from torch.profiler import ProfilerActivity, profile

    from rlvr.run.build import build_run
    from rlvr.config import load_config
    from rlvr.run.loop import one_training_step

    cfg = load_config(config, ["experiment.output_dir=runs/bench_peak",
                               f"experiment.total_episodes={64 * steps}",
                               "eval.local_eval_every=0", "eval.eval_at_start=false",
                               "checkpoint.save_final=false", "logging.progress_bar=false",
                               "algorithm.filter_zero_std_samples=false", *overrides])
    run = build_run(cfg)
    try:
        for step in range(1, steps):
            one_training_step(run, step)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            metrics = one_training_step(run, steps)
            wall = time.perf_counter() - start
    finally:
        run.close()
    spans = {s: 0.0 for s in SPANS}
    for event in prof.key_averages():
        if event.key in spans:
            spans[event.key] = event.cpu_time_total / 1e6
    metrics["wall"] = wall
    return metrics, spans, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/quickstart.yaml")
    parser.add_argument("--steps", type=int, default=3, help="the last one is profiled")
    parser.add_argument("overrides", nargs="*", help="config overrides (key.sub=value)")
    args = parser.parse_args()
    print(f"{cpu_name()}, {torch.get_num_threads()} torch threads, "
          f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    table = peak_table()
    for (name, threads), flops in sorted(table.items()):
        print(f"  matmul peak {name:8s} {threads} thread{'s' if threads > 1 else ' '}: "
              f"{flops / 1e9:7.1f} GFLOP/s")
    metrics, spans, run = profile_step(args.config, args.steps, args.overrides)
    learner = sum(spans.values())
    gen = metrics.get("time/generation", 0.0) - metrics.get("time/scoring", 0.0)
    rows = [("generation", gen), ("scoring", metrics.get("time/scoring", 0.0)),
            ("batching", metrics.get("time/batching", 0.0))]
    rows += [(s.split(".")[1], spans[s]) for s in SPANS]
    rows += [("learner other", metrics.get("time/training", 0.0) - learner),
             ("weight sync", metrics.get("time/weight_sync", 0.0))]
    rows.append(("rest", metrics["wall"] - sum(v for _, v in rows)))
    print(f"step {args.steps} of {args.config} (profiled), {metrics['wall']:.2f} s:")
    for name, seconds in rows:
        print(f"  {name:14s} {seconds:7.2f} s  {100 * seconds / metrics['wall']:5.1f}%")
    bf16 = run.devices is not None and run.devices.bf16
    dtype = "bfloat16" if bf16 or run.cfg.model.dtype == "bfloat16" else "float32"
    peak = table[(dtype, min(torch.get_num_threads(), 2))]
    tokens_per_s = metrics.get("learner_tokens_per_second_step", 0.0)
    logged_mfu = metrics.get("learner_mfu", 0.0)
    # learner_mfu was computed against the run's own (short) probe; rescale to this peak.
    mfu = logged_mfu * run.peak_flops / peak if run.peak_flops else float("nan")
    print(f"learner: {tokens_per_s:.0f} tokens/s, compute {dtype}; MFU against the measured "
          f"{dtype} peak ({peak / 1e9:.0f} GFLOP/s): {100 * mfu:.1f}%")


if __name__ == "__main__":
    main()
