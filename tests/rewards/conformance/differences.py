"""The reference cases where rlvr differs on purpose, each with its reason (docs/verifiers.md
lists them too). A runnable case that disagrees and is not named here fails the conformance
tests, and so does a case named here that agrees: the list is exactly rlvr's differences."""

DIFFERENCES = {
    "ifbench/instructions_test.py::test_palindrome[2]":
        "words:palindrome: IFBench counts one palindrome written ten times ('abcba, abcba, ...') "
        "as ten; rlvr wants ten different ones, or repeating one word is the whole answer.",
    "ifbench/instructions_test.py::test_quote_explanation__handles_empty_string_after_stripping[1]":
        "format:quote_unquote: IFBench passes '123...', an answer with no quote at all; rlvr "
        "wants at least one quoted phrase (no vacuous pass).",
    "ifbench/instructions_test.py::test_quote_explanation__handles_empty_string_after_stripping[2]":
        "format:quote_unquote on the empty answer: rlvr's ifeval verifier scores an empty "
        "answer 0 for every constraint, as the IFEval/IFBench harnesses and open-instruct do; "
        "IFBench's checker alone passes it.",
    "math-verify/test_all::test_number_extraction[1,22-1.22-1]":
        "math: rlvr reads a bare ground truth as LaTeX, where '1,22' is the list {1, 22} (MATH "
        "writes several solutions so); this test reads it with Math-Verify's plain-number rule, "
        "as the decimal 1.22.",
    "open-instruct/test_ground_truth_utils.py::TestF1Verifier::test_single_label[partial_match]":
        "string_f1: rlvr caps token F1 by precision, so an answer earns at most the share of "
        "its words that are the label's: 'hello world' against 'hello' is the shape of the hedge "
        "'Paris London', which plain F1 paid 2/3 against either side (issue 48). rlvr: 1/2.",
    "open-instruct/test_ground_truth_utils.py::TestF1Verifier::test_single_label[with_thinking_partial]":
        "string_f1: rlvr caps token F1 by precision, so an answer earns at most the share of "
        "its words that are the label's: 'hello world' against 'hello' is the shape of the hedge "
        "'Paris London', which plain F1 paid 2/3 against either side (issue 48). rlvr: 1/2.",
    "open-instruct/test_ground_truth_utils.py::TestF1Verifier::test_list_labels[partial_matches]":
        "string_f1: rlvr caps token F1 by precision, so an answer earns at most the share of "
        "its words that are the label's: 'hello world' against 'hello' is the shape of the hedge "
        "'Paris London', which plain F1 paid 2/3 against either side (issue 48). rlvr: 1/2.",
    "open-instruct/test_ground_truth_utils.py::TestIFEvalVerifierEmptyInstructions::"
    "test_empty_instruction_list_returns_zero_score":
        "ifeval: a ground truth with no constraint is refused as a bad row (an error, counted; "
        "the sample scores 0 too), where open-instruct scores it 0 silently.",
}
