"""The health gates (`rlvr.run.health`) on metric rows made by hand: each fires on a constructed
run showing its failure, names its signal, value, bound and causes, and stays silent on a
healthy run and at its bound. The wired gates on real runs: tests/test_health_runs.py."""

from __future__ import annotations

import pytest

from rlvr.config.schema import HealthConfig
from rlvr.run.health import (DIFF, KL, clip_fraction, entropy_collapse, length_growth, mismatch,
                         read_gates, reward_vs_heldout, shaping_carries_reward, verifier_errors)

H = HealthConfig()


def _healthy(step: int) -> dict[str, float]:
    """A step of a run learning as it should: reward and held-out rising together, lengths
    steady, entropy and clipping moderate, engine and learner agreeing to bf16 noise."""
    return {"training_step": step, "objective/scores": 0.2 + 0.02 * step,
            "objective/verifiable_reward": 0.2 + 0.02 * step, "val/sequence_lengths": 200.0,
            DIFF: 0.01, KL: 1e-4, "policy/entropy_avg": 0.8, "policy/clipfrac_avg": 0.02,
            "batch/prompts_sampled": 8, "reward/verifier_errors": 0, "reward/verifier_timeouts": 0,
            **({"eval/pass_at_1": 0.2 + 0.02 * step} if step % 5 == 0 else {})}


def test_every_gate_is_silent_on_a_healthy_run():
    rows = [_healthy(s) for s in range(1, 41)]
    for n in range(1, len(rows) + 1):
        assert read_gates(H, rows[:n], 8) == []


def test_mismatch_warns_then_stops_after_its_streak():
    rows = [_healthy(1), {**_healthy(2), DIFF: 0.2, KL: 0.01}]
    warn = mismatch(H, rows, 8)
    assert warn is not None and not warn.stop and warn.signal == DIFF and warn.value == 0.2
    assert "> health.mismatch_warn_logprob_diff=0.1" in warn.message
    rows.append({**_healthy(3), DIFF: 0.9, KL: 0.4})
    first = mismatch(H, rows, 8)
    assert first is not None and not first.stop  # one step past the bound: not yet a fault
    rows.append({"training_step": 4})  # a step without update compares nothing
    assert mismatch(H, rows, 8) is None
    rows.append({**_healthy(5), DIFF: 0.05, KL: 0.3})  # past the KL stop bound only
    stop = mismatch(H, rows, 8)
    assert stop is not None and stop.stop and stop.signal == KL and stop.bound == 0.25
    for cause in ("chat template or tokenizer", "weight sync that is stale or missing",
                  "dtype drift"):
        assert cause in stop.message
    assert "in 2 updates in a row" in stop.message


def test_mismatch_is_silent_at_its_bounds():
    rows = [{**_healthy(1), DIFF: H.mismatch_warn_logprob_diff, KL: H.mismatch_warn_kl}]
    assert mismatch(H, rows, 8) is None


def _evals(rewards, heldout, steps_between=4):
    rows, step = [], 0
    for reward, held in zip(rewards, heldout):
        for _ in range(steps_between):
            step += 1
            rows.append({"training_step": step, "objective/scores": reward})
        rows[-1]["eval/pass_at_1"] = held
    return rows


def test_reward_rising_while_heldout_falls_warns_at_the_eval():
    rows = _evals([0.3, 0.45, 0.6], [0.4, 0.35, 0.3])
    found = reward_vs_heldout(H, rows, 8)
    assert found is not None and not found.stop
    assert found.value == pytest.approx(0.3)
    assert "held-out eval/pass_at_1 fell (0.4 -> 0.3" in found.message
    assert reward_vs_heldout(H, rows[:-1], 8) is None  # warns at evals only
    assert reward_vs_heldout(H, _evals([0.3, 0.6], [0.4, 0.3]), 8) is None  # 2 of 3 evals
    assert reward_vs_heldout(H, _evals([0.3, 0.45, 0.6], [0.3, 0.4, 0.5]), 8) is None
    flat = reward_vs_heldout(H, _evals([0.3, 0.45, 0.6], [0.4, 0.41, 0.4]), 8)
    assert flat is not None and "stayed flat" in flat.message


def test_responses_growing_while_the_reward_is_flat_warn():
    rows = [{"objective/scores": 0.5, "val/sequence_lengths": 100.0 + 10 * i}
            for i in range(10)]
    found = length_growth(H, rows, 8)
    assert found is not None and found.signal == "val/sequence_lengths"
    assert found.value == pytest.approx(170 / 120 - 1)  # means 120 -> 170: +42%
    assert "responses grew by 42%" in found.message
    paid = [{**r, "objective/scores": 0.1 * i} for i, r in enumerate(rows)]  # length paid off
    assert length_growth(H, paid, 8) is None
    assert length_growth(H, rows[:9], 8) is None  # under a window


def test_a_format_reward_carrying_the_reward_warns():
    # The reward rises 0.2 -> 0.7 by its format part while the verifiers' score stays at 0.2.
    rows = [{"objective/scores": 0.2 + 0.05 * i + (0.0 if i < 5 else 0.1),
             "objective/verifiable_reward": 0.2} for i in range(10)]
    found = shaping_carries_reward(H, rows, 8)
    assert found is not None and "accuracy did not move" in found.message
    learning = [{**r, "objective/verifiable_reward": r["objective/scores"]} for r in rows]
    assert shaping_carries_reward(H, learning, 8) is None


def test_collapse_gates():
    assert entropy_collapse(H, [{"policy/entropy_avg": 0.001}], 8).value == 0.001
    assert entropy_collapse(H, [{"policy/entropy_avg": 0.5}], 8) is None
    clipped = clip_fraction(H, [{"policy/clipfrac_avg": 0.45}], 8)
    assert clipped is not None and "45% of the policy tokens were clipped" in clipped.message
    assert clip_fraction(H, [{"policy/clipfrac_avg": 0.3}], 8) is None
    failing = [{"batch/prompts_sampled": 4, "reward/verifier_errors": 6,
                "reward/verifier_timeouts": 2}]
    found = verifier_errors(H, failing, 8)
    assert found is not None and found.value == pytest.approx(8 / 32)
    assert "25% of the step's 32 samples failed their verifier (6 errors, 2 timeouts" in \
        found.message
    assert verifier_errors(H, [{**failing[0], "reward/verifier_errors": 1,
                                "reward/verifier_timeouts": 0}], 8) is None


def test_disabled_gates_read_nothing():
    rows = [{**_healthy(1), DIFF: 5.0, "policy/entropy_avg": 0.0}] * 3
    assert [f.gate for f in read_gates(H, rows, 8)] == ["mismatch", "entropy_collapse"]
    assert read_gates(HealthConfig(enabled=False), rows, 8) == []
