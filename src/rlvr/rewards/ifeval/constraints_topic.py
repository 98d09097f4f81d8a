"""`rlvr:topic`, rlvr's own constraint: the answer names the task's topic. It is a *gate*: the
`ifeval` verifier scores an answer that misses it 0, whatever other constraints it meets.

Why: IFEval-style constraints check an answer's form, never whether it does the task. A fixed
string written without reading any prompt (a title, two bullets, every word a prompt may ask
for, a P.S., an end phrase) met 70% of `ifeval_generated`'s constraints on average, and all of
them on more than half the rows; IFDecorator (arXiv 2508.04632) describes instruction-
following RLVR learning such verification shortcuts. Naming the topic is the cheapest evidence
that the prompt was read: it stops a prompt-blind answer, not an off-task one that names the
topic (that takes a content grader such as `llm_judge`).

What it is not: a test of content or relevance. The topic's word forms are listed by whoever
writes the row (`rlvr.data.if_tasks` for the generated task) and matched as whole words in any
case, so they must not be words the prompt asks for on its own account (an include-word), or
an answer meeting that constraint would name the topic for free.
"""

from __future__ import annotations

from rlvr.rewards.ifeval.constraints import register_constraint
from rlvr.rewards.ifeval.text import whole_word_pattern

TOPIC_ID = "rlvr:topic"


@register_constraint(TOPIC_ID)
def on_topic(response: str, *, topic_words: list[str]) -> bool:
    """One of `topic_words` (the topic's noun and its word forms, e.g. "moon", "moons",
    "lunar") appears as a whole word, any case."""
    if not topic_words:  # no word would be a gate nothing passes: a data bug, refused at load
        raise ValueError("topic_words is empty")
    patterns = [whole_word_pattern(w.strip()) for w in topic_words]  # ValueError on a blank one
    return any(p.search(response) for p in patterns)
