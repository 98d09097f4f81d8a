"""Where the engine decodes: on the thread that waits for the step (what `EpisodeRunner` does)
or on a thread of its own (what it did before), on the quick-start engine and learner.

    python benchmarks/engine_thread.py [--rounds 3] [--config configs/quickstart.yaml]

Why it matters (`rlvr.rollout.client.CallerThreadExecutor`): libgomp gives each thread that
starts OpenMP work a team of workers that lives as long as the thread; with more workers than
cores it stops letting idle workers spin, and every small parallel op then waits for a worker
to wake. A second thread that decodes keeps a second team alive.

One process, the run's own engine and learner (`rlvr.run.build.build_run` on the config: vLLM in
process where installed, bf16 where native), the quick-start batch shape: the run's first 8
prompts x 8 samples x up to 32 tokens to generate; a learner update of a quick-start-shaped batch
(`benchmarks/learners.py`'s `build_batch`, as `compile.py` builds it). Each round runs both
settings in turn, generation then update twice each; "own thread" decodes on a thread created
for the round and ended after it, so its team dies with it and the next "caller" round starts
clean. Printed per setting: median generation tokens/s and update seconds, and, from
/proc, how busy the learner's OpenMP worker thread was during the updates (1.0: all the time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from rlvr.device import cpu_name


def thread_cpu_seconds() -> dict[int, float]:
    """CPU seconds (user + system) of each of this process's threads, by thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--config", default="configs/quickstart.yaml")
    args = parser.parse_args()

    import torch

    from rlvr.algorithm.losses import LossParams, PolicyLoss
    from rlvr.run.build import build_run
    from rlvr.config import load_config
    from rlvr.types import SamplingParams

    from compile import quick_start_batches  # benchmarks/ is on sys.path when run as a script

    cfg = load_config(args.config, ["experiment.output_dir=runs/bench_engine_thread",
                                    "eval.local_eval_every=0", "eval.eval_at_start=false",
                                    "logging.progress_bar=false"])
    run = build_run(cfg)
    try:
        r = cfg.rollout
        batch = quick_start_batches(cfg, run.tokenizer)["full"]
        loss = PolicyLoss("dapo", LossParams(0.2, 0.28, 0.0, 1, float(batch.num_response_tokens)))
        prompts = [list(p.token_ids) for p in run.source.mixer.next_batch(
            r.num_unique_prompts_rollout)]  # the run's first prompts, in its chat template
        params = SamplingParams(n=r.num_samples_per_prompt_rollout, temperature=r.temperature,
                                max_tokens=r.response_length, seed=3)
        main_tid = threading.get_native_id()

        def generate() -> float:
            start = time.perf_counter()
            groups = run.engine.generate(prompts, params)
            seconds = time.perf_counter() - start
            return sum(len(c.token_ids_T) for g in groups for c in g) / seconds

        def update() -> tuple[float, float]:
            """Seconds, and the busiest other thread's CPU share (the OpenMP worker)."""
            before = thread_cpu_seconds()
            start = time.perf_counter()
            run.learner.update(batch, loss, cfg.gradient_accumulation_steps, 1, r.temperature)
            wall = time.perf_counter() - start
            after = thread_cpu_seconds()
            others = [after[t] - before.get(t, 0.0) for t in after if t != main_tid]
            return wall, max(others, default=0.0) / wall

        generate(), update(), update()  # warm-up: the engine's caches, the learner's memory
        results: dict[str, dict[str, list[float]]] = {
            s: {"tokens/s": [], "update s": [], "worker busy": []}
            for s in ("caller", "own thread")}
        for _ in range(args.rounds):
            for setting in results:
                own = ThreadPoolExecutor(1) if setting == "own thread" else None
                for _ in range(2):
                    speed = own.submit(generate).result() if own else generate()
                    wall, busy = update()
                    results[setting]["tokens/s"].append(speed)
                    results[setting]["update s"].append(wall)
                    results[setting]["worker busy"].append(busy)
                if own:
                    own.shutdown(wait=True)  # the thread ends, and its OpenMP team with it
        print(f"CPU: {cpu_name()}, {torch.get_num_threads()} threads; engine "
              f"{type(run.engine).__name__}; {len(prompts)} prompts x {params.n} samples, update "
              f"of {batch.num_tokens} tokens; medians of {2 * args.rounds}")
        med = {s: {k: statistics.median(v) for k, v in m.items()} for s, m in results.items()}
        for setting, m in med.items():
            print(f"  engine on {setting:10s}  generation {m['tokens/s']:5.0f} tokens/s   update "
                  f"{m['update s']:5.2f} s   learner's OpenMP worker busy {m['worker busy']:.2f}")
        c, o = med["caller"], med["own thread"]
        print(f"  caller against own thread: generation {c['tokens/s'] / o['tokens/s']:.2f}x, "
              f"update {o['update s'] / c['update s']:.2f}x faster")
    finally:
        run.close()


if __name__ == "__main__":
    main()
