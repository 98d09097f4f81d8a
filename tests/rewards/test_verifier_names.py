"""Verifier names match in any case, as open-instruct routes on `dataset.lower()`: a row labelled
"MATH" or "GSM8K" is scored by `math` / `gsm8k`, not refused as naming an unknown verifier."""

import json

import pytest

from rlvr.config import DataSourceConfig
from rlvr.data import load_source
from rlvr.rewards import answer_extractor, get_verifier, ground_truth_check, is_known_verifier
from rlvr.rewards.registry import register_verifier, verifier_inputs
from rlvr.rewards.scorer import RewardScorer, ScoreRequest


@pytest.mark.parametrize("label, name", [
    ("MATH", "math"), ("GSM8K", "gsm8k"), ("Gsm8k", "gsm8k"), ("IFEval", "ifeval"),
    ("String_Matcher", "string_matcher"), ("LLM_JUDGE", "llm_judge"),
])
def test_any_case_names_the_registered_verifier(label, name):
    from rlvr.rewards.registry import canonical_name

    assert canonical_name(label) == name
    assert is_known_verifier(label)


def test_lookups_accept_any_case():
    assert get_verifier("GSM8K")("so 72", "72") == 1.0
    assert get_verifier("MATH")("\\boxed{2}", "2") == 1.0
    assert answer_extractor("GSM8K")("so 72") == "72"
    assert ground_truth_check("GSM8K") is ground_truth_check("gsm8k") is not None
    assert verifier_inputs("MATH") == frozenset()


def test_unknown_and_module_names_keep_their_case():
    from rlvr.rewards.registry import canonical_name

    assert canonical_name("no_such_verifier") == "no_such_verifier"
    assert not is_known_verifier("NO_SUCH_VERIFIER")
    assert canonical_name("My.Module:Fn") == "My.Module:Fn"  # Python's names are case-sensitive


def test_a_name_differing_only_in_case_cannot_be_registered():
    with pytest.raises(ValueError, match="taken as 'gsm8k'"):
        register_verifier("GSM8k")(lambda completion, ground_truth: 0.0)


def test_rows_labelled_in_capitals_load_under_the_registered_name(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": "2+2?", "ground_truth": "4", "dataset": "GSM8K"},
        {"prompt": "1/2?", "ground_truth": "\\frac{1}{2}", "dataset": ["MATH"]},
    ]) + "\n")
    examples, _ = load_source(DataSourceConfig(name=str(rows), verifier_field="dataset"), seed=0)
    assert [e.verifiers for e in examples] == [("gsm8k",), ("math",)]


def test_the_scorer_scores_a_request_named_in_capitals():
    with RewardScorer(num_workers=1, timeout_s=30.0) as scorer:
        (outcome,) = scorer.score([ScoreRequest("s#0", "so 72", "72", ("GSM8K",))])
    assert (outcome.score, outcome.error) == (1.0, None)
