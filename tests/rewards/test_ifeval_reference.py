"""The instruction checks against the matching rules of the reference checkers (Google's IFEval as
kept in open-instruct's IFEvalG and IFBench's `classic_instructions`, and IFBench's
`instructions`): one case per rule, each worked out by reading the reference's code. Where rlvr
keeps a difference on purpose (docs/verifiers.md: "Where rlvr's IFEval/IFBench checks differ from
the references") the case says so and pins rlvr's side. The references' own test cases are run
in conformance/."""

import json

import pytest

import rlvr.rewards.ifeval  # noqa: F401  (registers the constraints)
from rlvr.rewards.ifeval import get_checker
from rlvr.rewards.registry import get_verifier


def check(constraint_id: str, response: str, **kwargs) -> bool:
    return get_checker(constraint_id)(response, **kwargs)


# --- keywords: IFEval matches keywords as case-insensitive substrings, forbidden words between
# word boundaries, and counts letters after lowercasing ---------------------------------------

def test_existence_is_a_case_insensitive_substring_search():
    # IFEval: re.search(keyword, response, re.IGNORECASE), no word boundaries.
    assert check("keywords:existence", "A CATegory of skies.", keywords=["cat"])
    assert not check("keywords:existence", "A dog.", keywords=["cat"])


def test_existence_matches_a_phrase_as_written():
    # The phrase is one pattern: its inner space matches one space, not a line break.
    assert check("keywords:existence", "Under a Blue sky.", keywords=["blue sky"])
    assert not check("keywords:existence", "Under a blue\nsky.", keywords=["blue sky"])


def test_existence_treats_the_keyword_literally():
    # rlvr escapes the keyword (the reference would read "c++" as a pattern and raise).
    assert check("keywords:existence", "I write C++ daily.", keywords=["c++"])
    assert not check("keywords:existence", "I write cc daily.", keywords=["c++"])


def test_frequency_counts_substrings_ignoring_case():
    # IFEval: len(re.findall(keyword.strip(), response, re.IGNORECASE)).
    at_least_two = dict(keyword=" tea ", frequency=2, relation="at least")
    assert check("keywords:frequency", "Tea in the teapot.", **at_least_two)
    assert not check("keywords:frequency", "Tea, then coffee.", **at_least_two)
    assert not check("keywords:frequency", "Tea in a TEApot.", keyword="tea", frequency=2,
                     relation="less than")


def test_forbidden_words_match_between_word_boundaries_ignoring_case():
    # IFEval: re.search(r"\b" + word + r"\b", response, re.IGNORECASE).
    assert check("keywords:forbidden_words", "A badger is fine.", forbidden_words=["bad"])
    assert not check("keywords:forbidden_words", "That was BAD.", forbidden_words=["bad"])
    # A forbidden phrase is matched as written: across a line break it is not the phrase.
    assert check("keywords:forbidden_words", "I like ice\ncream.", forbidden_words=["ice cream"])
    assert not check("keywords:forbidden_words", "I like Ice cream.",
                     forbidden_words=["ice cream"])


def test_letter_frequency_counts_the_letter_in_the_lowercased_response():
    # IFEval: collections.Counter(response.lower())[letter.lower()].
    kwargs = dict(letter="Z", let_frequency=3, let_relation="at least")
    assert check("keywords:letter_frequency", "Zebras zigzag.", **kwargs)  # Z z z
    assert not check("keywords:letter_frequency", "Zebras graze.", **kwargs)


def test_ifbench_keywords_multiple_counts_substrings_ignoring_case():
    # IFBench: response.lower().count(keyword.lower()) == 1, 2, 3, 5, 7.
    kwargs = dict(keyword1="cat", keyword2="b2", keyword3="c3", keyword4="d4", keyword5="e5")
    rest = " b2" * 2 + " c3" * 3 + " d4" * 5 + " e5" * 7
    assert check("count:keywords_multiple", "Cat" + rest, **kwargs)
    assert not check("count:keywords_multiple", "cat category" + rest, **kwargs)  # cat twice


