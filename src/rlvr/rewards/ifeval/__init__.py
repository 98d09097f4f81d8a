"""Instruction following: IFEval's and IFBench's verifiable constraints, checked offline, and the
`ifeval` verifier that scores a completion by the fraction of them it meets (0 if it misses a
gate: rlvr's `rlvr:topic`, the answer names the task's topic).

Importing this package registers the `ifeval` verifier, its ground-truth check and every
constraint checker. It needs only the standard library (no nltk, spaCy, langdetect or torch),
so a fresh scorer worker imports it in milliseconds.
"""

from rlvr.rewards.ifeval import constraints_format as _format  # noqa: F401  (registers)
from rlvr.rewards.ifeval import constraints_ifbench as _ifbench  # noqa: F401  (registers)
from rlvr.rewards.ifeval import constraints_ifbench_layout as _layout  # noqa: F401  (registers)
from rlvr.rewards.ifeval import constraints_ifbench_ratio as _ratio  # noqa: F401  (registers)
from rlvr.rewards.ifeval import constraints_ifbench_words as _words  # noqa: F401  (registers)
from rlvr.rewards.ifeval import constraints_topic as _topic  # noqa: F401  (registers)
from rlvr.rewards.ifeval.constraints import CONSTRAINTS, check_kwargs, get_checker
from rlvr.rewards.ifeval.constraints_topic import TOPIC_ID
from rlvr.rewards.ifeval.verifier import (GATES, Constraint, constraints_met,
                                          constraints_to_ground_truth, parse_constraints,
                                          verify_ifeval)

IFEVAL_IDS = (
    "keywords:existence", "keywords:frequency", "keywords:forbidden_words",
    "keywords:letter_frequency", "language:response_language",
    "length_constraints:number_sentences", "length_constraints:number_paragraphs",
    "length_constraints:number_words", "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders", "detectable_content:postscript",
    "detectable_format:number_bullet_lists", "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections", "detectable_format:multiple_sections",
    "detectable_format:json_format", "detectable_format:title", "combination:two_responses",
    "combination:repeat_prompt", "startend:end_checker", "startend:quotation",
    "change_case:capital_word_frequency", "change_case:english_capital",
    "change_case:english_lowercase", "punctuation:no_comma",
)  # Google's IFEval list, all 25 supported

__all__ = ["CONSTRAINTS", "GATES", "IFEVAL_IDS", "TOPIC_ID", "Constraint", "check_kwargs",
           "constraints_met", "constraints_to_ground_truth", "get_checker", "parse_constraints",
           "verify_ifeval"]
