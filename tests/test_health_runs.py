"""The health gates wired into real runs (`rlvr.run.stopping.check_health`): an engine whose
weights differ from the learner's stops the run with exit 9, its state saved, naming the
signal and the causes; the tiny config's run crosses no gate. The gates' logic on rows made by
hand: tests/test_health.py."""

from __future__ import annotations

import json
import logging

import torch

from rlvr.checkpoint.state import load_latest_state
from rlvr.cli import main
from rlvr.rollout.transformers import engine as transformers_engine

TINY = ["configs/tiny.yaml", "rollout.response_length=8", "algorithm.filter_zero_std_samples=false",
        "logging.progress_bar=false", "rewards.num_workers=0"]


def _perturb(model: torch.nn.Module) -> None:
    """The engine's weights moved off the learner's, as a stale or wrong weight sync leaves
    them (seeded: the same noise every run)."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * PERTURBATION)


PERTURBATION = 0.5


def _perturbed_engine(monkeypatch) -> None:
    engine = transformers_engine.TransformersEngine
    init, update = engine.__init__, engine.update_weights

    def perturbed_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _perturb(self.model)

    def perturbed_update(self, *args, **kwargs):
        update(self, *args, **kwargs)
        _perturb(self.model)

    monkeypatch.setattr(engine, "__init__", perturbed_init)
    monkeypatch.setattr(engine, "update_weights", perturbed_update)


def test_an_engine_off_the_learners_weights_stops_the_run_with_exit_9(tmp_path, monkeypatch,
                                                                       capsys):
    out = tmp_path / "run"
    _perturbed_engine(monkeypatch)
    code = main(["train", *TINY, "experiment.total_episodes=96", "eval.local_eval_every=0",
                 "eval.eval_at_start=false", "checkpoint.checkpoint_state_freq=0",
                 f"experiment.output_dir={out}"])
    err = capsys.readouterr().err
    assert code == 9, err
    assert "step 2: sampler/trainer mismatch" in err
    assert "in 2 updates in a row" in err and "health gate 'mismatch'" in err
    for cause in ("chat template or tokenizer", "stale or missing", "dtype drift"):
        assert cause in err
    assert load_latest_state(out / "state").step == 2  # saved, though no state was due
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["debug/engine_vs_local_logprob_diff_mean"] > 0.5 for r in rows[1:])


def test_the_tiny_configs_run_crosses_no_gate(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="rlvr.run.stopping"):
        code = main(["train", "configs/tiny.yaml", "logging.progress_bar=false",
                     "rewards.num_workers=0", "experiment.total_episodes=64",
                     f"experiment.output_dir={tmp_path / 'run'}"])
    assert code == 0
    assert not [r for r in caplog.records if "health" in r.getMessage()]
    rows = [json.loads(line) for line in
            (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    diffs = [r["debug/engine_vs_local_logprob_diff_mean"] for r in rows
             if "debug/engine_vs_local_logprob_diff_mean" in r]
    assert diffs and max(diffs) < 0.01  # the gate read an agreeing engine


def test_a_reward_that_pays_what_held_out_does_not_warns_at_the_eval(tmp_path, monkeypatch,
                                                                      caplog):
    """A verifier whose pay grows with every sample it scores and never reaches full marks:
    the training reward climbs while held-out pass@1 stays 0, which the third eval sees."""
    from tests.test_run_faults import _verifier_rows

    data = _verifier_rows(tmp_path, monkeypatch, "health_rising_pay",
                          "calls = [0]\n"
                          "def score(completion, ground_truth):\n"
                          "    calls[0] += 1\n"
                          "    return min(0.9, 0.005 * calls[0])\n")
    with caplog.at_level(logging.WARNING, logger="rlvr.run.stopping"):
        code = main(["train", *TINY, "experiment.total_episodes=64", f"data.train=[{{name: {data}}}]",
                     "rewards.custom_verifiers=[health_rising_pay:score]",
                     "rewards.exploit_canary=false", "data.eval_holdout=4",
                     "eval.local_eval_every=1", f"experiment.output_dir={tmp_path / 'run'}"])
    assert code == 0
    warned = [r.getMessage() for r in caplog.records if "health: reward hacking?" in r.getMessage()]
    assert warned and warned[0].startswith("step 3: health: reward hacking? over the last 3 "
                                           "evals the training reward rose by")
    assert "while held-out eval/pass_at_1 stayed flat (0 -> 0" in warned[0]