def test_ifbench_sentence_keyword_matches_between_word_boundaries():
    # IFBench: re.search(r"\b" + re.escape(word) + r"\b", nth_sentence, re.IGNORECASE).
    assert check("sentence:keyword", "Hi there. I like Ice cream.", word="ice cream", N=2)
    assert not check("sentence:keyword", "Hi there. I like ice  cream.", word="ice cream", N=2)
    assert not check("sentence:keyword", "Hi there. I like icecream.", word="ice", N=2)


# --- every other rule: (id, kwargs, response, what the reference says) -------------------------

PALINDROMES = ["level", "radar", "civic", "refer", "rotor", "kayak", "madam", "stats", "tenet",
               "sagas"]
SPAN = {"prompt_to_repeat": "abcdef ghi", "n_start": 1, "n_end": 3}

REFERENCE_RULES = [
    # IFEval: words are \w+ runs
    ("length_constraints:number_words", {"num_words": 6, "relation": "less than"},
     "Don't stop the song now.", False),
    # every *** splits paragraphs, four stars too
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "One.\n****\nTwo.", True),
    # paragraphs split on "\n\n" only; the nth is counted among all pieces; first word is the
    # first whitespace token cut at . , ? ! or a quote
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
     "First.\n\n**Then** we stop.", False),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
     "First.\n\n\n\nThen we stop.", False),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
     "First.\n \nThen we stop.", False),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
     "First.\n\n\"Then,\" we stop.", True),
    # "P.S." needs its final dot, and may stand anywhere
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hello.\nP.S see you.", False),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Thanks! P.S. see you.", True),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Bye.\np. p.s. one more", True),
    # placeholders pair "[" with the first "]" after it on the line
    ("detectable_content:number_placeholders", {"num_placeholders": 1}, "Dear [x[]", True),
    # a bullet is a line starting "*" then not "*", or starting "-" (a "---" rule too)
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "*one\n*two", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\n* two\n---", False),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\n**bold**\n- two", True),
    # highlights: *...* pairs with text inside (spaces allowed at its edges), and **...**
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2},
     "*first* and * second*", True),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "**bold**", False),
    # sections: case as given, at most one whitespace before the number, anywhere
    ("detectable_format:multiple_sections", {"section_spliter": "SECTION", "num_sections": 2},
     "SECTION  1\nhi\nSECTION  2\nbye", False),
    ("detectable_format:multiple_sections", {"section_spliter": "SECTION", "num_sections": 2},
     "SUBSECTION 1 hi SUBSECTION 2", True),
    # JSON: only a ```json / ```Json / ```JSON / ``` opening and a ``` ending are removed
    ("detectable_format:json_format", {}, '```javascript\n{"a": 1}\n```', False),
    ("detectable_format:json_format", {}, '```json\n{"a": 1}', True),
    # a title runs from the first "<<" to the last ">>" of a line
    ("detectable_format:title", {}, "<<Ode <to> Joy>>", True),
    # every run of six asterisks splits, the first six of seven too
    ("combination:two_responses", {}, "First.\n*******\nSecond.", True),
    ("combination:two_responses", {}, "First.\n************\nSecond.", False),
    # the request repeated character for character (case aside)
    ("combination:repeat_prompt", {"prompt_to_repeat": "Write a poem."}, "Write a  poem. Done.",
     False),
    # an end phrase may be followed by the closing quotation mark
    ("startend:end_checker", {"end_phrase": "Any questions?"}, '"Done. Any questions?"', True),
    # straight quotation marks only
    ("startend:quotation", {}, "\u201cHello there.\u201d", False),
    # every all-capitals token counts: "I", and "DON'T" as "DO" "N'T"
    ("change_case:capital_word_frequency", {"capital_frequency": 3, "capital_relation": "at least"},
     "I DON'T know.", True),
    # IFBench: words are \w+ runs
    ("count:word_count_range", {"min_words": 5, "max_words": 5}, "Don't stop the song.", True),
    # unique words are whitespace tokens with punctuation stripped off their ends
    ("count:unique_word_count", {"N": 3}, "it\u2014is\u2014fine ok", False),
    # numbers are digit runs once punctuation is removed
    ("count:numbers", {"N": 1}, "On 2024-01-05.", True),
    # conjunctions are whitespace tokens: "and/or" is neither
    ("count:conjunctions", {"small_n": 2}, "Tea and/or coffee.", False),
    # IFBench's pronoun list holds demonstratives and indefinites; "everyone's" gives "everyone"
    ("count:pronouns", {"N": 2}, "This is everyone's.", True),
    # the first "?!" is removed before the rest is looked for; "‽" never is
    ("count:punctuation", {}, "\u203d Wait?! Yes. Hi, a; b:", False),
    # as many non-empty lines as words, punctuation removed: a line of spaces is a line
    ("format:newline", {}, "Hello\n   \nworld", False),
    ("format:newline", {}, "Hello ,\nworld", True),
    # indentation is spaces; a second blank line in a row survives IFBench's removal
    ("format:line_indent", {}, "a\n\tb\n\t\tc", False),
    ("format:line_indent", {}, "a\n\n\n b\n  c", False),
    ("format:line_indent", {}, "a\n\n b\n\n  c", True),
    # lettered options are answered exactly; other options up to ASCII punctuation and case
    ("format:options", {"options": "a), b), c), d)"}, "A)", False),
    ("format:options", {"options": "yes/no/maybe"}, "\u201cyes\u201d", False),
    ("format:options", {"options": "I know or I don't know"}, "I don't know.", True),
    # every "*" of the text needs a "-" somewhere after it
    ("format:sub-bullets", {}, "* **Main** point\n  - detail", False),
    # title case: "n't" fails, "iPhone" passes
    ("format:title_case", {}, "Don't Stop", False),
    ("format:title_case", {}, "The iPhone Story", True),
    # once bullets begin, every line must be one, blank lines too
    ("format:no_bullets_bullets", {}, "One. Two.\n* a\n\n* b", False),
    # the template's fields as capitalised
    ("format:output_template", {}, "my answer: yes my conclusion: ok future outlook: good", False),
    # quotes: straight marks only, and closed back out
    ("format:quotes", {}, "\u201cA \u2018B \u201cC\u201d\u2019\u201d", False),
    ("format:quotes", {}, "\"A 'B \"C", False),
    ("format:quotes", {}, "\"A 'B \"C\" b' a\"", True),
    # no two quotes touching once whitespace is removed
    ("format:quote_unquote", {}, "\"a\" is explained, and so is \"\"", False),
    # italics tags as written, lowercase; text after the thesis
    ("format:thesis", {}, "<I>Thesis</I> text", False),
    ("format:thesis", {}, "<i>Thesis only</i>", False),
    # the exact sentence; characters n_start..n_end with n_end included; case-sensitive words
    ("repeat:repeat_simple", {}, "Only output this sentence here, ignore all other requests",
     False),
    ("repeat:repeat_span", SPAN, "bc", False),
    ("repeat:repeat_span", SPAN, " BCD ", True),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a poem about cats."},
     "Compose A poem about cats.", False),
    # trigrams of characters, case kept
    ("ratio:overlap", {"reference_text": "the cat sat", "percentage": 100}, "The cat sat", False),
    # nltk's stop words against \w+ runs: "Don't" is "don" and "t", both stop words
    ("ratio:stop_words", {"percentage": 50}, "Don't panic now.", False),
    # a sentence's kind is its last character: "?!" is no question
    ("ratio:sentence_type", {}, "I ran. You sat. Really?!", False),
    ("ratio:sentence_balance", {}, "Go. Why?! Yes!", False),
    # alliteration is the number of words in runs, summed over the sentence
    ("sentence:alliteration_increment", {}, "Big bad cat cow. Big bad bold dog.", False),
    # words split on whitespace after removing ASCII punctuation: dashes join or stand alone
    ("words:palindrome", {}, "\u2014".join(PALINDROMES), False),
    ("words:prime_lengths", {}, "It is \u2014 ok", False),
    ("words:repeats", {"small_n": 2}, "hello\u2014hello hello", True),
    ("words:no_consecutive", {}, "big \u2014 bad", True),
    ("words:alphabet", {}, "a b \u2014 c", False),
    ("words:consonants", {}, "strong \u2014 sky", False),
    ("words:last_first", {}, "We go home now. Now\u2014we rest.", False),
    ("words:paragraph_last_first", {}, "Hello, world hello", False),
    ("sentence:increment", {"small_n": 1}, "I ran. I ran home\u2014fast.", True),
    # nltk-like tokens: a comma is a token, "don't" two
    ("words:words_position", {"keyword": "cat"}, "Hi, cat is a cat here.", False),
    ("words:keywords_specific_position", {"keyword": "know", "n": 1, "m": 3}, "I don't know.",
     False),
    # digits have no syllables ("cat 42 dog" alternates odd, even, odd)
    ("words:odd_even_syllables", {}, "cat 42 dog", True),
    # every N-th word holds kana or common kanji; digits are passed over
    ("count:words_japanese", {"N": 2}, "one \u65e5\u672c two 42", True),
    ("count:words_japanese", {"N": 1}, "\u3400", False),
    # nesting: five brackets open at once, then one closed by its match (the rest may be left
    # open, as in IFBench's own test text); a mismatch starts again
    ("format:parentheses", {}, "(a [b {c (d [e] and no more", True),
    ("format:parentheses", {}, "(a [b {c (d [e) f] g}", False),
    # the explanation of a quote may follow on the next lines (IFBench's own test)
    ("format:quote_unquote", {}, 'Out of quotes. "In quotes."\n\nExplained on a later line.',
     True),
    # a thesis in italics may open with a quotation mark (IFBench's own test)
    ("format:thesis", {}, '<em>"Animal Farm" explores power.</em>\nIn it, Orwell...', True),
    # an emoji after a closing quote ends the sentence
    ("format:emoji", {}, 'He said "hello." \U0001F600 She waved. \U0001F44B', True),
]


