"""examples/custom_task: a JSONL task of your own, its verifier with exploit cases, a config; the
run the example's config describes trains, and its canary tries the exploit cases first."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from examples.custom_task.reverse import NAME, reversed_word
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.rewards.canary import cases_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "custom_task"


def test_every_row_asks_for_a_word_reversed_and_its_ground_truth_is_paid():
    rows = [json.loads(line) for line in (EXAMPLE / "reverse.jsonl").open()]
    assert len(rows) == 40
    for row in rows:
        word = re.search(r"the word '(\w+)'", row["prompt"]).group(1)
        assert row["ground_truth"] == word[::-1]
        assert reversed_word(row["ground_truth"], row["ground_truth"]) == 1.0
    # What a model wraps one word in is not held against it.
    for answer in ["tenalp", "Tenalp.", '"tenalp"', "**tenalp**", "  tenalp\n"]:
        assert reversed_word(answer, "tenalp") == 1.0, answer


def test_the_exploit_cases_pay_nothing_here_and_catch_a_verifier_that_scans():
    cases = cases_for(NAME)
    assert len(cases) == 7
    assert [c.name for c in cases if reversed_word(c.completion, c.ground_truth) > 0] == []
    # The verifier one writes first, the ground truth anywhere in the answer, pays hedges.
    def scans(completion, truth):
        return float(truth in completion)
    paid = [c.name for c in cases if scans(c.completion, c.ground_truth) > c.max_score]
    assert "hedge: the answer and the word" in paid and len(paid) >= 3


def test_the_example_config_trains_with_the_canary_first(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(ROOT)  # the config names its data and verifier from the repository root
    config = "examples/custom_task/reverse.yaml"
    cfg = load_config(config)
    assert cfg.data.train[0].verifier == NAME and cfg.rewards.custom_verifiers == [NAME]
    caplog.set_level(logging.INFO)
    assert main(["train", config, f"experiment.output_dir={tmp_path}", "rewards.num_workers=0",
                 "experiment.total_episodes=32", "logging.progress_bar=false"]) == 0
    assert f"exploit canary: 7 cases, none paid ({NAME})" in caplog.text
    steps = [json.loads(line)["training_step"] for line in (tmp_path / "metrics.jsonl").open()]
    assert steps == [0, 1, 2]


@pytest.mark.parametrize("answer", ["tenalp planet", "", "netalp"])
def test_a_wrong_or_hedged_answer_scores_zero(answer):
    assert reversed_word(answer, "tenalp") == 0.0
