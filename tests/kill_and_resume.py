"""What the exact-resume tests share (tests/test_resume.py, tests/test_resume_async.py): the
tiny run they train, its metrics without the numbers that depend on wall time, a run killed
with SIGKILL right after a step's state is saved, and the comparison of final weights."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

# Numbers that depend on wall time, not on the training.
TIMING = ("time/", "learner_tokens_per_second_step", "learner_mfu", "memory/")


def tiny_cmd(out: Path, episodes: int = 96, *overrides: str) -> list[str]:
    """`rlvr train configs/tiny.yaml`, a state saved every step, 3 steps per 32 episodes."""
    return [sys.executable, "-m", "rlvr.cli", "train", "configs/tiny.yaml",
            f"experiment.output_dir={out}", f"experiment.total_episodes={episodes}",
            "rollout.response_length=48", "checkpoint.checkpoint_state_freq=1",
            "algorithm.filter_zero_std_samples=false", "logging.progress_bar=false",
            "eval.local_eval_every=0", "checkpoint.save_freq=0", *overrides]


def metrics(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows]


def kill_after_step(cmd: list[str], out: Path, step: int, env: dict, timeout_s: float) -> None:
    """Start the run and SIGKILL it as soon as the state of `step` exists: no chance to save."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while not (out / "state" / f"step_{step:06d}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "final").exists()


def same_final_weights(a: Path, b: Path) -> bool:
    return same_safetensors(a / "final" / "model.safetensors", b / "final" / "model.safetensors")


def same_safetensors(a: Path, b: Path) -> bool:
    wa, wb = load_file(a), load_file(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
