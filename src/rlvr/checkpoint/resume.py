"""Where a run starts: fresh, from its latest good training state, or not at all.

`plan_resume` decides before any model loads or any file is written, once `rlvr.checkpoint.rerun`
has found the rerun's config to be the earlier run's (or a longer run of it). A run never
starts over silently in a directory that holds an earlier run:
- `checkpoint.resume=false` (`rlvr train --overwrite`) starts at step 0: the caller has moved
  the earlier run aside first (`rerun.move_aside`);
- states exist but none verifies and loads: `ResumeRefused`, naming each state and what is
  wrong, and the fix (starting over, the earlier run moved aside);
- the earlier run is finished (its last state is of the last step; its metrics reached the
  last step and its final model was written after them, as when the last state is older than
  the last step; or without states its metrics reached the last step or its final model is
  there): `RunFinished`, which says so;
  but metrics of the last step without the final model the run was to write, and no state to
  write it from, is a run whose weights are lost: `ResumeRefused`, not a finished run;
- an earlier run's metrics but no state to resume (`checkpoint.checkpoint_state_freq=0` saves
  none): `ResumeRefused` as well, since starting at step 0 would append to its metrics and
  replace its final model.
What it is not: reading the state's tensors into a learner (`rlvr.run.loop.restore_state`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from rlvr.checkpoint.rerun import start_over_hint
from rlvr.checkpoint.state import TrainingState, find_latest_state
from rlvr.run.errors import ResumeRefused, RunFinished
from rlvr.run.paths import RunPaths

log = logging.getLogger(__name__)


def fresh_start_hint(output_dir: Path) -> str:
    """How to start over instead, said by every refusal to resume."""
    return start_over_hint(output_dir)


def plan_resume(output_dir: Path, state_dir: Path, resume: bool, num_training_steps: int,
                saves_final: bool = True) -> TrainingState | None:
    """The state to continue from (None: start at step 0), or ResumeRefused / RunFinished.
    `saves_final`: the run ends by writing `final/`, so a last state without it is resumed
    (the crash came between the two), not called finished."""
    if not resume:  # starting over: the earlier run, if any, was moved aside (`move_aside`)
        return None
    state, rejected = find_latest_state(state_dir)
    if state is not None:
        final_done = not saves_final or RunPaths(output_dir).final.is_dir()
        if state.step >= num_training_steps and final_done:
            raise RunFinished(f"the run in {output_dir} is finished: its training state is of "
                              f"step {state.step} of {num_training_steps}. To train further, "
                              "raise experiment.total_episodes; to train again, "
                              f"{start_over_hint(output_dir)}")
        # The last state is older than the last step where checkpoint_state_freq does not
        # divide the steps: the metrics and the final model say the run ended.
        last = last_logged_step(RunPaths(output_dir).metrics)
        if (last is not None and last >= num_training_steps
                and (not saves_final or final_written_after_metrics(output_dir))):
            model = f" and its final model is in {output_dir / 'final'}" if saves_final else ""
            raise RunFinished(f"the run in {output_dir} is finished: its metrics reach step "
                              f"{last} of {num_training_steps}{model}. To train further, raise "
                              "experiment.total_episodes; to train again, "
                              f"{start_over_hint(output_dir)}")
        return state
    if rejected:
        listed = "; ".join(f"{path.name}: {problem}" for path, problem in rejected)
        raise ResumeRefused(f"no training state in {state_dir} can be resumed ({listed}). "
                            f"{fresh_start_hint(output_dir)}")
    last = last_logged_step(RunPaths(output_dir).metrics)
    final = RunPaths(output_dir).final
    evidence = ", ".join(filter(None, [f"its metrics reach step {last}" if last else "",
                                       f"its model is in {final}" if final.is_dir() else ""]))
    if last is not None and last >= num_training_steps and saves_final and not final.is_dir():
        # Killed while writing its final model (a second signal, SIGKILL, out of memory or
        # disk): its weights are in no file, and "finished" would hide that behind exit 0.
        raise ResumeRefused(f"the run in {output_dir} trained to step {last} (its metrics) but "
                            f"its final model is not in {final} and it saved no training state "
                            "to write it from (checkpoint.checkpoint_state_freq=0): its weights "
                            "are lost. checkpoint.checkpoint_state_freq=N keeps a state to "
                            f"finish from. {fresh_start_hint(output_dir)}")
    if (last is not None and last >= num_training_steps) or (last is None and final.is_dir()):
        raise RunFinished(f"the run in {output_dir} is finished ({evidence}). To train again, "
                          f"{start_over_hint(output_dir)}")
    if final.is_dir() or (last is not None and last > 0):
        raise ResumeRefused(f"{output_dir} holds an earlier run ({evidence}) and no training "
                            f"state to continue it to step {num_training_steps} from "
                            f"(checkpoint.checkpoint_state_freq=0 saves none); starting at step "
                            f"0 would mix the two. {fresh_start_hint(output_dir)}")
    return None


def final_written_after_metrics(output_dir: Path) -> bool:
    """`final/` holds the model of the run's last logged step: it is complete (published whole,
    its `rlvr_checkpoint.json` written last) and was written after the last metrics line. A
    final model older than the metrics is an earlier, shorter run's, left when a longer one
    died writing its own: that run is resumed, not called finished."""
    paths = RunPaths(output_dir)
    marker, metrics = paths.final / "rlvr_checkpoint.json", paths.metrics
    if not marker.is_file() or not metrics.is_file():
        return False
    # >=: on a filesystem with coarse timestamps both may carry the same second.
    return marker.stat().st_mtime_ns >= metrics.stat().st_mtime_ns


def last_logged_step(path: Path) -> int | None:
    """The highest `training_step` among the whole lines of a metrics JSONL file (None: no
    file or no step); a line that is not a JSON record (torn by a crash) is skipped with a
    warning."""
    if not path.is_file():
        return None
    last = None
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                step = json.loads(raw)["training_step"]
            except (ValueError, KeyError, TypeError, RecursionError):  # or nested past the stack
                if raw.endswith(b"\n"):  # a torn last line is expected after a crash
                    log.warning("%s line %d is not a metrics record; skipped", path, number)
                continue
            if isinstance(step, int):
                last = step if last is None else max(last, step)
    return last
