"""Where nothing asked a model for <think>/<answer> tags, a tag in its text is text: graded with
the rest. Taken as a mark, it let the policy choose which piece was graded: rule-breaking text,
then "</think>ok" or "<answer>ok</answer>", passed an ifeval row whose every rule the visible
answer broke."""

import json

import pytest

from rlvr.config import load_config
from rlvr.rewards import ScoreRequest, strip_thinking
from rlvr.rewards.format import answer_tags
from rlvr.rewards.scorer import RewardScorer
from rlvr.run.settings import scorer_settings

# No commas, all lowercase, under 20 words.
ROW = json.dumps([{"id": "punctuation:no_comma", "kwargs": {}},
                  {"id": "change_case:english_lowercase", "kwargs": {}},
                  {"id": "length_constraints:number_words",
                   "kwargs": {"relation": "less than", "num_words": 20}}])
BROKEN = ("THIS, Answer, Breaks EVERY Rule, And Runs On And On Past Twenty Words Of Text, "
          "Commas And Capitals Included, On Purpose")
ASKS_FOR_TAGS = ({"role": "user", "content": "Think in <think> </think>, then answer."},)


def _score(scorer, completion, prompt=()):
    (outcome,) = scorer.score([ScoreRequest("s", completion, ROW, ("ifeval",),
                                            prompt_messages=prompt)])
    return outcome.score


@pytest.mark.parametrize("workers", [0, 1], ids=["in_process", "worker"])
@pytest.mark.parametrize("tail", ["</think>ok", "<answer>ok</answer>"])
def test_a_stray_tag_does_not_hide_the_answer_where_no_tags_were_asked_for(workers, tail):
    with RewardScorer(num_workers=workers, answer_tags=False) as scorer:
        assert _score(scorer, BROKEN + tail) == 0.0
        assert _score(scorer, "ok") == 1.0
        # A prompt that asks for the tags makes them marks, for its own requests.
        assert _score(scorer, BROKEN + tail, ASKS_FOR_TAGS) == 1.0
    with RewardScorer(num_workers=workers, answer_tags=True) as scorer:  # a thinking run
        assert _score(scorer, BROKEN + tail) == 1.0


def test_tags_mark_answers_by_default_and_inside_the_scope_they_are_text():
    assert strip_thinking("thought</think> answer") == "answer"
    with answer_tags(False):
        assert strip_thinking("thought</think> answer") == "thought</think> answer"
    assert strip_thinking("<think>never closed") == ""


@pytest.mark.parametrize("overrides, tags", [
    ([], False),  # tiny-llama's template names no tags
    (["data.chat_template=r1_zero"], True),
    (["rewards.apply_r1_style_format_reward=true"], True),
    (["rewards.answer_tags=true"], True),
    (["data.chat_template=r1_zero", "rewards.answer_tags=false"], False),
])
def test_the_run_asks_for_tags_through_its_template_or_format_reward(overrides, tags,
                                                                      tiny_tokenizer):
    cfg = load_config("configs/tiny.yaml", overrides)
    assert scorer_settings(cfg, tiny_tokenizer).answer_tags is tags


class _SeesAnswers:
    """A batched stage that records the graded part of each completion, as the judge reads it."""

    def __init__(self):
        self.seen = {}

    def score_batch(self, requests):
        from rlvr.rewards.batched import BatchScore
        self.seen.update({r.sample_id: strip_thinking(r.completion) for r in requests})
        return [BatchScore(1.0) for _ in requests]

    def close(self):
        pass


def test_a_batched_verifier_reads_each_request_s_tags_as_the_workers_do():
    """The batched stage (the LLM judge) ran under the run-level setting only: a prompt that
    asked for <think> had its judge grade the thinking as the answer; a run that asked for
    none took a stray tag as a mark there alone."""
    from tests.rewards.test_batched import STUB

    stage = _SeesAnswers()
    completion = "my reasoning</think>final"
    with RewardScorer(num_workers=0, answer_tags=False, batched={STUB: stage}) as scorer:
        scorer.score([ScoreRequest("a", completion, "x", (STUB,), prompt_messages=ASKS_FOR_TAGS),
                      ScoreRequest("b", completion, "x", (STUB,))])
    assert stage.seen == {"a": "final", "b": completion}
