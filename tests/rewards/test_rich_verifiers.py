"""Verifiers that see more: the parameters they declare choose what they get (prompt, trajectory,
row metadata), two-argument verifiers are untouched, and each input reaches a verifier in a
worker process from where it starts: a JSONL row's fields, a multi-turn episode's turns.

The verifiers are in `tests.rewards.rich_plugins`, which the scorer's workers import cheaply.
"""

import json

import pytest

from rlvr.config import DataSourceConfig
from rlvr.data import load_source, tokenize_examples
from rlvr.data.errors import DataError
from rlvr.data.readers import row_to_example
from rlvr.data.templates import load_chat_template
from rlvr.producer.groups import RewardShaping
from rlvr.rewards import RewardScorer, ScoreRequest, register_verifier
from rlvr.rewards.registry import declared_inputs, verifier_inputs
from rlvr.rewards.scorer import verifier_context
from rlvr.types import Prompt, SamplingParams
from rlvr.workflows import EpisodeRunner, WorkflowSettings
from rlvr.workflows.multi_turn import multi_turn

from tests.rewards.rich_plugins import SEEN, all_inputs
from tests.workflows.conftest import TurnScriptedEngine

KEYWORD = "tests.rewards.rich_plugins:metadata_keyword"

def _prompt(tokenizer, question="What is 6 times 7?", truth="42", verifiers=("last_number",),
            metadata=None):
    messages = ({"role": "user", "content": question},)
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True,
                                         tokenize=False)
    return Prompt(id="q/0", messages=messages,
                  token_ids=tuple(tokenizer.encode(text, add_special_tokens=False)),
                  ground_truth=truth, verifiers=verifiers, source="q",
                  metadata_json=json.dumps(metadata) if metadata else "")


def test_the_declared_parameters_choose_the_inputs():
    assert declared_inputs(lambda completion, ground_truth: 1.0) == frozenset()
    assert declared_inputs(all_inputs) == {"prompt", "trajectory", "metadata"}
    assert verifier_inputs("test_prompt_echo") == {"prompt"}
    assert verifier_inputs("gsm8k") == frozenset()  # today's verifiers: two arguments
    # A positional parameter called `prompt` is not a request for it; nor is an optional extra.
    assert declared_inputs(lambda completion, prompt, *, extra=1: 1.0) == frozenset()
    with pytest.raises(ValueError, match=r"\['meta'\].*prompt, trajectory, metadata"):
        register_verifier("test_typo")(lambda completion, ground_truth, *, meta: 1.0)


def test_only_what_a_request_s_verifiers_ask_for_is_sent():
    request = ScoreRequest("s", "42", "42", ("gsm8k",),
                           prompt_messages=({"role": "user", "content": "q"},),
                           metadata_json='{"a": 1}')
    assert verifier_context(request) is None  # nothing extra crosses the pipe
    asked = verifier_context(ScoreRequest("s", "42", "42", ("gsm8k", "test_prompt_echo"),
                                          prompt_messages=request.prompt_messages))
    assert asked == {"prompt": [{"role": "user", "content": "q"}]}
    # Single-turn (no trajectory given): the completion as the one assistant message.
    full = verifier_context(ScoreRequest("s", "42", "42", ("test_all_inputs",)))
    assert full == {"prompt": [], "metadata": {},
                    "trajectory": [{"role": "assistant", "content": "42"}]}


