"""Evaluation over named sets with n samples per prompt: a scripted engine and scorer, so every
figure can be worked out by hand."""

import logging

import pytest

from rlvr.data import EvalSet
from rlvr.producer.evaluation import EvalSettings, Evaluator
from rlvr.types import Completion, Prompt, RewardOutcome, SamplingParams

# prompt token -> the answers its samples give, in order; "~" marks an answer cut at the limit
SCRIPT = {
    1: ["7", "7", "8", "x~"],         # truth 7: c=2; votes 7,7,8 -> 7 wins (right)
    2: ["5", "5", "3", "no~"],        # truth 3: c=1; votes 5,5,3 -> 5 wins (wrong)
    3: ["ok", "ok", "ok", "ok"],      # truth ok, a verifier with no answer extractor
}


class ScriptedEngine:
    def __init__(self):
        self.seeds = []

    def generate(self, prompts, params):
        self.seeds.append(params.seed)
        out = []
        for ids in prompts:
            texts = (SCRIPT[ids[0]] * params.n)[:params.n]
            out.append([Completion(token_ids_T=list(range(len(t.rstrip("~")))),
                                   logprobs_T=[0.0] * len(t.rstrip("~")),
                                   finish_reason="length" if t.endswith("~") else "stop",
                                   text=t.rstrip("~")) for t in texts])
        return out


class ExactScorer:
    """Full marks for the exact ground truth; "boom" is a verifier error."""

    def score(self, requests):
        return [RewardOutcome(score=0.0, error="boom") if r.completion == "boom" else
                RewardOutcome(score=float(r.completion == r.ground_truth)) for r in requests]

    def tags_mark_answers(self, prompt_messages):
        return True  # as a run that asks for <think>/<answer> tags


def _prompt(token, truth, verifier):
    return Prompt(id=f"t/{token}", messages=(), token_ids=(token,), ground_truth=truth,
                  verifiers=(verifier,), source="t")


SETS = [EvalSet("arith", [_prompt(1, "7", "last_number"), _prompt(2, "3", "gsm8k")]),
        EvalSet("lengthy", [_prompt(3, "ok", "max_length")])]


def _settings(n=4, ks=(1, 2, 4), seed=5, max_prompts=64):
    return EvalSettings(sampling=SamplingParams(n=n, temperature=1.0, max_tokens=8, seed=seed),
                        pass_at_k=ks, max_prompts=max_prompts)


def test_per_set_pass_at_k_and_majority_vote_by_hand():
    m = Evaluator(SETS, _settings()).run(ScriptedEngine(), ExactScorer()).metrics
    # prompt 1: c=2 of 4, pass@2 = 1 - C(2,2)/C(4,2) = 5/6; prompt 2: c=1, pass@2 = 1 - 3/6
    assert m["eval/arith/pass@1"] == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert m["eval/arith/pass@2"] == pytest.approx((5 / 6 + 1 / 2) / 2)
    assert m["eval/arith/pass@4"] == pytest.approx(1.0)
    assert m["eval/arith/maj@4"] == pytest.approx(0.5)  # prompt 1's vote right, prompt 2's wrong
    assert m["eval/arith/mean_reward"] == pytest.approx(3 / 8)
    assert m["eval/arith/stop_rate"] == pytest.approx(6 / 8)
    assert m["eval/arith/sequence_lengths"] == pytest.approx((6 * 1 + len("x") + len("no")) / 8)
    assert m["eval/lengthy/pass@1"] == 1.0 and m["eval/lengthy/mean_reward"] == 1.0
    assert "eval/lengthy/maj@4" not in m  # max_length extracts no answer to vote on


def test_pooled_figures_keep_their_old_names():
    m = Evaluator(SETS, _settings()).run(ScriptedEngine(), ExactScorer()).metrics
    assert m["eval/scores"] == pytest.approx(7 / 12)  # 3 right of 8, 4 of 4: per sample
    assert m["eval/pass_at_1"] == pytest.approx(7 / 12)
    assert m["eval/stop_rate"] == pytest.approx(10 / 12)
    assert m["eval/verifier_errors"] == 0.0 and m["eval/verifier_timeouts"] == 0.0


