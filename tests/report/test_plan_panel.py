"""The report's plan table (`rlvr.report.plan_panel`): a run's plan.json beside what it
logged, and a plan.json that is not a plan."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from rlvr.plan.predict import predict
from rlvr.plan.records import PLAN_FILE, dumps, plan_record
from rlvr.report import load_run, render_page
from rlvr.report import plots
from rlvr.report.plan_panel import MAX_PLAN_BYTES, comparison, read_plan
from tests.plan.test_predict import CAL, SHAPE
from tests.report.conftest import step_metrics

GIB = 1024 ** 3


def _record() -> dict:
    return json.loads(dumps(plan_record(CAL, SHAPE, predict(CAL, SHAPE), {"created": "now"})))


def test_measured_figures_are_means_of_the_steps_after_the_first():
    rows = [step_metrics(s) for s in range(5)]
    rows[1]["time/step"] = 100.0  # the first step's warm-up: left out
    for s, row in enumerate(rows):
        row["memory/peak_rss_gb"] = 1.0 + 0.1 * s
    table = comparison(_record(), pd.DataFrame(rows))
    assert table.attrs["steps"] == 3
    # time/generation 5 s includes scoring's 1 s: generation alone is 4 s; predicted 5 s.
    assert table.loc["generation (s)", "measured"] == 4.0
    assert table.loc["generation (s)", "error"] == pytest.approx(5.0 / 4.0 - 1)
    assert table.loc["learner update (s)", "measured"] == 3.0
    assert table.loc["step (s)", "measured"] == pytest.approx(8.2)
    # The run's peak (over every step) against the predicted 1430 bytes.
    assert table.loc["peak memory (GiB)", "measured"] == pytest.approx(1.4)
    assert table.loc["peak memory (GiB)", "predicted"] == pytest.approx(1430 / GIB)


def test_steps_without_an_update_count_zero_training():
    rows = [step_metrics(s) for s in range(4)]
    for row in rows[2:]:
        del row["time/training"], row["time/weight_sync"]
    table = comparison(_record(), pd.DataFrame(rows))
    assert table.loc["learner update (s)", "measured"] == 0.0  # steps 2 and 3 trained nothing
    assert math.isnan(table.loc["peak memory (GiB)", "measured"])  # no memory logged


@pytest.mark.parametrize("text", ["[1, 2]", '{"format": 99}', "not json",
                                  '{"format": 1, "prediction": {"seconds": {}}}'])
def test_a_file_that_is_not_a_plan_is_a_warning(tmp_path, text):
    (tmp_path / PLAN_FILE).write_text(text, encoding="utf-8")
    warnings: list[str] = []
    assert read_plan(tmp_path, warnings) is None
    assert len(warnings) == 1 and PLAN_FILE in warnings[0]


def test_an_oversized_plan_is_not_read(tmp_path):
    (tmp_path / PLAN_FILE).write_text(" " * (MAX_PLAN_BYTES + 1), encoding="utf-8")
    warnings: list[str] = []
    assert read_plan(tmp_path, warnings) is None and "larger than" in warnings[0]


def test_the_page_shows_the_table_when_the_run_has_a_plan(fake_run, monkeypatch):
    monkeypatch.setattr(plots, "figure_png", lambda fig: b"not drawn")
    assert "Plan against measured" not in render_page([load_run(fake_run)])
    record = _record()
    record["created"] = "<script>x</script>"  # text from a file: escaped
    (fake_run / PLAN_FILE).write_text(json.dumps(record), encoding="utf-8")
    page = render_page([load_run(fake_run)])
    assert "Plan against measured" in page and "peak memory (GiB)" in page
    assert "&lt;script&gt;" in page and "<script>x" not in page
