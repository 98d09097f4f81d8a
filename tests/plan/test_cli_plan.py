"""`rlvr plan` end to end on the tiny config: it calibrates, prints the table (or JSON),
writes plan.json where the run will write, and refuses runs it cannot calibrate in one
process."""

from __future__ import annotations

import json

import pytest

from rlvr.cli import main
from rlvr.plan.predict import predict
from rlvr.plan.records import PLAN_FILE, plan_record
from tests.plan.test_predict import CAL, SHAPE


def test_plan_on_the_tiny_config(tmp_path, capsys):
    out_dir = tmp_path / "run"
    code = main(["plan", "configs/tiny.yaml", f"experiment.output_dir={out_dir}",
                 "--gen-tokens", "4", "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((out_dir / PLAN_FILE).read_text(encoding="utf-8"))
    assert printed == saved
    c, p = saved["calibration"], saved["prediction"]
    assert c["engine"] == "TransformersEngine"  # tiny.yaml's engine, as the run builds it
    assert c["rollout"]["max_tokens"] == 4 and c["rollout"]["num_samples"] == 16
    assert c["learner"]["row_tokens"] == 256  # algorithm.pack_length
    assert c["memory"]["policy_params"] > 0 and c["memory"]["reference_params"] > 0  # beta>0
    assert p["memory"]["peak"] >= c["memory"]["after_build"]
    assert p["seconds"]["step"] > 0 and p["fits"] is True
    assert saved["shape"]["num_steps"] == 3
    # The run directory holds the plan only: a later `rlvr train` starts there as in any
    # empty directory.
    assert sorted(x.name for x in out_dir.iterdir()) == [PLAN_FILE]


def test_the_table_and_no_save(tmp_path, capsys, monkeypatch):
    import rlvr.plan as plan

    record = plan_record(CAL, SHAPE, predict(CAL, SHAPE), {"config": "configs/tiny.yaml"})
    monkeypatch.setattr(plan, "make_plan", lambda cfg, gen_tokens, described="": record)
    out_dir = tmp_path / "run"
    assert main(["plan", "configs/tiny.yaml", f"experiment.output_dir={out_dir}",
                 "--no-save"]) == 0
    text = capsys.readouterr().out
    for line in ("time a step (mean):", "learner update", "optimizer state (AdamW)",
                 "fits the device's memory: yes", "2 of 4 calibration completions were cut"):
        assert line in text
    assert not out_dir.exists()


@pytest.mark.parametrize("override", ["distributed.num_learners_per_node=[2]",
                                      "rollout.engine=remote"])
def test_a_run_across_processes_is_refused(capsys, override):
    assert main(["plan", "configs/tiny.yaml", override]) == 2
    assert "one process" in capsys.readouterr().err
