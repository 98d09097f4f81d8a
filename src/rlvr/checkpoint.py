"""Model checkpoints as Hugging Face directories, written atomically, the last N kept.

A checkpoint is written into a temporary sibling directory and renamed into place, so a crash
mid-save never leaves a half-written `step_*` directory and never damages an earlier one.
Full resumable training state (optimizer, RNG, data position) is a separate concern.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from rlvr.metrics import write_text_atomic

__all__ = ["save_model_checkpoint", "save_final_model", "list_checkpoints", "latest_checkpoint",
           "write_text_atomic"]


def _save_atomically(model, tokenizer, target: Path, info: dict) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(".tmp-*"):  # left behind by a crash mid-save
        shutil.rmtree(stale, ignore_errors=True)
    tmp = target.parent / f".tmp-{target.name}"
    model.save_pretrained(tmp, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    (tmp / "rlvr_checkpoint.json").write_text(json.dumps({**info, "time": time.time()}))
    if target.exists():
        # Move the old copy aside first: at every instant one complete copy exists.
        old = target.parent / f".tmp-old-{target.name}"
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)
    return target


def list_checkpoints(output_dir: Path) -> list[Path]:
    root = Path(output_dir) / "checkpoints"
    return sorted(root.glob("step_*"), key=lambda p: int(p.name.split("_")[1]))


def latest_checkpoint(output_dir: Path) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def save_model_checkpoint(model, tokenizer, output_dir: Path, step: int, keep_last_n: int) -> Path:
    target = Path(output_dir) / "checkpoints" / f"step_{step:06d}"
    path = _save_atomically(model, tokenizer, target, {"step": step})
    if keep_last_n > 0:
        for old in list_checkpoints(output_dir)[:-keep_last_n]:
            shutil.rmtree(old, ignore_errors=True)
    return path


def save_final_model(model, tokenizer, output_dir: Path) -> Path:
    return _save_atomically(model, tokenizer, Path(output_dir) / "final", {"step": "final"})
