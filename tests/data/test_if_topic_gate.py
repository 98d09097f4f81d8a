"""`ifeval_generated` rows carry their topic as a gate: a fixed answer written without reading
the prompt is no longer paid for meeting the constraints, an on-topic one still is, and the
prompts themselves are what they were."""

import hashlib
import json
import re

from rlvr.data.if_tasks import (END_PHRASES, FORBIDDEN_WORDS, INCLUDE_WORDS, TOPIC_WORDS, TOPICS,
                                load_ifeval_generated)
from rlvr.rewards.ifeval import TOPIC_ID, parse_constraints
from rlvr.rewards.registry import get_verifier

ifeval = get_verifier("ifeval")
# The auditor's answer: a title, two bullets, every include-word twice, a highlight, a
# placeholder, a P.S. and an end phrase, written without reading any prompt.
CANNED = ("<<happy bright simple river garden>>\n* morning friend light green small [name] "
          "*happy* happy happy bright bright simple simple river river garden garden morning "
          "morning friend friend light light green green small small\n* P.S. That is all.")


def test_ifeval_generated_pays_no_canned_off_topic_answer():
    rows = load_ifeval_generated("test", 0)
    mean = sum(ifeval(CANNED, r.ground_truth) for r in rows) / len(rows)
    assert mean < 0.2  # 0.70 before the gate: the task ("write about the moon") was never checked


def test_the_canned_answer_on_topic_is_paid_again():
    """The gate is what stops it: the same answer naming the row's topic earns its constraints."""
    rows = load_ifeval_generated("test", 0)
    scores = []
    for row in rows:
        gate = parse_constraints(row.ground_truth)[0]
        scores.append(ifeval(f"{gate.kwargs['topic_words'][0]} {CANNED}", row.ground_truth))
    assert sum(scores) / len(scores) > 0.5


def test_every_row_starts_with_its_topic_gate_and_the_prompt_names_it():
    for row in load_ifeval_generated("train", 0)[:300] + load_ifeval_generated("test", 0):
        gate = parse_constraints(row.ground_truth)[0]
        assert gate.id == TOPIC_ID
        topic = next(t for t in TOPICS if t in row.messages[0]["content"])
        assert gate.kwargs["topic_words"] == list(TOPIC_WORDS[topic])


def test_each_topic_as_written_names_itself():
    for topic in TOPICS:
        assert ifeval(f"All about {topic}.", _gate_only(topic)) == 1.0, topic


def test_no_topic_word_is_a_word_a_constraint_asks_for():
    """Else an answer meeting "include 'garden'" would name "gardening" for free."""
    asked = {w.lower() for w in INCLUDE_WORDS + FORBIDDEN_WORDS}
    asked |= {w.lower() for p in END_PHRASES for w in re.findall(r"\w+", p)}
    for topic, words in TOPIC_WORDS.items():
        assert not asked & {w.lower() for w in words}, topic
    assert set(TOPIC_WORDS) == set(TOPICS)


def test_the_gate_leaves_the_prompts_as_they_were():
    """The topic is drawn in the same order as before, so a seed gives the same prompts."""
    digests = {split: hashlib.sha256("\n".join(r.messages[0]["content"] for r in
                                               load_ifeval_generated(split, 0)).encode())
               .hexdigest()[:16] for split in ("train", "test")}
    assert digests == {"train": "3692d11384936d2b", "test": "4052bce39392850b"}


def _gate_only(topic: str) -> str:
    return json.dumps([{"id": TOPIC_ID, "kwargs": {"topic_words": list(TOPIC_WORDS[topic])}}])
