"""Resume never starts over silently, and a state directory is data, never code.

- States that exist but none of which loads stop the run, naming each and the fix; a finished
  run rerun says it is finished; an earlier run without states is not appended to.
- Stray `step_*` entries, manifests that are not mappings and torn metrics lines are skipped
  with a warning.
- A crafted pickle in a state (with a checksum to match: whoever writes the directory writes
  the manifest too) is refused and never executed, in the full and the sharded format."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import random

from pathlib import Path

import numpy as np
import pytest
import torch

from rlvr.checkpoint.state import (MANIFEST, TrainingState, capture_rng, load_latest_state,
                                   list_states, restore_rng, save_state, verify_state)


ROOT = Path(__file__).resolve().parents[2]


def _state(step: int) -> TrainingState:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    return TrainingState(step=step, episode=16 * step, mixer={"positions": [step]},
                         policy=dict(model.state_dict()), reference=None,
                         optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(),
                         rng=capture_rng(), policy_version=step)


def _rewrite_manifest(path):
    """What an attacker who writes the state directory does: checksums that match."""
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*")
                   if p.is_file() and p.name != MANIFEST)
    manifest = {name: hashlib.sha256((path / name).read_bytes()).hexdigest() for name in files}
    (path / MANIFEST).write_text(json.dumps(manifest))


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


# ---- a state is data --------------------------------------------------------------------------

def test_a_state_round_trips_as_data(tmp_path):
    saved = _state(3)
    save_state(saved, tmp_path)
    random.random(), np.random.rand(), torch.rand(1)  # move every RNG on
    loaded = load_latest_state(tmp_path)
    assert loaded.step == 3 and loaded.mixer == {"positions": [3]}
    restore_rng(loaded.rng)
    after = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    restore_rng(saved.rng)
    assert after == (random.random(), float(np.random.rand()), float(torch.rand(1)))
    assert torch.equal(loaded.optimizer["state"][0]["exp_avg"],
                       saved.optimizer["state"][0]["exp_avg"])


def test_a_state_from_before_holding_numpy_arrays_still_loads(tmp_path):
    save_state(_state(2), tmp_path)
    path = list_states(tmp_path)[-1]
    trainer = torch.load(path / "trainer.pt", weights_only=False)  # our own file, trusted here
    trainer["rng"]["numpy"] = np.random.get_state()  # as rlvr wrote it before
    torch.save(trainer, path / "trainer.pt")
    _rewrite_manifest(path)
    state = load_latest_state(tmp_path)
    assert state.step == 2
    restore_rng(state.rng)


def test_a_crafted_pickle_in_a_state_is_refused_and_never_run(tmp_path, caplog):
    marker = tmp_path / "pwned"
    save_state(_state(1), tmp_path / "state")
    save_state(_state(2), tmp_path / "state")
    newest = list_states(tmp_path / "state")[-1]
    torch.save({"optimizer": {}, "scheduler": {}, "rng": _Payload(marker), "mixer": {}},
               newest / "trainer.pt")
    _rewrite_manifest(newest)
    assert verify_state(newest) is None  # the checksums match: only loading as data saves us
    state = load_latest_state(tmp_path / "state")
    assert not marker.exists(), "a state file ran code"
    assert state.step == 1  # the crafted state skipped for the one before
    assert "trainer.pt is not plain data" in caplog.text and "posix.system" in caplog.text


def test_a_crafted_sharded_index_is_refused_and_never_run(tmp_path):
    from rlvr.checkpoint.safe_load import UnsafeStateFile
    from rlvr.checkpoint.sharded import load_sharded, save_sharded

    marker = tmp_path / "pwned"
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    save_sharded(tmp_path / "learner", model, optimizer, None, {"step": 1})
    load_sharded(tmp_path / "learner", model, optimizer, None)  # the genuine index loads
    index = tmp_path / "learner" / ".metadata"
    genuine = index.read_bytes()
    index.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(UnsafeStateFile, match="not a plain checkpoint index"):
        load_sharded(tmp_path / "learner", model, optimizer, None)
    index.write_bytes(genuine)
    torch.save({"extra": _Payload(marker), "optimizer_fresh": True, "has_reference": False},
               tmp_path / "learner" / "extra.pt")
    with pytest.raises(UnsafeStateFile, match="extra.pt is not plain data"):
        load_sharded(tmp_path / "learner", model, optimizer, None)
    assert not marker.exists(), "a sharded state file ran code"


# ---- odd entries are skipped ------------------------------------------------------------------

def test_stray_step_entries_are_skipped_with_a_warning(tmp_path, caplog):
    save_state(_state(2), tmp_path)
    (tmp_path / "step_000002.bak").mkdir()
    (tmp_path / "step_notes").write_text("a file")
    (tmp_path / "step_").mkdir()
    assert load_latest_state(tmp_path).step == 2
    assert "step_000002.bak is not a training state" in caplog.text
    assert "step_notes is not a training state" in caplog.text


def test_a_manifest_that_is_not_a_mapping_is_a_damaged_state(tmp_path, caplog):
    save_state(_state(1), tmp_path)
    save_state(_state(2), tmp_path)
    newest = list_states(tmp_path)[-1]
    for text in ("[1, 2]", '{"trainer.pt": 3}', '{"../../etc/passwd": "00"}'):
        (newest / MANIFEST).write_text(text)
        assert verify_state(newest) is not None
        assert load_latest_state(tmp_path).step == 1
    assert "cannot be used" in caplog.text


def test_a_torn_line_in_the_middle_of_the_metrics_is_dropped_with_a_warning(tmp_path, caplog):
    from rlvr.metrics.sinks import JsonlSink

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"training_step": 0}\n{"training_step": 1, "x"\n{"training_step": 2}\n'
                    '{"training_step": 3}\n')
    JsonlSink.truncate_after(path, 2)
    assert path.read_text() == '{"training_step": 0}\n{"training_step": 2}\n'
    assert "line 2 is not a metrics record" in caplog.text


# ---- resume never starts over -----------------------------------------------------------------

def _plan(tmp_path, steps=6):
    from rlvr.checkpoint.resume import plan_resume

    return plan_resume(tmp_path, tmp_path / "state", True, steps)


def test_states_that_all_fail_stop_the_run_naming_them_and_the_fix(tmp_path):
    from rlvr.run.errors import ResumeRefused

    for step in (1, 2):
        save_state(_state(step), tmp_path / "state")
    for path in list_states(tmp_path / "state"):
        (path / "trainer.pt").write_bytes(b"torn")
    with pytest.raises(ResumeRefused) as refused:
        _plan(tmp_path)
    message = str(refused.value)
    assert "step_000001: trainer.pt does not match its checksum" in message
    assert "step_000002" in message and "start over with rlvr train --overwrite" in message
    assert f"moves {tmp_path} aside to {tmp_path}.old-1" in message
    assert "new experiment.output_dir" in message


def test_a_finished_run_rerun_says_it_is_finished(tmp_path):
    from rlvr.run.errors import RunFinished

    save_state(_state(6), tmp_path / "state")
    assert _plan(tmp_path).step == 6  # no final model yet: resumed, to write it
    (tmp_path / "final").mkdir()
    with pytest.raises(RunFinished, match="is finished: its training state is of step 6 of 6"):
        _plan(tmp_path)
    assert _plan(tmp_path, steps=8).step == 6  # more steps asked: it continues


def test_a_finished_run_without_states_says_it_is_finished(tmp_path):
    from rlvr.run.errors import RunFinished

    from rlvr.checkpoint.resume import plan_resume

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"training_step": s}) + "\n"
                                                    for s in range(7)))
    (tmp_path / "final").mkdir()
    with pytest.raises(RunFinished, match="its metrics reach step 6, its model is in"):
        _plan(tmp_path)
    with pytest.raises(RunFinished, match="its metrics reach step 6"):  # a run saving no final
        plan_resume(tmp_path, tmp_path / "state", True, 6, saves_final=False)
    (tmp_path / "metrics.jsonl").unlink()
    with pytest.raises(RunFinished, match="its model is in"):
        _plan(tmp_path)


def test_a_last_step_without_its_final_model_or_a_state_is_lost_weights_not_a_finished_run(
        tmp_path):
    """Killed while writing `final/`: the rerun said "finished" and exited 0, weights gone."""
    from rlvr.run.errors import ResumeRefused

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"training_step": s}) + "\n"
                                                    for s in range(7)))
    with pytest.raises(ResumeRefused, match="trained to step 6.*final model is not in.*lost"):
        _plan(tmp_path)


def test_an_earlier_run_without_states_is_not_started_over(tmp_path):
    from rlvr.run.errors import ResumeRefused

    (tmp_path / "metrics.jsonl").write_text('{"training_step": 0}\n{"training_step": 2}\n')
    with pytest.raises(ResumeRefused, match="its metrics reach step 2.*continue it to step 6"):
        _plan(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"training_step": 0}\n')
    assert _plan(tmp_path) is None  # nothing trained yet: starting over loses nothing
    (tmp_path / "final").mkdir()  # a finished shorter run, more steps asked, no state
    with pytest.raises(ResumeRefused, match="its model is in .*continue it to step 6"):
        _plan(tmp_path)


def test_starting_over_moves_an_earlier_run_aside_whole(tmp_path, caplog):
    """`checkpoint.resume=false` was refused wherever an earlier run was (and before that
    appended to it); now the earlier run is moved to `<dir>.old-N`, states kept elsewhere
    too, and the move is logged; a directory with nothing trained is left as it is."""
    from rlvr.checkpoint.rerun import move_aside

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "metrics.jsonl").write_text('{"training_step": 0}\n')
    assert move_aside(tmp_path / "a", tmp_path / "a" / "state") == []  # nothing to lose
    assert move_aside(tmp_path / "empty", tmp_path / "empty" / "state") == []
    save_state(_state(5), tmp_path / "elsewhere")  # states in checkpoint.checkpoint_state_dir
    (tmp_path / "b").mkdir()
    assert move_aside(tmp_path / "b", tmp_path / "elsewhere") == [
        (tmp_path / "b", tmp_path / "b.old-1"),
        (tmp_path / "elsewhere", tmp_path / "elsewhere.old-1")]
    assert [p.name for p in list_states(tmp_path / "elsewhere.old-1")] == ["step_000005"]
    for number in (1, 2):  # a second start over keeps the first one's earlier run too
        (tmp_path / "c" / "checkpoints" / "step_000003").mkdir(parents=True)
        assert move_aside(tmp_path / "c", tmp_path / "c" / "state") == [
            (tmp_path / "c", tmp_path / f"c.old-{number}")]
    assert (tmp_path / "c.old-1" / "checkpoints" / "step_000003").is_dir()
    assert f"the earlier run in {tmp_path / 'c'} was moved to {tmp_path / 'c.old-2'}" in caplog.text
    from rlvr.run.errors import ResumeRefused

    (tmp_path / "d" / "final").mkdir(parents=True)
    os.chdir(tmp_path / "d")  # the run's directory is the current one: not renamed under us
    try:
        with pytest.raises(ResumeRefused, match="it is \\(or holds\\) the current directory"):
            move_aside(Path("."), Path("state"))
        os.chdir(tmp_path / "d" / "final")
        with pytest.raises(ResumeRefused, match="the current directory"):
            move_aside(tmp_path / "d", tmp_path / "d" / "state")
    finally:
        os.chdir(ROOT)
    assert (tmp_path / "d" / "final").is_dir()


def _metrics_to(path, last):
    (path / "metrics.jsonl").write_text("".join(json.dumps({"training_step": s}) + "\n"
                                                for s in range(last + 1)))


def _final(path, written_ns):
    (path / "final").mkdir(exist_ok=True)
    (path / "final" / "rlvr_checkpoint.json").write_text('{"step": "final"}')
    os.utime(path / "final" / "rlvr_checkpoint.json", ns=(written_ns, written_ns))


def test_a_finished_run_whose_last_state_is_older_than_its_last_step_is_finished(tmp_path):
    """5 steps, a state every 2: the last state is of step 4. The rerun resumed it, trained
    step 5 again and rewrote final/, where the docs promise "finished" and nothing trained."""
    from rlvr.checkpoint.resume import plan_resume
    from rlvr.run.errors import RunFinished

    save_state(_state(4), tmp_path / "state")
    _metrics_to(tmp_path, 5)
    logged = (tmp_path / "metrics.jsonl").stat().st_mtime_ns
    assert _plan(tmp_path, steps=5).step == 4  # no final model: killed before it, resumed
    _final(tmp_path, logged + 10**9)  # written after the last step was logged
    with pytest.raises(RunFinished, match="finished: its metrics reach step 5 of 5 and its final"):
        _plan(tmp_path, steps=5)
    assert _plan(tmp_path, steps=6).step == 4  # more steps asked: it continues
    # A final model older than the metrics is an earlier, shorter run's (a longer one died
    # writing its own): resumed, so the final model gets written, not called finished.
    _final(tmp_path, logged - 10**9)
    assert _plan(tmp_path, steps=5).step == 4
    (tmp_path / "final" / "rlvr_checkpoint.json").unlink()
    os.rmdir(tmp_path / "final")
    with pytest.raises(RunFinished, match="its metrics reach step 5 of 5. To train"):
        plan_resume(tmp_path, tmp_path / "state", True, 5, saves_final=False)
    _metrics_to(tmp_path, 4)
    assert plan_resume(tmp_path, tmp_path / "state", True, 5, saves_final=False).step == 4


def test_rlvr_train_refuses_unusable_states_in_one_line_before_loading_the_model(tmp_path,
                                                                               capsys):
    from rlvr.cli import main

    save_state(_state(2), tmp_path / "run" / "state")
    (list_states(tmp_path / "run" / "state")[-1] / MANIFEST).write_text("[]")
    (tmp_path / "run" / "config.yaml").write_text("# earlier\n")
    code = main(["train", "model.name_or_path=tiny-llama", "rollout.engine=transformers",
                 "data.max_prompt_length=128", "algorithm.pack_length=256",
                 f"experiment.output_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2 and "no training state in" in err and "step_000002" in err, err
    assert "Traceback" not in err
    assert (tmp_path / "run" / "config.yaml").read_text() == "# earlier\n"
    (tmp_path / "run" / "final").mkdir()
    for path in list_states(tmp_path / "run" / "state"):
        os.rename(path, tmp_path / path.name)
    assert main(["train", "model.name_or_path=tiny-llama", "rollout.engine=transformers",
                 "data.max_prompt_length=128", "algorithm.pack_length=256",
                 f"experiment.output_dir={tmp_path / 'run'}"]) == 0
    assert "is finished" in capsys.readouterr().out
