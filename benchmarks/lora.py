"""Learner step time and peak memory: every weight trained (full) against LoRA adapters.

Each setting runs in a fresh Python process, so its peak resident memory (`getrusage` max RSS:
what the OS had to give the process, weights, gradients, Adam state and activations included,
which tracemalloc cannot see) is its own. The learner is built as training builds it
(`rlvr.run.build.build_learner` from the quick start's config, SmolLM2-135M-Instruct by default),
and updated on one fixed packed batch of the quick start's shape (8 prompts x 8 samples of
addition, responses of 8-32 random tokens, 2 micro-batches). The first update is a warm-up and
is not timed. With `--beta` > 0 the KL term runs: a full run then holds a second, frozen copy
of the model as its reference, a LoRA run switches its adapters off instead.

    python benchmarks/lora.py                       # full vs LoRA rank 16, 5 timed updates
    python benchmarks/lora.py --beta 0.05           # with the reference policy
    nice -n 10 python benchmarks/lora.py --steps 1  # a quick check that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from rlvr.device import cpu_name

SETTINGS = {"full": [], "lora": ["model.lora.rank={rank}", "model.lora.alpha={alpha}"]}


def rss_mb() -> float:
    """This process's resident memory now (Linux), in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def measure(args: argparse.Namespace) -> dict:
    """One setting, in this (fresh) process: build, warm up, time `args.steps` updates."""
    import torch
    from learners import build_batch  # benchmarks/ is on sys.path when run as a script

    from rlvr.algorithm.losses import LossParams, PolicyLoss
    from rlvr.run.build import build_learner, plan_devices
    from rlvr.config import load_config
    from rlvr.learner.lora import parameter_counts
    from rlvr.models import load_causal_lm, load_tokenizer, resolve_model_dir

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    overrides = [o.format(rank=args.rank, alpha=2 * args.rank) for o in SETTINGS[args.worker]]
    cfg = load_config(args.config, [f"model.name_or_path={args.model}",
                                    f"algorithm.beta={args.beta}", *overrides])
    model_dir = resolve_model_dir(cfg.model.name_or_path)
    batch = build_batch(args, cfg, load_tokenizer(model_dir))
    devices = plan_devices(cfg, None)
    policy = load_causal_lm(model_dir, cfg.model.dtype, devices.attention)  # auto resolved
    learner = build_learner(cfg, model_dir, policy, devices)
    trainable, total = parameter_counts(learner.policy)
    a = cfg.algorithm
    loss = PolicyLoss(a.loss_fn, LossParams(
        clip_lower=a.clip_lower, clip_higher=a.clip_higher, beta=a.beta,
        kl_estimator=a.kl_estimator, denominator=float(batch.num_response_tokens)))
    rss_before = rss_mb()
    times = []
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        learner.update(batch, loss, cfg.gradient_accumulation_steps, a.num_epochs,
                       cfg.rollout.temperature)
        times.append(time.perf_counter() - start)
    optimizer_mb = sum(t.numel() * t.element_size() for s in learner.optimizer.state.values()
                       for t in s.values() if torch.is_tensor(t)) / 2**20
    return {"setting": args.worker, "trainable": trainable, "total": total,
            "step_s": statistics.median(times[1:]), "step_min_s": min(times[1:]),
            "warmup_s": times[0], "rss_before_update_mb": rss_before,
            "peak_rss_mb": peak_rss_mb(), "optimizer_mb": optimizer_mb,
            "bf16": devices.bf16, "threads": torch.get_num_threads(),
            "reference_copy": getattr(learner, "reference", None) is not None,
            "batch": f"{batch.num_rows} rows x {batch.input_ids_RL.shape[1]} tokens, "
                     f"{batch.num_tokens} tokens ({batch.num_response_tokens} response), "
                     f"{cfg.gradient_accumulation_steps} micro-batches"}


def run_setting(name: str, args: argparse.Namespace) -> dict:
    """`measure` in a fresh interpreter; its JSON is the last line it prints."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name,
           *[f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k != "worker"]]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"setting {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_table(rows: list[dict], args: argparse.Namespace) -> None:
    first = rows[0]
    print(f"CPU: {cpu_name()}, {os.cpu_count()} logical CPUs; torch threads {first['threads']}"
          f", bf16 compute {'on' if first['bf16'] else 'off'}")
    print(f"{args.model}: {args.prompts} prompts x {args.samples} samples, {first['batch']}; "
          f"beta {args.beta}; {args.steps} timed updates after a warm-up")
    header = (f"{'setting':<10} {'trainable':>12} {'step s':>8} {'min s':>7} {'RSS before':>11} "
              f"{'peak RSS':>9} {'Adam state':>11} {'reference':>10}")
    print(header)
    print("-" * len(header))
    for r in rows:
        name = r["setting"] + (f" r{args.rank}" if r["setting"] == "lora" else "")
        share = f"{r['trainable'] / 1e6:.2f}M" + (f" ({100 * r['trainable'] / r['total']:.1f}%)"
                                                   if r["trainable"] < r["total"] else "")
        reference = ("copy" if r["reference_copy"] else "adapters off" if args.beta > 0
                     and r["setting"] == "lora" else "none")
        print(f"{name:<10} {share:>12} {r['step_s']:8.2f} {r['step_min_s']:7.2f} "
              f"{r['rss_before_update_mb']:9.0f}MB {r['peak_rss_mb']:7.0f}MB "
              f"{r['optimizer_mb']:9.1f}MB {reference:>10}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/quickstart.yaml")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--response-length", type=int, default=32)
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank (alpha = 2 x rank)")
    parser.add_argument("--beta", type=float, default=0.0, help="KL coefficient (the quick "
                        "start's is 0); > 0 runs the reference policy")
    parser.add_argument("--steps", type=int, default=5, help="timed updates per setting")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0: default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", choices=sorted(SETTINGS), default=None,
                        help=argparse.SUPPRESS)  # internal: measure one setting here
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(measure(args)))
        return
    rows = [run_setting(name, args) for name in SETTINGS]
    print_table(rows, args)


if __name__ == "__main__":
    main()
