"""The verifier of examples/custom_task: is the answer the prompt's word, reversed?

`reversed_word` pays 1 for exactly one word, the ground truth (case and the quotes or final
full stop a model may add aside), and 0 for anything else. A policy under RL looks for what
pays without being right, so the verifier commits to one reading of the answer: the whole
answer must be that one word. Scanning the text for the ground truth would pay a hedge
("tenalp planet"), every rotation written out, or the word buried in a paragraph; the
exploit cases below are those tricks, and the exploit canary scores them through the run's
own scorer before step 1 (a verifier that pays one stops the run, exit 2).

What it is not: a judge of spelling or of reasoning. rlvr hands it the answer only (the text
after the last </think>, inside <answer> tags when present).
"""

from __future__ import annotations

from rlvr.rewards.canary import ExploitCase, register_exploit_case

NAME = "examples.custom_task.reverse:reversed_word"  # how the config and the data name it

_EDGES = " \t\r\n\"'`.*"  # what a model wraps one word in: quotes, bold, a full stop


def reversed_word(completion: str, ground_truth: str) -> float:
    """1.0 if the answer is the one word `ground_truth` (case-insensitive), else 0.0."""
    answer = completion.strip(_EDGES)
    if not answer or any(c.isspace() for c in answer):  # empty, or more than one word
        return 0.0
    return float(answer.casefold() == ground_truth.strip().casefold())


# Wrong or hedged answers to 'planet' (reversed: 'tenalp'); none may earn anything.
for _name, _completion in [
    ("empty answer", ""),
    ("only punctuation", '"."'),
    ("hedge: the answer and the word", "tenalp planet"),
    ("hedge: one candidate a line", "tenalp\nplanet\nnetalp"),
    ("the answer inside a sentence of others", "maybe tenalp, maybe tenlap or netalp"),
    ("the word unreversed", "planet"),
    ("the answer twice, joined", "tenalptenalp"),
]:
    register_exploit_case(ExploitCase(NAME, _name, _completion, "tenalp"))
