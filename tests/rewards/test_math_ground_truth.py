"""What `math` accepts as a ground truth: one that spans lines is read whole, and an empty one
or a JSON list of answers is refused when the data loads, not on every score."""

import json

import pytest

from rlvr.config import DataSourceConfig
from rlvr.data.errors import DataError
from rlvr.data.readers import load_file_source
from rlvr.rewards import get_verifier
from rlvr.rewards.registry import ground_truth_check

math = get_verifier("math")
# MATH train row math/7301's gold: its box held line breaks.
MATRIX_GOLD = "\n\\begin{pmatrix} 0 & 3 \\\\ 0 & -1 \\end{pmatrix}\n"


def test_a_gold_with_line_breaks_is_read_whole():
    assert math(r"\boxed{\begin{pmatrix} 0 & 3 \\ 0 & -1 \end{pmatrix}}", MATRIX_GOLD) == 1.0
    assert math(r"\boxed{-1}", MATRIX_GOLD) == 0.0  # was 1.0: the gold read as its last number


def test_a_gold_with_a_line_break_inside_is_read_whole():
    gold = "\\begin{pmatrix} 1 \\\\\n 2 \\end{pmatrix}"
    assert math(r"\boxed{\begin{pmatrix} 1 \\ 2 \end{pmatrix}}", gold) == 1.0
    assert math(r"\boxed{2}", gold) == 0.0


@pytest.mark.parametrize("verifier", ["math", "strict_math"])
@pytest.mark.parametrize("truth", ["", " \n ", '["3", "4"]', "[1, 2, 3]", '[["1"]]', "[3]"])
def test_an_empty_or_list_ground_truth_is_refused(verifier, truth):
    with pytest.raises(ValueError, match="empty|JSON list"):
        ground_truth_check(verifier)(truth)
    with pytest.raises(ValueError, match="empty|JSON list"):  # and when scored regardless
        get_verifier(verifier)(r"\boxed{3}", truth)


@pytest.mark.parametrize("truth, answer", [("[0, 25]", r"\boxed{[0, 25]}"),
                                           ("[-2,4]", r"\boxed{[-2,4]}"),
                                           ("[0, 1)", r"\boxed{[0, 1)}"),
                                           ("3, 4", r"\boxed{3, 4}")])
def test_an_interval_or_a_latex_set_is_no_list(truth, answer):
    assert ground_truth_check("math")(truth) == truth  # MATH writes closed intervals so
    assert math(answer, truth) == 1.0


def test_a_file_row_with_an_empty_math_ground_truth_fails_at_load(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "q", "ground_truth": "", "dataset": "math"}) + "\n")
    with pytest.raises(DataError, match="empty"):
        load_file_source(DataSourceConfig(name=str(path)), "error")
