"""What `rlvr train` does in a directory that holds an earlier run, end to end:
- `checkpoint.resume=false` there starts over, the earlier run moved aside whole to
  `<dir>.old-1` (it was first accepted into the same directory: the two runs' metrics mixed,
  and keep-last-N deleted the new run's states for the old run's; then refused, exit 2, so
  the documented way to start over did not);
- a finished run whose last state is older than its last step is finished on rerun (exit 0,
  `final/` untouched), where it used to train its last steps again.
The decisions themselves, case by case: `tests/checkpoint/test_resume_guard.py`."""

from __future__ import annotations

import json

from rlvr.checkpoint.state import list_states
from rlvr.cli import main

RUN = ["model.name_or_path=tiny-llama", "rollout.engine=transformers",
       "rollout.num_unique_prompts_rollout=4", "rollout.num_samples_per_prompt_rollout=4",
       "rollout.response_length=8", "data.max_prompt_length=128", "algorithm.pack_length=256",
       "data.eval_holdout=4", "eval.eval_at_start=false", "eval.local_eval_every=0",
       "algorithm.filter_zero_std_samples=false", "logging.progress_bar=false",
       "rewards.num_workers=0"]


def _steps(out):
    return [json.loads(line)["training_step"] for line in (out / "metrics.jsonl").open()]


def test_resume_false_in_a_directory_holding_an_earlier_run_moves_it_aside(tmp_path, caplog):
    out = tmp_path / "run"
    base = ["train", *RUN, "checkpoint.checkpoint_state_freq=1", "checkpoint.save_final=false",
            f"experiment.output_dir={out}"]
    assert main([*base, "experiment.total_episodes=96"]) == 0  # run A: 6 steps
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    code = main([*base, "experiment.total_episodes=48", "experiment.seed=7",
                 "checkpoint.resume=false"])  # run B: 3 steps, a new run in A's directory
    assert code == 0
    aside = tmp_path / "run.old-1"
    assert f"the earlier run in {out} was moved to {aside}" in caplog.text
    assert {p.relative_to(aside): p.read_bytes() for p in aside.rglob("*") if p.is_file()} == before
    assert [p.name for p in list_states(aside / "state")] == ["step_000005", "step_000006"]
    assert _steps(aside) == [0, 1, 2, 3, 4, 5, 6]
    assert _steps(out) == [0, 1, 2, 3]
    assert [p.name for p in list_states(out / "state")] == ["step_000002", "step_000003"]


def test_rerunning_a_finished_run_whose_last_state_is_older_trains_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    # 5 steps, a state every 2: the last state is of step 4, the final model of step 5
    args = ["train", *RUN, "experiment.total_episodes=80", "checkpoint.checkpoint_state_freq=2",
            f"experiment.output_dir={out}"]
    assert main(args) == 0
    final = out / "final" / "model.safetensors"
    written, weights = final.stat().st_mtime_ns, final.read_bytes()
    capsys.readouterr()
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert (f"the run in {out} is finished: its metrics reach step 5 of 5 and its final model "
            f"is in {out / 'final'}") in printed
    assert final.stat().st_mtime_ns == written and final.read_bytes() == weights
    assert _steps(out) == [0, 1, 2, 3, 4, 5]
