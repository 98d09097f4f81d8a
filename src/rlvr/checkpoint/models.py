"""Model checkpoints as Hugging Face directories, written atomically, the last N kept.

A checkpoint is written into a temporary sibling directory and renamed into place
(`checkpoint.atomic`), so a crash mid-save never leaves a half-written `step_*` directory and
never damages an earlier one. Full resumable training state is `checkpoint.state`. A LoRA
policy's checkpoint holds its adapter (PEFT's files, naming the base model) and the tokenizer;
`checkpoint.adapters` loads or merges it.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from rlvr.checkpoint.atomic import fresh_tmp_dir, keep_last, publish_dir
from rlvr.learner.lora import is_lora, save_adapter


def _save_atomically(model, tokenizer, target: Path, info: dict) -> Path:
    tmp = fresh_tmp_dir(target)
    if is_lora(model):  # the adapter only; `rlvr merge` makes a plain model of it
        save_adapter(model, tmp)
        info = {**info, "lora": True}
    else:
        model.save_pretrained(tmp, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    (tmp / "rlvr_checkpoint.json").write_text(json.dumps({**info, "time": time.time()}))
    return publish_dir(tmp, target)


def list_checkpoints(output_dir: Path) -> list[Path]:
    """The `step_<number>` directories under `checkpoints/`, oldest first; anything else there
    (a copy named step_000003.bak) is not one, and is left alone."""
    root = Path(output_dir) / "checkpoints"
    found = [p for p in root.glob("step_*") if re.fullmatch(r"step_\d+", p.name) and p.is_dir()]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def latest_checkpoint(output_dir: Path) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def save_model_checkpoint(model, tokenizer, output_dir: Path, step: int, keep_last_n: int) -> Path:
    target = Path(output_dir) / "checkpoints" / f"step_{step:06d}"
    path = _save_atomically(model, tokenizer, target, {"step": step})
    keep_last(list_checkpoints(output_dir), keep_last_n)
    return path


def save_final_model(model, tokenizer, output_dir: Path) -> Path:
    return _save_atomically(model, tokenizer, Path(output_dir) / "final", {"step": "final"})
