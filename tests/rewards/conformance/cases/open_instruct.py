"""Cases of open-instruct's verifier unit tests, transcribed as data.

Source: allenai/open-instruct, open_instruct/test_ground_truth_utils.py,
open_instruct/test_math_utils.py, open_instruct/test_if_functions.py (commit
e6c3044aa6201c8bfa4573c1b03142af599e730d). Copyright the Allen Institute for AI, licensed under
the Apache License, Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0). Predictions, labels
and expected scores are the tests' own parameters, unchanged; no code of theirs is used.

Each row: (name, rlvr verifier, completion, ground truth as rlvr takes it, expected score or
"error"). open-instruct's verifier -> rlvr's: PuzzleMatcherVerifier -> `string_matcher`,
F1Verifier -> `string_f1` (a label list as JSON), GSM8KVerifier -> `gsm8k`, IFEvalVerifier ->
`ifeval`. MATH_EQUIVALENCES are test_math_utils' normalisation pairs (input, normal form), each
read here as "an answer written as the input equals a ground truth written as the normal form"
for the `math` verifier: derived from the reference's cases, not asserted by it as such.
"""

import json

SOURCE = {
    "name": "open-instruct",
    "repository": "allenai/open-instruct",
    "paths": ["open_instruct/test_ground_truth_utils.py", "open_instruct/test_math_utils.py",
              "open_instruct/test_if_functions.py"],
    "commit": "e6c3044aa6201c8bfa4573c1b03142af599e730d",
    "licence": "Apache-2.0",
}

_G = "test_ground_truth_utils.py::"

_PUZZLE_BASIC = [
    ("simple_match", "The answer is 42", "answer is 42", 1.0),
    ("with_thinking_tags", "<think>Let me solve this</think>Paris", "paris", 1.0),
    ("with_answer_tags", "<answer>New York City!</answer>", "new york city", 1.0),
    ("should_fail", "Wrong answer", "correct answer", 0.0),
    ("complex_example",
     "<think>This is about geography</think><answer>The capital of France is Paris.</answer>",
     "capital of france is paris", 1.0),
]
_PUZZLE_SCENARIOS = [
    ("exact_match_numbers", "42", "42", 1.0),
    ("exact_match_text", "hello world", "hello world", 1.0),
    ("case_insensitive", "Hello World", "hello world", 1.0),
    ("thinking_tags_match", "<think>Let me think about this...</think>42", "42", 1.0),
    ("thinking_tags_text_match", "<think>This is complex</think>hello world", "hello world", 1.0),
    ("thinking_tags_no_match", "<think>Analysis...</think>Wrong Answer", "42", 0.0),
    ("answer_tags_match", "<answer>42</answer>", "42", 1.0),
    ("answer_tags_text_match", "<answer>hello world</answer>", "hello world", 1.0),
    ("answer_tags_no_match", "<answer>wrong</answer>", "42", 0.0),
    ("both_tags_match", "<think>Thinking...</think><answer>42</answer>", "42", 1.0),
    ("both_tags_text_match",
     "<think>Let me solve this step by step</think><answer>hello world</answer>",
     "hello world", 1.0),
    ("remove_articles_punctuation", "The answer is 42!", "answer is 42", 1.0),
    ("remove_article_a", "A simple test.", "simple test", 1.0),
    ("remove_punctuation", "Hello, world!", "hello world", 1.0),
    ("normalize_whitespace", "  hello   world  ", "hello world", 1.0),
    ("replace_tabs_newlines", "hello\tworld\n", "hello world", 1.0),
    ("numbers_no_match", "42", "43", 0.0),
    ("text_no_match", "hello", "world", 0.0),
    ("empty_vs_nonempty", "", "42", 0.0),
    ("capital_city", "<answer>London</answer>", "london", 1.0),
    ("animal_with_article", "<think>Animal question</think>The elephant", "elephant", 1.0),
    ("scientist_name", "<answer>Albert Einstein</answer>", "albert einstein", 1.0),
    ("literature_reference", "Romeo and Juliet by Shakespeare",
     "romeo and juliet by shakespeare", 1.0),
    ("country_name", "<answer>United States of America</answer>", "united states of america",
     1.0),
]
_F1_SINGLE = [
    ("exact_match", "hello world", "hello world", 1.0),
    ("partial_match", "hello world", "hello", 2 / 3),
    ("no_match", "hello world", "goodbye", 0.0),
    ("with_thinking", "<think>Let me think...</think>hello world", "hello world", 1.0),
    ("with_thinking_partial", "<think>Analysis</think>hello world", "hello", 2 / 3),
    ("with_answer_tags", "<answer>hello world</answer>", "hello world", 1.0),
    ("both_tags", "<think>Thinking...</think><answer>hello world</answer>", "hello world", 1.0),
]
_F1_LISTS = [
    ("first_matches_best", "hello world", ["hello world", "goodbye"], 1.0),
    ("second_matches_best", "hello world", ["goodbye", "hello world"], 1.0),
    ("partial_matches", "hello world", ["hello", "world"], 2 / 3),
    ("none_match_well", "hello world", ["foo", "bar", "baz"], 0.0),
    ("single_element_list", "hello world", ["hello world"], 1.0),
    ("list_with_thinking", "<think>hmm</think>hello world", ["goodbye", "hello world"], 1.0),
]
_GSM8K = [
    ("negative_integer", "Therefore the answer is -3", "-3", 1.0),
    ("positive_integer", "Therefore the answer is +7", "+7", 1.0),
    ("negative_decimal", "Final answer: -3.5", "-3.5", 1.0),
    ("boxed_negative_integer", "The result is \\\\boxed{-3}", "-3", 1.0),
    ("wrong_sign", "Therefore the answer is 3", "-3", 0.0),
]

