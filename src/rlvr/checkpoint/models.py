"""Model checkpoints as Hugging Face directories, written atomically, the last N kept.

A checkpoint is written into a temporary sibling directory and renamed into place
(`checkpoint.atomic`), so a crash mid-save never leaves a half-written `step_*` directory and
never damages an earlier one; a failed write (disk full) removes its temporary directory and
stops the run with `SaveFailed`. Full resumable training state is `checkpoint.state`. A LoRA
policy's checkpoint holds its adapter (PEFT's files, naming the base model) and the tokenizer;
`checkpoint.adapters` loads or merges it.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from rlvr.checkpoint.atomic import keep_last, save_dir_atomic
from rlvr.learner.lora import is_lora, save_adapter
from rlvr.run.paths import RunPaths


def _save_atomically(model, tokenizer, output_dir: Path, target: Path, info: dict,
                     what: str) -> Path:
    lora = is_lora(model)  # the adapter only; `rlvr merge` makes a plain model of it
    info = {**info, "lora": True} if lora else info

    def fill(tmp: Path) -> None:
        if lora:
            save_adapter(model, tmp)
        else:
            model.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        # Written last: `rlvr.checkpoint.resume` reads its mtime as when the model was complete.
        (tmp / "rlvr_checkpoint.json").write_text(json.dumps({**info, "time": time.time()}))

    # The model writers are not told the state directory: the message says where it is by default.
    kept = (f"the saves before it are kept (model checkpoints in {output_dir}/checkpoints, "
            f"training states in checkpoint.checkpoint_state_dir, by default {output_dir}/state)"
            ": free space and rerun the same command to resume from the last training state")
    return save_dir_atomic(target, fill, what, kept)


def list_checkpoints(output_dir: Path) -> list[Path]:
    """The `step_<number>` directories under `checkpoints/`, oldest first; anything else there
    (a copy named step_000003.bak) is not one, and is left alone."""
    root = RunPaths(output_dir).checkpoints
    found = [p for p in root.glob("step_*") if re.fullmatch(r"step_\d+", p.name) and p.is_dir()]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def latest_checkpoint(output_dir: Path) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def save_model_checkpoint(model, tokenizer, output_dir: Path, step: int, keep_last_n: int) -> Path:
    target = RunPaths(output_dir).checkpoint(step)
    path = _save_atomically(model, tokenizer, output_dir, target, {"step": step},
                            "the model checkpoint")
    keep_last(list_checkpoints(output_dir), keep_last_n)
    return path


def save_final_model(model, tokenizer, output_dir: Path) -> Path:
    output_dir = Path(output_dir)
    return _save_atomically(model, tokenizer, output_dir, RunPaths(output_dir).final,
                            {"step": "final"}, "the final model")
