"""The loop's bookkeeping around steps: empty batches, policy versions and staleness, the
schedule, signals during a spell of empty batches, and the defaults that follow from the
config (reference loading, rho correction). The tiny random model's own rewards depend on the
RNG stream (CPU or CUDA sampling); a test that needs empty batches scores every sample 0
(`NO_REWARD`), one that needs the policy to move scores samples apart (`REMAP`)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from rlvr.config import load_config
from rlvr.run.loop import train
from tests.certain_reward import NO_REWARD, REMAP

TINY = "configs/tiny.yaml"


def _cfg(tmp_path, *overrides):
    return load_config(TINY, [f"experiment.output_dir={tmp_path}", "logging.progress_bar=false",
                              "eval.local_eval_every=0", "eval.eval_at_start=false",
                              "checkpoint.save_final=false", "checkpoint.save_freq=0",
                              *overrides])


def _rows(out):
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()][1:]


@pytest.mark.timeout(180)
def test_async_run_with_empty_batches_ends_and_is_never_stale(tmp_path):
    # The audit's reproduction: before, the version was taken as step - 1 while the engine's
    # moved only on updates, so after two empty steps every batch looked stale and the loop
    # redrew forever (still running after 12 minutes).
    run = train(_cfg(tmp_path, "rollout.async_steps=1", "experiment.total_episodes=96", NO_REWARD))
    rows = _rows(tmp_path)
    assert [r["training_step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert sum(r.get("optim/skipped_empty_batch", 0) for r in rows) >= 3
    assert all(r["async/stale_results_dropped"] == 0 for r in rows)
    assert all(r["async/num_steps_off_policy"] <= 1 for r in rows)
    updates = sum("optim/lr" in r for r in rows)
    assert run.policy_version == updates


def test_synchronous_runs_are_never_off_policy(tmp_path):
    # Before: a synchronous step after an empty one read num_steps_off_policy 1.0.
    train(_cfg(tmp_path, "experiment.total_episodes=96", NO_REWARD))
    rows = _rows(tmp_path)
    assert sum(r.get("optim/skipped_empty_batch", 0) for r in rows) >= 1
    assert all(r["async/num_steps_off_policy"] == 0.0 for r in rows)


def test_the_schedule_counts_steps_with_empty_batches(tmp_path):
    # Linear decay over 6 steps, most of them empty: the schedule still ends at step 6.
    run = train(_cfg(tmp_path, "experiment.total_episodes=96", NO_REWARD))
    assert run.learner.scheduler.last_epoch == 6
    assert run.learner.scheduler.get_last_lr()[0] == pytest.approx(0.0)
    for r in _rows(tmp_path):
        if "optim/lr" in r:  # the rate the update used: the schedule's at that step
            assert r["optim/lr"] == pytest.approx(1e-3 * (1 - (r["training_step"] - 1) / 6))


def test_reference_loaded_at_beta_zero_logs_kl(tmp_path):
    # load_ref_policy=true with beta 0 was accepted and ignored; now it loads the reference and
    # logs the KL estimates without penalising (open-instruct).
    # REMAP: groups with spread, so the policy moves whatever the RNG stream (CPU or CUDA).
    run = train(_cfg(tmp_path, "algorithm.beta=0.0", "algorithm.load_ref_policy=true",
                     "algorithm.filter_zero_std_samples=false", REMAP))
    assert run.learner.reference is not None
    rows = _rows(tmp_path)
    assert all("objective/kl2_avg" in r for r in rows) and all(r["loss/kl_avg"] == 0 for r in rows)
    assert rows[-1]["objective/kl0_avg"] != 0.0  # the policy moved away from the reference
    # the default: no reference without a penalty
    assert not _cfg(tmp_path, "algorithm.beta=0.0").loads_reference


def test_async_runs_correct_off_policy_samples_by_default(tmp_path):
    cfg = _cfg(tmp_path, "rollout.async_steps=1", "algorithm.filter_zero_std_samples=false")
    assert cfg.uses_rho_correction
    train(cfg)
    assert all("val/rho_mean" in r for r in _rows(tmp_path))
    assert not _cfg(tmp_path, "rollout.async_steps=0").uses_rho_correction


def test_policy_metrics_average_over_the_tokens_they_summed(tmp_path):
    # Masked IS with bounds so tight that engine/learner float noise drops many tokens: the
    # ratio of the kept tokens is exactly 1 (one epoch, on-policy). Before, the sums over kept
    # tokens were divided by every response token: val/ratio read the kept fraction (token
    # mode) or 0 (sequence mode).
    for mode in ("token", "sequence"):
        out = tmp_path / mode
        train(_cfg(out, "algorithm.filter_zero_std_samples=false",
                   "algorithm.rho_correction=true", f"algorithm.rho_mask={mode}",
                   "algorithm.rho_clamp_lower=0.9999999", "algorithm.rho_clamp_upper=1.0000001"))
        for r in _rows(out):
            if r["val/rho_masked_frac"] < 1.0:
                assert r["val/ratio"] == pytest.approx(1.0, abs=1e-6), (mode, r)


@pytest.mark.timeout(240)
def test_sigterm_during_a_spell_of_empty_batches_stops_within_a_step_with_state(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "rlvr.cli", "train", TINY, f"experiment.output_dir={out}",
           "rollout.async_steps=1", "experiment.total_episodes=800", "eval.local_eval_every=0",
           "logging.progress_bar=false", "checkpoint.checkpoint_state_freq=1000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "RLVR_TEST_THREADS": "1"})
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 150
    while time.time() < deadline and (not metrics.exists()
                                      or len(metrics.read_text().splitlines()) < 4):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    sent = time.time()
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()  # a run that ignores the signal must not outlive the test
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert time.time() - sent < 30  # one tiny step is about a second
    assert "stopped by SIGTERM" in err
    last = json.loads(metrics.read_text().splitlines()[-1])["training_step"]
    states = sorted(p.name for p in (out / "state").iterdir())
    assert states and states[-1] in (f"step_{last:06d}", f"step_{last - 1:06d}")


def test_a_colocated_engine_sleeps_through_the_update_and_wakes_before_the_sync(tmp_path,
                                                                                monkeypatch):
    """rollout.colocate on one device: the engine gives its memory back for the update
    (vLLM sleep mode) and is awake again when the new weights arrive. A recording engine
    stands in for vLLM (whose sleep mode needs CUDA): the order of calls is the trainer's."""
    from rlvr.run.build import build_run
    from rlvr.run.loop import one_training_step

    run = build_run(_cfg(tmp_path, "algorithm.filter_zero_std_samples=false"))
    run.cfg.rollout.colocate = True  # past validation and build: only vLLM on CUDA sleeps
    events = []
    engine, learner = run.engine, run.learner

    class Recording:
        def sleep(self):
            events.append("sleep")

        def wake_up(self):
            events.append("wake_up")

        def update_weights(self, weights, version):
            events.append("update_weights")
            engine.update_weights(weights, version)

    update = learner.update_mini_batches
    learner.update_mini_batches = lambda *a, **k: (events.append("learner.update"),
                                                   update(*a, **k))[1]
    run.engine = Recording()
    import rlvr.run.loop

    # The learner's cached blocks go back to the driver before vLLM's own pool wakes up.
    release = rlvr.run.loop.release_cached_memory
    monkeypatch.setattr(rlvr.run.loop, "release_cached_memory", lambda device_type: (
        events.append(f"release {device_type}"), release(device_type)))
    one_training_step(run, 1)
    assert events == ["sleep", "learner.update", f"release {run.devices.type}", "wake_up",
                      "update_weights"]