def test_rich_and_plain_verifiers_score_side_by_side_in_workers():
    prompt_messages = ({"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "say hi"})
    requests = [
        ScoreRequest("a", "say hi", "0", ("test_prompt_echo",), prompt_messages=prompt_messages),
        ScoreRequest("b", "7", "7", ("gsm8k",)),
        ScoreRequest("c", "x", "0", ("test_all_inputs",), prompt_messages=prompt_messages,
                     metadata_json='{"points": 7}'),
        ScoreRequest("d", "it is paris", "0", (KEYWORD,),
                     metadata_json='{"keyword": "paris"}'),
        ScoreRequest("e", "x", "0", ("test_all_inputs",)),  # prompt [] fails its assertion
    ]
    with RewardScorer(num_workers=2, timeout_s=10.0, aggregator="sum") as scorer:
        out = scorer.score(requests)
        counts = scorer.metrics_since_last()
    assert [o.score for o in out[:4]] == [1.0, 1.0, 0.7, 1.0]
    assert not any(o.error for o in out[:4]), [o.error for o in out]
    assert out[4].error.startswith("test_all_inputs: ") and out[4].score == 0.0
    assert counts["reward/verifier_errors"] == 1


def test_metadata_flows_from_a_jsonl_row_to_the_verifier(tmp_path, tiny_tokenizer):
    rows = [{"prompt": "Name the capital of France.", "ground_truth": "x",
             "dataset": KEYWORD, "keyword": "paris", "level": 3},
            {"prompt": "Name the capital of Italy.", "ground_truth": "x",
             "dataset": KEYWORD, "keyword": "rome", "level": 1}]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples, _ = load_source(DataSourceConfig(name=str(path)), seed=0)
    assert examples[0].metadata == {"keyword": "paris", "level": 3}  # all the other fields
    subset, _ = load_source(DataSourceConfig(name=str(path), metadata_fields=["keyword"]), 0)
    assert subset[1].metadata == {"keyword": "rome"}
    prompts, _ = tokenize_examples(subset, load_chat_template("tokenizer", tiny_tokenizer),
                                   256, None)
    assert prompts[0].metadata == {"keyword": "paris"}
    requests = [ScoreRequest.for_prompt(p, 0, "I think it is paris") for p in prompts]
    with RewardScorer(num_workers=1, timeout_s=10.0) as scorer:
        assert [o.score for o in scorer.score(requests)] == [1.0, 0.0]


def test_metadata_fields_that_cannot_be_kept_are_named():
    row = {"prompt": "p", "ground_truth": "1", "dataset": "gsm8k", "blob": b"\x00", "n": 2}
    # Keeping everything: a value JSON cannot hold is left out, not a bad row.
    assert row_to_example(row, DataSourceConfig(name="t"), "t", 0).metadata == {"n": 2}
    with pytest.raises(DataError, match=r"t row 5 \(counted from 1\) field 'blob': a bytes "):
        row_to_example(row, DataSourceConfig(name="t", metadata_fields=["blob"]), "t", 4)
    with pytest.raises(DataError, match=r"field 'level': missing \(metadata_fields lists it\)"):
        row_to_example(row, DataSourceConfig(name="t", metadata_fields=["level"]), "t", 4)
    bare = {"prompt": "p", "ground_truth": "1", "dataset": "gsm8k"}
    assert row_to_example(bare, DataSourceConfig(name="t"), "t", 0).metadata_json == ""


def test_a_multi_turn_episode_s_trajectory_reaches_the_verifier(tiny_tokenizer):
    SEEN.clear()
    prompt = _prompt(tiny_tokenizer, verifiers=("test_records_trajectory",))
    engine = TurnScriptedEngine(tiny_tokenizer, ["41", "42"])
    settings = WorkflowSettings(max_turns=3, feedback="Try again.")
    with RewardScorer(num_workers=0) as scorer:
        runner = EpisodeRunner(multi_turn, engine, scorer, tiny_tokenizer, settings)
        episodes, _ = runner.run([prompt], SamplingParams(n=1, max_tokens=32, seed=1),
                                 RewardShaping())
        runner.close()
    assert episodes.groups[0][0].reward == 1.0
    # Scored after each answer: first the one answer, then the whole conversation so far.
    assert SEEN == [[{"role": "assistant", "content": "41"}],
                    [{"role": "assistant", "content": "41"},
                     {"role": "user", "content": "Try again."},
                     {"role": "assistant", "content": "42"}]]