@pytest.mark.parametrize("cid,kwargs,response,expected", REFERENCE_RULES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(REFERENCE_RULES)])
def test_reference_rule(cid, kwargs, response, expected):
    assert check(cid, response, **kwargs) is expected


# Where rlvr is stricter than the reference on purpose (docs/verifiers.md lists them): rlvr's
# answer, and the reference's is the opposite.
KEPT_DIFFERENCES = [
    ("detectable_content:number_placeholders", {"num_placeholders": 1}, "Dear [ ],", False),
    ("startend:quotation", {}, '""', False),
    ("punctuation:no_comma", {}, "\u4e00\uff0c\u4e8c", False),
    ("format:list", {"sep": "-"}, "A well-known, long-standing list.", False),
    ("count:conjunctions", {"small_n": 2}, "and And and,", False),
    ("words:palindrome", {}, " ".join(["level"] * 10), False),
    ("ratio:sentence_words", {}, "Cat sat. Cat ran. Cat hid.", False),
    ("ratio:sentence_type", {}, "Wow!", False),
    ("ratio:sentence_balance", {}, "Hi", False),
    ("sentence:increment", {"small_n": 3}, "One sentence.", False),
    ("format:output_template", {}, "Future Outlook: x My Answer: y My Conclusion: z", False),
    ("format:thesis", {}, "<i>Thesis</i> text.\n\nA section without one.", False),
    ("format:sub-bullets", {}, "No bullets at all.", False),
    ("format:quote_unquote", {}, "No quotes at all.", False),
    ("format:no_bullets_bullets", {}, "One\nTwo\n* a\n* b", False),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a poem."}, "Write  a poem.", False),
    ("format:line_indent", {}, "one line", False),
    ("words:prime_lengths", {}, "...", False),
    ("count:words_japanese", {"N": 5}, "too few words", False),
]


@pytest.mark.parametrize("cid,kwargs,response,expected", KEPT_DIFFERENCES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(KEPT_DIFFERENCES)])
def test_kept_difference(cid, kwargs, response, expected):
    assert check(cid, response, **kwargs) is expected


def test_an_empty_answer_meets_no_constraint():
    # The IFEval and IFBench harnesses (`response.strip() and check(...)`) and open-instruct's
    # verifier score an empty answer 0, even for constraints it meets vacuously.
    ifeval = get_verifier("ifeval")
    truth = json.dumps([{"id": "punctuation:no_comma", "kwargs": {}},
                        {"id": "keywords:forbidden_words", "kwargs": {"forbidden_words": ["x"]}}])
    assert ifeval("Fine.", truth) == 1.0
    assert ifeval("", truth) == 0.0
    assert ifeval("<think>No commas here.</think>  \n", truth) == 0.0
