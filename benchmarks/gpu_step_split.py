"""A few training steps of a config and where each step's time went: generation against the
rest, from the run's own metrics (time/generation, time/step).

    python benchmarks/gpu_step_split.py configs/gsm8k.yaml --steps 3 model.device=cuda \
        rollout.engine=transformers rollout.transformers_decode=static

Prints one JSON line: the mean over the steps after the first (the first includes warm-ups),
generation tokens per second, and the generation share of the step.
"""

from __future__ import annotations

import argparse
import json
import tempfile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_intermixed_args()
    from rlvr.config import load_config
    from rlvr.run.loop import train

    with tempfile.TemporaryDirectory() as out:
        probe = load_config(args.config, args.overrides)
        per_step = (probe.rollout.num_unique_prompts_rollout
                    * probe.rollout.num_samples_per_prompt_rollout)
        cfg = load_config(args.config, [
            *args.overrides, f"experiment.output_dir={out}",
            f"experiment.total_episodes={per_step * args.steps}", "eval.local_eval_every=0", "eval.eval_at_start=false",
            "checkpoint.save_final=false", "checkpoint.save_freq=0",
            "logging.progress_bar=false"])
        run = train(cfg)
    steps = [r for r in run.history if "time/step" in r][1:] or \
        [r for r in run.history if "time/step" in r]

    def mean(key: str) -> float:
        values = [r[key] for r in steps if key in r]
        return sum(values) / len(values) if values else float("nan")

    record = {"config": args.config, "overrides": args.overrides, "steps_timed": len(steps),
              "rows_per_step": per_step, "step_s": round(mean("time/step"), 3),
              "generation_s": round(mean("time/generation"), 3),
              "training_s": round(mean("time/training"), 3),
              "generation_share": round(mean("time/generation") / mean("time/step"), 3),
              "mean_response_tokens": round(mean("val/sequence_lengths"), 1),
              # val/sequence_lengths: the mean response length of the step's samples
              "generation_tokens_per_s": round(mean("val/sequence_lengths") * per_step
                                               / mean("time/generation"), 1)}
    print("STEP_SPLIT " + json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
