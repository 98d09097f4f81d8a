"""The `ifeval` verifier's gates: `rlvr:topic` must be met for an answer to score at all, and a
met gate earns nothing by itself (the score is the fraction of the other constraints)."""

import json

import pytest

import rlvr.rewards.ifeval  # noqa: F401  (registers the verifier and constraints)
from rlvr.rewards.ifeval import GATES, TOPIC_ID
from rlvr.rewards.registry import get_verifier, ground_truth_check

ifeval = get_verifier("ifeval")
MOON = (TOPIC_ID, {"topic_words": ["moon", "moons", "lunar"]})
NO_COMMA = ("punctuation:no_comma", {})
END = ("startend:end_checker", {"end_phrase": "That is all."})


def gt(*constraints: tuple[str, dict]) -> str:
    return json.dumps([{"id": i, "kwargs": k} for i, k in constraints])


def test_the_topic_is_a_gate():
    assert TOPIC_ID in GATES


def test_an_on_topic_answer_meeting_the_constraints_scores_1():
    answer = "The Moon lights the night sky and pulls the tides of the sea. That is all."
    assert ifeval(answer, gt(MOON, NO_COMMA, END)) == 1.0
    assert ifeval(answer.upper(), gt(MOON)) == 1.0  # any case: "write in capitals" rows


def test_an_off_topic_answer_scores_0_whatever_it_meets():
    answer = "The sun warms the garden all morning. That is all."  # no comma, right end
    assert ifeval(answer, gt(NO_COMMA, END)) == 1.0  # without the gate: full marks
    assert ifeval(answer, gt(MOON, NO_COMMA, END)) == 0.0


def test_the_topic_is_matched_as_a_whole_word():
    assert ifeval("Honeymoon plans, then the moonlit bay.", gt(MOON)) == 0.0
    assert ifeval("Lunar dust, then a long walk.", gt(MOON)) == 1.0


def test_a_met_gate_earns_nothing_by_itself():
    answer = "The moon, the tides. The end."  # a comma, the wrong end phrase
    assert ifeval(answer, gt(MOON, NO_COMMA, END)) == 0.0
    assert ifeval("The moon, the tides. That is all.", gt(MOON, NO_COMMA, END)) == 0.5
    assert ifeval("The moon, the tides.", gt(MOON)) == 1.0  # a gate alone: met is full marks


def test_an_answer_naming_the_topic_only_while_thinking_misses_it():
    assert ifeval("<think>the moon</think>Tides rise. That is all.", gt(MOON, END)) == 0.0


@pytest.mark.parametrize("kwargs", [{"topic_words": []}, {"topic_words": ["moon", " "]},
                                    {"topic_words": "moon"}, {}])
def test_a_topic_gate_naming_no_word_is_refused_at_load(kwargs):
    with pytest.raises(ValueError, match="rlvr:topic"):
        ground_truth_check("ifeval")(gt((TOPIC_ID, kwargs)))
