"""A rerun into a directory that holds an earlier run: the same run, a longer run, or another.

A run directory remembers the config it ran (`config.yaml`, written when the run starts).
`check_rerun` compares a rerun's config with it before anything loads:
- the same config (or one that only raised `experiment.total_episodes`: a longer run) goes on
  to `plan_resume`, which continues the run or says it is finished;
- any other difference is another run: `ResumeRefused` (exit 2) naming every field that
  differs, old and new value, and the two ways on (the old config, or starting over).
Starting over (`checkpoint.resume=false`, `rlvr train --overwrite`) keeps the earlier run: its
directory is moved aside (`move_aside`, to `<output_dir>.old-N`) and the message says where.
A directory that holds no trained step, state, checkpoint or final model (a run that failed
before its first step) holds nothing to keep: any config starts there.
What it is not: choosing the state to resume (`rlvr.checkpoint.resume`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rlvr.checkpoint.models import list_checkpoints
from rlvr.checkpoint.state import list_states
from rlvr.run.errors import ResumeRefused
from rlvr.run.paths import RunPaths

log = logging.getLogger(__name__)


# Fields a rerun may change and still be the same run: where it is (a moved directory), whether
# it resumes, the addresses of servers a launcher started for it, and how the console looks.
SAME_RUN_FIELDS = frozenset({"experiment.output_dir", "checkpoint.resume",
                             "rollout.server_addresses", "logging.progress_bar",
                             "model.num_threads"})


def config_path(output_dir: Path) -> Path:
    return RunPaths(output_dir).config


def earlier_run_evidence(output_dir: Path, state_dir: Path) -> str:
    """What an earlier run left that a new run would mix with or lose ("": nothing): trained
    steps in the metrics, training states, model checkpoints, a final model."""
    from rlvr.checkpoint.resume import last_logged_step  # resume imports this module

    last = last_logged_step(RunPaths(output_dir).metrics)
    states, checkpoints = list_states(state_dir), list_checkpoints(output_dir)
    final = RunPaths(output_dir).final
    return ", ".join(filter(None, [
        f"its metrics reach step {last}" if last else "",
        f"{len(states)} training state(s) in {state_dir}" if states else "",
        f"{len(checkpoints)} model checkpoint(s) in {RunPaths(output_dir).checkpoints}"
        if checkpoints else "",
        f"its model is in {final}" if final.is_dir() else ""]))


def flat_fields(tree: Any, path: str = "") -> dict[str, Any]:
    """{dotted field: value} of a config mapping; lists are values."""
    if not isinstance(tree, dict):
        return {path: tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(flat_fields(value, f"{path}.{key}" if path else str(key)))
    return flat


def config_changes(old_yaml: str, new_yaml: str) -> list[tuple[str, Any, Any]]:
    """(field, old value, new value) for every field the two configs (`to_yaml` texts) both
    hold and set differently, but the fields of `SAME_RUN_FIELDS` and a grown
    `experiment.total_episodes` (a longer run continues). A field only one of them holds (a
    config written by another version of rlvr) is not compared."""
    old = flat_fields(OmegaConf.to_container(OmegaConf.create(old_yaml), resolve=False))
    new = flat_fields(OmegaConf.to_container(OmegaConf.create(new_yaml), resolve=False))
    changes = []
    for field in sorted(old.keys() & new.keys()):
        if field in SAME_RUN_FIELDS or old[field] == new[field]:
            continue
        if (field == "experiment.total_episodes" and isinstance(old[field], int)
                and isinstance(new[field], int) and new[field] > old[field]):
            continue
        changes.append((field, old[field], new[field]))
    return changes


def check_rerun(output_dir: Path, state_dir: Path, new_yaml: str) -> None:
    """ResumeRefused naming every changed field when `output_dir` holds an earlier run (see
    `earlier_run_evidence`) of a config other than `new_yaml`; nothing otherwise."""
    path = config_path(output_dir)
    if not path.is_file():
        return
    evidence = earlier_run_evidence(output_dir, state_dir)
    if not evidence:
        return
    try:
        changes = config_changes(path.read_text(encoding="utf-8"), new_yaml)
    except Exception as e:  # noqa: BLE001 -- unreadable: the run cannot be told the same
        raise ResumeRefused(f"{output_dir} holds an earlier run ({evidence}) whose {path.name} "
                            f"cannot be read ({e}). {start_over_hint(output_dir)}") from None
    if not changes:
        return
    listed = "; ".join(f"{field}: {old!r} -> {new!r}" for field, old, new in changes)
    raise ResumeRefused(
        f"{output_dir} holds an earlier run ({evidence}) of another config: {listed}. "
        f"Rerun with that run's config ({path}) to continue it, or "
        f"{start_over_hint(output_dir)}")


def start_over_hint(output_dir: Path) -> str:
    """How to start over instead, said by every refusal to continue."""
    return (f"start over with rlvr train --overwrite (checkpoint.resume=false), which moves "
            f"{output_dir} aside to {aside_path(output_dir)}, or use a new "
            "experiment.output_dir")


def aside_path(path: Path) -> Path:
    """The first free `<path>.old-N`, N from 1."""
    number = 1
    while True:
        aside = path.with_name(f"{path.name}.old-{number}")
        if not os.path.lexists(aside):
            return aside
        number += 1


def move_aside(output_dir: Path, state_dir: Path) -> list[tuple[Path, Path]]:
    """Start over: `output_dir` (and `state_dir`, where it lies elsewhere and holds states)
    renamed to `<name>.old-N` when it holds an earlier run (`earlier_run_evidence`), so the
    new run starts in an empty directory and the old one is kept whole; each move is logged
    and returned as (from, to). A directory without an earlier run is left as it is (a
    failed start's `config.yaml` is replaced by the new run's)."""
    if not earlier_run_evidence(output_dir, state_dir):
        return []
    here = Path.cwd()
    if output_dir.resolve() == here or output_dir.resolve() in here.parents:
        # Renamed, it would take the process's working directory with it, and the new run
        # would write into the moved one.
        raise ResumeRefused(f"starting over needs the earlier run in {output_dir} moved aside, "
                            "but it is (or holds) the current directory; move it yourself or "
                            "use a new experiment.output_dir")
    moves = []
    keep_state_dir = (output_dir.resolve() not in state_dir.resolve().parents
                      and bool(list_states(state_dir)))  # else moved with the run, or empty
    for path in (output_dir, state_dir) if keep_state_dir else (output_dir,):
        if not path.exists():
            continue
        aside = aside_path(path)
        try:
            os.rename(path, aside)
        except OSError as e:  # the current directory's mount point, another filesystem, ...
            raise ResumeRefused(f"starting over needs the earlier run in {path} moved aside, "
                                f"but it cannot be renamed to {aside} ({e.strerror or e}); "
                                "move it yourself or use a new experiment.output_dir") from None
        log.warning("starting over: the earlier run in %s was moved to %s", path, aside)
        moves.append((path, aside))
    return moves