CASES = (
    [(_G + f"TestPuzzleMatcherVerifier::test_basic_scenarios[{n}]", "string_matcher", p, label, s)
     for n, p, label, s in _PUZZLE_BASIC]
    + [(_G + f"TestPuzzleMatcherVerifier::test_puzzle_matcher_scenarios[{n}]", "string_matcher",
        p, label, s) for n, p, label, s in _PUZZLE_SCENARIOS]
    + [(_G + f"TestF1Verifier::test_single_label[{n}]", "string_f1", p, label, s)
       for n, p, label, s in _F1_SINGLE]
    + [(_G + f"TestF1Verifier::test_list_labels[{n}]", "string_f1", p, json.dumps(labels), s)
       for n, p, labels, s in _F1_LISTS]
    + [(_G + f"TestGSM8KVerifier::test_signed_number_extraction[{n}]", "gsm8k", p, label, s)
       for n, p, label, s in _GSM8K]
    + [(_G + "TestIFEvalVerifierEmptyInstructions::test_empty_instruction_list_returns_zero_score",
        "ifeval", "some non-empty response",
        json.dumps({"instruction_id": [], "kwargs": []}), 0.0)]
)

# test_math_utils.py::TestStripString::test_latex_normalization: (input, normal form)
MATH_EQUIVALENCES = [
    (r"\frac{1}{2}", r"\frac{1}{2}"),
    (r"\frac 1 2", r"\frac{1}{2}"),
    (r"  \frac{1}{2}  ", r"\frac{1}{2}"),
    (r"\left(\frac{1}{2}\right)", r"(\frac{1}{2})"),
    (r"50\%", "50"),
    (r"0.5", r"\frac{1}{2}"),
    (r"\tfrac{3}{4}", r"\frac{3}{4}"),
    (r"\sqrt2", r"\sqrt{2}"),
    (r"1 + 2", "1+2"),
]
CASES += [(f"test_math_utils.py::TestStripString::test_latex_normalization[{i}]", "math",
           f"The answer is \\boxed{{{given}}}.", normal, 1.0)
          for i, (given, normal) in enumerate(MATH_EQUIVALENCES)]

NOT_RUNNABLE = {
    _G + "TestLMJudgeVerifier (2 tests)": "tests open-instruct's LLM-judge client with mocks",
    "test_if_functions.py (10 cases)": "open-instruct's own IF helpers (validate_choice, "
                                       "validate_frequency_capital_words 'around'), which no "
                                       "IFEval/IFBench id uses; rlvr has no counterpart",
}