def test_one_greedy_sample_reports_pass_at_1_and_no_vote():
    settings = EvalSettings(sampling=SamplingParams(n=1, temperature=0.0, max_tokens=8))
    m = Evaluator(SETS, settings).run(ScriptedEngine(), ExactScorer()).metrics
    # first samples: "7" (right), "5" (wrong), "ok" (right)
    assert m["eval/scores"] == pytest.approx(2 / 3) and m["eval/pass_at_1"] == pytest.approx(2 / 3)
    assert m["eval/arith/pass@1"] == 0.5 and not any("maj@" in k for k in m)


def test_the_result_keeps_every_sample_with_its_outcome_and_answer():
    result = Evaluator(SETS, _settings()).run(ScriptedEngine(), ExactScorer())
    arith = result.sets[0]
    assert arith.name == "arith" and arith.num_prompts == 2
    assert [s.completion.text for s in arith.episodes.groups[0]] == ["7", "7", "8", "x"]
    assert [o.score for o in arith.episodes.outcomes[0]] == [1.0, 1.0, 0.0, 0.0]
    assert arith.answers == [["7", "7", "8", None], ["5", "5", "3", None]]
    assert result.sets[1].answers is None
    assert set(arith.metrics) <= set(result.metrics)


def test_seeds_differ_per_set_and_repeat_at_every_eval():
    engine = ScriptedEngine()
    evaluator = Evaluator(SETS, _settings(seed=5))
    evaluator.run(engine, ExactScorer())
    evaluator.run(engine, ExactScorer())
    first, second = engine.seeds[:2], engine.seeds[2:]
    assert first == second and len(set(first)) == 2 and 5 not in first
    other = ScriptedEngine()
    Evaluator(SETS, _settings(seed=6)).run(other, ExactScorer())
    assert not set(other.seeds) & set(first)


def test_max_prompts_cuts_each_set():
    result = Evaluator(SETS, _settings(max_prompts=1)).run(ScriptedEngine(), ExactScorer())
    assert [s.num_prompts for s in result.sets] == [1, 1]
    assert result.metrics["eval/arith/pass@1"] == 0.5  # prompt 1 alone


def test_missing_vote_is_logged_once_and_empty_sets_are_skipped(caplog):
    with caplog.at_level(logging.INFO, logger="rlvr.producer.evaluation"):
        evaluator = Evaluator([*SETS, EvalSet("empty", [])], _settings())
        evaluator.run(ScriptedEngine(), ExactScorer())
        evaluator.run(ScriptedEngine(), ExactScorer())
    notes = [r.getMessage() for r in caplog.records]
    assert sum("'lengthy': no maj@4" in n and "max_length" in n for n in notes) == 1
    assert sum("'empty' has no prompts" in n for n in notes) == 1
    assert [s.name for s in evaluator.sets] == ["arith", "lengthy"]


def test_verifier_errors_are_counted():
    class Boom(ExactScorer):
        def score(self, requests):
            return [RewardOutcome(0.0, error="boom"), *super().score(requests[1:])]

    m = Evaluator(SETS[:1], _settings()).run(ScriptedEngine(), Boom()).metrics
    assert m["eval/verifier_errors"] == 1.0


def test_no_sets_no_figures():
    assert Evaluator([], _settings()).run(ScriptedEngine(), ExactScorer()).metrics == {}


def test_settings_refuse_k_above_n():
    with pytest.raises(ValueError, match="k=\\[8\\]"):
        _settings(n=4, ks=(1, 8))


def test_maj_at_n_reads_tags_as_the_scorer_read_them():
    """Where no tags were asked for, the scorer grades the whole text: the vote's answer key
    must come from the same text, not from after a stray `</think>`."""
    from rlvr.producer.evaluation import answer_keys
    from rlvr.producer.groups import Episodes
    from rlvr.rewards.registry import answer_extractor
    from rlvr.types import Sample

    prompt = _prompt(5, "42", "last_number")
    sample = Sample(prompt, Completion([1], [0.0], "stop", "It is 42.</think>"), 1.0)
    episodes = Episodes(groups=[[sample]], outcomes=[[RewardOutcome(score=1.0)]])
    extract = answer_extractor("last_number")
    assert answer_keys(episodes, [extract], lambda messages: False) == [["42"]]
    assert answer_keys(episodes, [extract], lambda messages: True) == [[None]]
