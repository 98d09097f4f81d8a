"""Reading a run directory: finished, in progress, restarted, and what is broken in it."""

import json
import logging
import shutil

import pandas as pd
import pytest

from rlvr.cli import main
from rlvr.report.run_data import ReportError, load_run, read_metrics, wall_clock
from tests.report.conftest import make_run, step_distributions, step_metrics


def test_a_finished_run(fake_run):
    run = load_run(fake_run)
    assert run.name == "run_a" and run.last_step == 4 and run.expected_steps == 4
    assert run.status == "finished, 4 steps" and not run.warnings
    assert run.metrics["training_step"].tolist() == [0, 1, 2, 3, 4]
    # Completions come from the eval traces when there are any, all 3 eval points here.
    assert run.traces_kind == "eval" and len(run.traces) == 3 * 6
    assert set(run.traces["eval_set"]) == {"addition"}


def test_only_the_trace_files_of_the_points_shown_are_read(fake_run):
    (fake_run / "traces" / "eval" / "step_000002.parquet").write_bytes(b"not parquet")
    run = load_run(fake_run, max_points=2)  # steps 0 and 4: the broken file is never opened
    assert sorted(run.traces["step"].unique()) == [0, 4] and not run.warnings
    shutil.rmtree(fake_run / "traces" / "eval")
    run = load_run(fake_run)  # no eval traces: training ones
    assert run.traces_kind == "training" and len(run.traces) == 4 * 8
    assert set(run.traces["kind"]) == {"train"}


def test_a_run_in_progress_skips_the_torn_last_line(tmp_path):
    path = make_run(tmp_path, steps=2)
    with open(path / "metrics.jsonl", "a") as f:
        f.write(json.dumps(step_metrics(3))[:25])  # the run is writing step 3
    run = load_run(path)
    assert run.last_step == 2 and run.torn_last_line
    assert run.status == "in progress (or stopped), 2 of 4 steps so far"


def test_a_half_written_trace_file_is_skipped_with_a_warning_naming_it(fake_run, caplog):
    broken = fake_run / "traces" / "eval" / "step_000002.parquet"
    whole = broken.read_bytes()
    broken.write_bytes(whole[: len(whole) // 2])
    with caplog.at_level(logging.WARNING):
        run = load_run(fake_run)
    assert sorted(run.traces["step"].unique()) == [0, 4]
    assert any(f"{broken}: skipped, not a whole Parquet file" in w for w in run.warnings)
    assert str(broken) in caplog.text


def test_a_directory_without_metrics_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="no metrics.jsonl"):
        load_run(tmp_path / "empty")
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "no metrics.jsonl" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    with pytest.raises(ReportError, match="no step logged yet"):
        load_run(tmp_path / "empty")


def test_a_bad_line_is_skipped_naming_its_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"training_step": 0}\nnot json\n{"training_step": 1, "x": null}\n')
    warnings = []
    rows, torn = read_metrics(path, warnings)
    assert [r["training_step"] for r in rows] == [0, 1] and not torn
    assert pd.isna(rows[1]["x"])
    assert warnings and "line 2" in warnings[0]


def test_a_restart_in_the_same_directory_replaces_the_steps_it_redoes(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"training_step": s, "v": "old"}) + "\n"
                            for s in (0, 1, 2, 3)) +
                    "".join(json.dumps({"training_step": s, "v": "new"}) + "\n" for s in (2, 3)))
    rows, _ = read_metrics(path, [])
    assert [(r["training_step"], r["v"]) for r in rows] == [
        (0, "old"), (1, "old"), (2, "new"), (3, "new")]


def test_wall_clock_continues_across_a_resume():
    # Resumed after step 2: the new process's elapsed time starts from 0 again.
    elapsed = pd.Series([1.0, 10.0, 20.0, 5.0, float("nan"), 15.0])
    assert wall_clock(elapsed, 6) == [1.0, 10.0, 20.0, 25.0, 25.0, 35.0]
    assert wall_clock(pd.Series(dtype=float), 2) == [0.0, 0.0]


def test_the_step_distributions_are_read_one_row_per_step_and_name(fake_run):
    frame = load_run(fake_run).distributions
    assert sorted(set(frame["name"])) == ["advantage", "learner_engine_ratio",
                                          "response_length", "reward"]
    reward = frame[frame["name"] == "reward"].set_index("training_step")
    assert reward.index.tolist() == [1, 2, 3, 4]
    # step 4's rewards are 0..4: median 2, p5 at 0.2 (linear interpolation), 5 of them
    assert (reward.loc[4, "p50"], reward.loc[4, "p5"], reward.loc[4, "count"]) == (2.0, 0.2, 5)


def test_a_run_without_distributions_still_reads_and_a_bad_entry_is_a_warning(tmp_path):
    older = load_run(make_run(tmp_path, name="older", distributions=False))
    assert older.distributions is None and not older.warnings
    run = make_run(tmp_path)
    path = run / "distributions.jsonl"
    lines = path.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["reward"] = {"count": "many"}
    path.write_text("\n".join([lines[0], json.dumps(bad), *lines[2:]]) + "\n"
                    + json.dumps(step_distributions(2)))  # a restart, torn mid-line
    loaded = load_run(run)
    reward = loaded.distributions[loaded.distributions["name"] == "reward"]
    assert reward["training_step"].tolist() == [1, 3, 4]  # step 2's reward skipped
    assert any("step 2: 'reward' skipped, not a distribution summary" in w
               for w in loaded.warnings)
