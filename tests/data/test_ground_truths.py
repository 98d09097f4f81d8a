"""A file's ground truth reaches the verifier as it was meant: numbers in plain digits, lists
only for the verifiers that take lists, and one number for `gsm8k` (refused at load if not)."""

import json

import pytest

from rlvr.config import DataSourceConfig
from rlvr.data import DataError
from rlvr.data.readers import load_file_source
from rlvr.rewards import get_verifier


def _load(tmp_path, value, verifier):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "q", "ground_truth": value, "dataset": verifier}) + "\n")
    (example,), _ = load_file_source(DataSourceConfig(name=str(path)), "error")
    return example


@pytest.mark.parametrize("value, stored", [
    (1e16, "10000000000000000"), (5e-05, "0.00005"), (1e-07, "0.0000001"),
    (0.1, "0.1"),  # the shortest text that reads back as the float, not its binary expansion
    (3.0, "3.0"), (-2.5e-3, "-0.0025"), (12345678901234567890, "12345678901234567890"),
])
def test_a_number_is_stored_in_plain_digits(tmp_path, value, stored):
    assert _load(tmp_path, value, "gsm8k").ground_truth == stored


@pytest.mark.parametrize("value, right, misread", [(1e16, "10000000000000000", "16"),
                                                   (5e-05, "0.00005", "5")])
def test_gsm8k_grades_a_float_ground_truth_by_its_value(tmp_path, value, right, misread):
    example = _load(tmp_path, value, "gsm8k")
    gsm8k = get_verifier("gsm8k")
    assert gsm8k(f"The answer is {right}.", example.ground_truth) == 1.0
    assert gsm8k(f"The answer is {misread}.", example.ground_truth) == 0.0  # old: 1.0


def test_math_does_not_read_a_large_float_as_eulers_e(tmp_path):
    example = _load(tmp_path, 1e16, "math")
    assert get_verifier("math")(r"\boxed{e+16}", example.ground_truth) == 0.0  # old: 1.0
    assert get_verifier("math")(r"\boxed{10000000000000000}", example.ground_truth) == 1.0


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_a_non_finite_number_is_refused(tmp_path, value):
    path = tmp_path / "rows.jsonl"
    path.write_text(f'{{"prompt": "q", "ground_truth": {value}, "dataset": "math"}}\n')
    with pytest.raises(DataError, match="line 1 field 'ground_truth': .* not a finite number"):
        load_file_source(DataSourceConfig(name=str(path)), "error")


@pytest.mark.parametrize("truth", ["1/2", "1 000", "1e+16", "3 or 4"])
def test_a_gsm8k_ground_truth_of_several_numbers_is_refused_at_load(tmp_path, truth):
    with pytest.raises(DataError, match="line 1 field 'ground_truth': the 'gsm8k' verifier "
                                        "cannot use it: .* holds 2 numbers"):
        _load(tmp_path, truth, "gsm8k")


@pytest.mark.parametrize("value, verifier", [(["3", "4"], "gsm8k"), (["3", "4"], "math"),
                                             ([18, "18.00"], "last_number"),
                                             (["Paris", "paris, france"], "string_matcher"),
                                             (["50"], "max_length")])
def test_a_list_is_refused_for_a_verifier_that_reads_one_answer(tmp_path, value, verifier):
    with pytest.raises(DataError, match=f"line 1 field 'ground_truth': a list, but the "
                                        f"'{verifier}' verifier reads one answer"):
        _load(tmp_path, value, verifier)


def test_a_list_is_kept_for_the_verifiers_that_take_one(tmp_path):
    labels = _load(tmp_path, ["Paris", "paris, france"], "string_f1")
    assert json.loads(labels.ground_truth) == ["Paris", "paris, france"]
    assert get_verifier("string_f1")("Paris", labels.ground_truth) == 1.0
    constraints = [{"id": "punctuation:no_comma", "kwargs": {}}]
    assert json.loads(_load(tmp_path, constraints, "ifeval").ground_truth) == constraints
    assert json.loads(_load(tmp_path, ["assert f() == 1"], "code").ground_truth) == [
        "assert f() == 1"]


def test_a_list_is_kept_for_a_verifier_written_outside_rlvr(tmp_path):
    # Its own code says what the list means; rlvr cannot know it reads one answer.
    example = _load(tmp_path, ["a", "b"], "json:dumps")
    assert json.loads(example.ground_truth) == ["a", "b"]