def test_a_signal_after_a_skipped_update_does_not_claim_that_steps_state_was_saved(
        tmp_path, monkeypatch):
    """A step whose update was skipped saves no state; the stop message said it had."""
    from types import SimpleNamespace

    from rlvr.run.errors import TrainingInterrupted
    from rlvr.run.interrupts import StopOnSignal
    from rlvr.run.stopping import Streaks
    from rlvr.run.loop import _finish_step

    saved = []
    monkeypatch.setattr("rlvr.run.loop.save_state", lambda *a, **k: saved.append(a))
    run = SimpleNamespace(cfg=_cfg(tmp_path, "experiment.total_episodes=64"), started=0.0,
                          logger=SimpleNamespace(log=lambda step, metrics: None), history=[],
                          failed_verification_steps=0, state_dir=tmp_path / "state",
                          engine=None)
    stop = StopOnSignal()
    stop.signum = signal.SIGTERM  # as its handler sets it
    with pytest.raises(TrainingInterrupted, match="after step 2; its update was skipped.*no "
                                                  "state of it was saved") as stopped:
        _finish_step(run, stop, 2, {"optim/skipped_steps": 1.0}, Streaks())
    assert not saved and stopped.value.exit_code == 128 + signal.SIGTERM


@pytest.mark.timeout(180)
def test_the_polyak_reference_update_runs_on_schedule_when_the_batch_is_empty(tmp_path,
                                                                           monkeypatch):
    """The reference's Polyak step (`ref_policy_update_freq`) sat inside the branch that had a
    batch: a scheduled step whose groups were all filtered skipped it, so with most steps empty
    the reference hardly moved. open-instruct (`grpo_fast`) steps the reference every
    `ref_policy_update_freq` training steps; every step counts here, empty ones too."""
    from rlvr.learner.learner import Learner

    calls = []
    monkeypatch.setattr(Learner, "update_reference",
                        lambda self, alpha: calls.append(alpha))
    train(_cfg(tmp_path, "experiment.total_episodes=96", NO_REWARD, "algorithm.beta=0.01",
               "algorithm.ref_policy_update_freq=2", "algorithm.alpha=0.5"))
    rows = _rows(tmp_path)
    assert all(r.get("optim/skipped_empty_batch") == 1.0 for r in rows)  # 6 empty steps
    assert calls == [0.5, 0.5, 0.5]  # steps 2, 4 and 6
