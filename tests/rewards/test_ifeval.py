"""The `ifeval` verifier and its constraint checkers: every IFEval id met and violated, IFBench
ids by sample, the <think> trap, fraction scoring, ground-truth shapes and rejections, text
splitting, language identification, and bounded time on hostile 100 KB answers."""

import inspect
import json
import time

import pytest

import rlvr.rewards.ifeval  # noqa: F401  (registers the verifier and constraints)
from rlvr.rewards.ifeval import CONSTRAINTS, IFEVAL_IDS, get_checker, parse_constraints
from rlvr.rewards.ifeval.language import is_language
from rlvr.rewards.ifeval.text import split_sentences, split_words
from rlvr.rewards.registry import get_verifier, ground_truth_check

ifeval = get_verifier("ifeval")


def gt(*constraints: tuple[str, dict]) -> str:
    return json.dumps([{"id": i, "kwargs": k} for i, k in constraints])


# (id, kwargs, an answer meeting it, an answer violating it)
IFEVAL_CASES = [
    ("keywords:existence", {"keywords": ["cat", "blue sky"]},
     "The CATegory has a Blue sky.", "A dog under a blue sky."),
    ("keywords:frequency", {"keyword": "tea", "frequency": 2, "relation": "at least"},
     "Tea first, then more tea.", "Tea once, then coffee."),
    ("keywords:forbidden_words", {"forbidden_words": ["bad"]},
     "A badger is fine.", "That was Bad."),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 2, "let_relation": "less than"},
     "A quiet day.", "Zebras zigzag."),
    ("language:response_language", {"language": "es"},
     "El perro es muy grande y la casa es de color azul.",
     "The dog is very big and the house is blue."),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "less than"},
     "Dr. Smith paid 3.5 dollars. He left.", "One. Two. Three."),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2},
     "First part.\n***\nSecond part.", "First part.\n***\n\n***\nSecond part."),
    ("length_constraints:number_words", {"num_words": 6, "relation": "less than"},
     "Stop the well-known song.", "Don't stop the song now."),  # \w+ runs: 5 and 6
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
     "First we go.\n\nThen, we stop.", "First we go.\n\nLater we stop."),
    ("detectable_content:number_placeholders", {"num_placeholders": 2},
     "Dear [name], meet me at [place].", "Dear [name], meet me at [ ]."),
    ("detectable_content:postscript", {"postscript_marker": "P.S."},
     "Hello.\n\nP.S. See you.", "Hello.\n\nP.S see you."),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2},
     "Intro:\n* one\n- two", "Intro:\n* one\n* two\n* three\n**bold**"),
    ("detectable_format:constrained_response", {},
     "My answer is maybe.", "Maybe, who knows."),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2},
     "*first* and **second**", "*first* and * *"),
    ("detectable_format:multiple_sections", {"section_spliter": "SECTION", "num_sections": 2},
     "SECTION 1\nhello\nSECTION 2\nbye", "SECTION 1\nhello only"),
    ("detectable_format:json_format", {},
     '```json\n{"a": [1, 2]}\n```', 'Here it is: {"a": 1}'),
    ("detectable_format:title", {}, "<<Ode to Joy>>\nLa la.", "<< >>\nLa la."),
    ("combination:two_responses", {}, "First take.\n******\nSecond take.",
     "Same.\n******\nSame."),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Write a poem about cats."},
     "Write a poem about cats.\nCats are soft.", "Write a  poem about cats.\nCats are soft."),
    ("startend:end_checker", {"end_phrase": "Any other questions?"},
     "Done. Any other questions?  ", "Any other questions? Bye."),
    ("startend:quotation", {}, '"Hello there."', 'Hello "there".'),
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "at least"},
     "I am A person.", "I am a person."),  # "I" and "A" count, as in IFEval
    ("change_case:english_capital", {}, "THE CAT IS ON THE MAT.", "THE CAT is on the mat."),
    ("change_case:english_lowercase", {}, "the cat is on the mat.", "The cat is on the mat."),
    ("punctuation:no_comma", {}, "No commas here.", "One, two."),
]

# IFBench ids by sample: (id, kwargs, met, violated)
IFBENCH_CASES = [
    ("count:word_count_range", {"min_words": 2.0, "max_words": 3.0}, "Two words", "One"),
    ("count:keywords_multiple", dict(keyword1="a1", keyword2="b2", keyword3="c3", keyword4="d4",
                                     keyword5="e5"),
     "a1 " + "b2 " * 2 + "c3 " * 3 + "d4 " * 5 + "e5 " * 7, "a1 b2 c3 d4 e5"),
    ("format:parentheses", {}, "(a [b {c (d [e])}])", "(a [b {c (d)}])"),
    ("format:quotes", {}, "He said \"she told me 'they shouted \"run\"'\" today.",
     "He said \"don't go\" today."),
    ("format:output_template", {},
     "My Answer: yes My Conclusion: fine Future Outlook: bright",
     "Sure! My Answer: yes My Conclusion: fine Future Outlook: bright"),
    ("format:emoji", {}, "I like tea 🍵. It is warm. 🔥", "I like tea 🍵. It is warm."),
    ("ratio:sentence_type", {}, "I ran. You sat. Why?", "I ran. Why?"),
    ("ratio:stop_words", {"percentage": 30.0}, "Cats chase mice happily.", "The cat is on the mat."),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a poem about cats."},
     "Compose a poem about cats.", "Write a poem about cats."),
    ("repeat:repeat_span", {"prompt_to_repeat": "abcdef ghi", "n_start": 1, "n_end": 3},
     "bcd", "abc"),
    ("words:palindrome", {}, " ".join(["level", "radar", "civic", "refer", "rotor", "kayak",
                                       "madam", "stats", "tenet", "sagas"]), "level radar"),
    ("sentence:increment", {"small_n": 1}, "I ran. I ran home. I ran home fast.",
     "I ran. I ran home fast."),
    ("count:words_japanese", {"N": 2}, "one 日本 two ねこ", "one two 日本 ねこ"),
]


@pytest.mark.parametrize("cid,kwargs,met,violated", IFEVAL_CASES + IFBENCH_CASES,
                         ids=[c[0] for c in IFEVAL_CASES + IFBENCH_CASES])
def test_constraint_met_and_violated(cid, kwargs, met, violated):
    truth = gt((cid, kwargs))
    assert ifeval(met, truth) == 1.0
    assert ifeval(violated, truth) == 0.0


@pytest.mark.parametrize("hedge, truth", [
    # issue 48: IFEval pays any response holding one of the three, so all three scored 1
    ("My answer is yes. My answer is no. My answer is maybe.",
     ("detectable_format:constrained_response", {})),
    ("My answer is yes.\nOr: my answer is no", ("detectable_format:constrained_response", {})),
    ("My answer is maybe. My answer is Yes!", ("detectable_format:constrained_response", {})),
    # IFBench's options: the whole answer must be one option
    ("yes/no/maybe", ("format:options", {"options": "yes/no/maybe"})),
    ("yes or no", ("format:options", {"options": "yes/no/maybe"})),
    ("a), b), c), d)", ("format:options", {"options": "a), b), c), d)"})),
])
def test_giving_every_option_earns_nothing(hedge, truth):
    assert ifeval(hedge, gt(truth)) == 0.0


@pytest.mark.parametrize("answer", ["My answer is yes. It is, yes.",
                                    "My answer is no. Repeat: My answer is no.",
                                    "Thinking it over, my answer is maybe. My answer is maybe."])
def test_one_constrained_answer_given_twice_is_met(answer):
    assert ifeval(answer, gt(("detectable_format:constrained_response", {}))) == 1.0


def test_every_ifeval_id_is_supported_and_tested():
    assert len(IFEVAL_IDS) == 25
    assert set(IFEVAL_IDS) <= set(CONSTRAINTS)
    assert {c[0] for c in IFEVAL_CASES} == set(IFEVAL_IDS)


def test_constraint_met_only_while_thinking_earns_nothing():
    truth = gt(("keywords:existence", {"keywords": ["banana"]}))
    assert ifeval("<think>I must say banana.</think>An apple.", truth) == 0.0
    assert ifeval("<think>fruit?</think><answer>A banana.</answer>", truth) == 1.0
    assert ifeval("<think>banana banana", truth) == 0.0  # never answered


def test_score_is_the_fraction_met():
    truth = gt(("punctuation:no_comma", {}),
               ("keywords:existence", {"keywords": ["sun"]}),
               ("length_constraints:number_words", {"relation": "less than", "num_words": 3}))
    assert ifeval("The sun, rising.", truth) == pytest.approx(1 / 3)
    assert ifeval("Sun rising", truth) == 1.0
    assert ifeval("Moon, setting slowly.", truth) == 0.0


@pytest.mark.parametrize("truth", [
    json.dumps({"instruction_id": ["punctuation:no_comma", "keywords:existence"],
                "kwargs": [None, {"keywords": ["sun"], "num_words": None}]}),
    json.dumps([{"id": "punctuation:no_comma", "kwargs": {}},
                {"id": "keywords:existence", "kwargs": {"keywords": ["sun"]}}]),
], ids=["open-instruct", "list"])
def test_both_ground_truth_shapes(truth):
    assert ifeval("The sun rises.", truth) == 1.0
    assert ifeval("The sun, rising.", truth) == 0.5


def test_single_constraint_object():
    assert ifeval("Hi there.", json.dumps({"id": "punctuation:no_comma"})) == 1.0


@pytest.mark.parametrize("truth,message", [
    ("not json", "not JSON"),
    ("[]", "no constraint"),
    (gt(("keywords:nonsense", {})), "unknown instruction constraint 'keywords:nonsense'"),
    (gt(("punctuation:no_comma", {"num_words": 3})), "punctuation:no_comma"),
    (gt(("length_constraints:number_words", {"relation": "less than"})), "num_words"),
    (gt(("length_constraints:number_words", {"relation": "about", "num_words": 5})), "about"),
    (gt(("length_constraints:number_words", {"relation": "less than", "num_words": 2.5})),
     "num_words=2.5"),
    (gt(("keywords:existence", {"keywords": "cat"})), "keywords='cat'"),
    (gt(("language:response_language", {"language": "xx"})), "'xx'"),
    (json.dumps({"instruction_id": ["punctuation:no_comma"], "kwargs": []}), "same length"),
    (json.dumps([{"id": "punctuation:no_comma", "kwarg": {}}]), "unknown fields"),
])
def test_bad_ground_truths_are_rejected_with_a_clear_message(truth, message):
    check = ground_truth_check("ifeval")
    with pytest.raises(ValueError, match="ifeval") as err:
        check(truth)
    assert message in str(err.value)
    with pytest.raises(ValueError):
        ifeval("anything", truth)  # an error for the scorer to count, never a silent 0


def test_ground_truth_check_returns_constraints():
    (constraint,) = parse_constraints(gt(("count:numbers", {"N": 2.0})))
    assert (constraint.id, constraint.kwargs) == ("count:numbers", {"N": 2.0})


@pytest.mark.parametrize("text,expected", [
    ("Dr. Smith arrived. He was late.", 2),
    ("It costs 3.5 dollars. Cheap!", 2),
    ("Wait... what happened? Nothing.", 2),
    ("I waited... Then he came.", 2),
    ("J. R. R. Tolkien wrote books, e.g. the Hobbit.", 1),
    ("He wrote books, e.g. The Hobbit.", 2),  # punkt: "The" usually starts a sentence
    ("1. First item\n2. Second item", 2),
    # A full stop after an ordinary word ends a sentence before a lowercase letter too (punkt).
    ("this is one. this is two.", 2),
    ("we met at noon. then we left. it rained.", 3),
    ("etc. and so on. next.", 2),  # an abbreviation goes on before lowercase
    # A line break or blank line is no sentence end: a salutation or a placeholder line is part
    # of the sentence after it (punkt).
    ("Dear John,\n\nThank you for the letter.", 1),
    ("[Name]\n[Address]\n\nWe are glad to offer you the job.", 1),
    ("Best regards,\n[Your Name]", 1),
    ('He said "Stop." Then he left.', 2),
    ("No terminator at all", 1),
    ("", 0),
    ("...", 0),
])
def test_sentence_splitting(text, expected):
    assert len(split_sentences(text)) == expected


def test_word_splitting_keeps_contractions_and_hyphens():
    assert split_words("Don't re-use 3.14, ok?") == ("Don't", "re-use", "3.14", "ok")


@pytest.mark.parametrize("text,code", [
    ("The weather is nice and the sun is out.", "en"),
    ("Le chat est dans la maison et il ne veut pas sortir.", "fr"),
    ("Der Hund ist nicht in dem Haus und die Katze auch nicht.", "de"),
    ("Это очень хороший день, и мы только что пришли домой.", "ru"),
    ("Це дуже гарний день, і ми щойно прийшли додому.", "uk"),
    ("今日はとても良い天気ですね。", "ja"),
    ("오늘은 날씨가 아주 좋습니다.", "ko"),
    ("यह एक बहुत अच्छा दिन है और हम घर में हैं।", "hi"),
    ("هذا يوم جميل جدا في المدينة", "ar"),
])
def test_language_identification(text, code):
    assert is_language(text, code)
    others = {"en": "es", "fr": "en", "de": "en", "ru": "uk", "uk": "ru", "ja": "zh",
              "ko": "ja", "hi": "mr", "ar": "fa"}
    assert not is_language(text, others[code])


# Kwargs for every constraint that takes any, so the hostile test covers the whole registry.
SAMPLE_KWARGS = {cid: kwargs for cid, kwargs, _, _ in IFEVAL_CASES + IFBENCH_CASES}
SAMPLE_KWARGS.update({
    "count:unique_word_count": {"N": 5}, "count:numbers": {"N": 2},
    "count:conjunctions": {"small_n": 2}, "count:person_names": {"N": 2},
    "count:pronouns": {"N": 2}, "format:list": {"sep": "!?!?"},
    "format:options": {"options": "yes/no/maybe"}, "words:repeats": {"small_n": 2},
    "words:words_position": {"keyword": "cat"},
    "words:keywords_specific_position": {"keyword": "cat", "n": 2, "m": 3},
    "sentence:keyword": {"word": "cat", "N": 2},
    "ratio:overlap": {"reference_text": "the cat sat on the mat", "percentage": 50},
    "rlvr:topic": {"topic_words": ["cat", "cats"]},
})


def all_constraints_ground_truth() -> str:
    return gt(*((cid, SAMPLE_KWARGS.get(cid, {})) for cid in sorted(CONSTRAINTS)))


def test_sample_kwargs_cover_every_constraint():
    needing = {cid for cid, fn in CONSTRAINTS.items()
               if len(inspect.signature(fn).parameters) > 1}
    assert not needing - set(SAMPLE_KWARGS)
    assert len(parse_constraints(all_constraints_ground_truth())) == len(CONSTRAINTS)


HOSTILE = [
    "x" * 100_000, "9" * 100_000, "\n" * 50_000, "[" + "y" * 100_000, "<<" + "z " * 50_000,
    "{" * 20_000 + "[(" * 20_000, "Dr. " * 25_000, "1. " * 33_000, "a. " * 33_000,
    "! " * 50_000 + "a", "*a " * 33_000, "* " * 50_000, "P.S. " * 20_000, '"\'' * 50_000,
    "<think>" * 10_000 + "</think>" + "*" * 50_000, "🤖. " * 30_000, "\t " * 50_000,
    "My Answer: " * 9_000, "日本 " * 33_000, "The cat sat. " * 8_000,
    "!?" * 50_000 + "🎉", "[" * 100_000, "*\n" * 50_000,
]


def test_every_checker_is_bounded_on_hostile_answers():
    truth = all_constraints_ground_truth()
    slowest = []
    for text in HOSTILE:
        start = time.monotonic()
        score = ifeval(text, truth)
        slowest.append((time.monotonic() - start, text[:12]))
        assert 0.0 <= score <= 1.0
    # Linear checks take well under a second per answer here; anything quadratic takes minutes.
    worst = max(slowest)
    assert worst[0] < 10.0, f"{worst[1]!r} took {worst[0]:.1f} s over all constraints"


def test_each_hostile_answer_is_fast_per_constraint():
    for cid in sorted(CONSTRAINTS):
        checker, kwargs = get_checker(cid), SAMPLE_KWARGS.get(cid, {})
        for text in HOSTILE[:6]:
            start = time.monotonic()
            checker(text, **kwargs)
            assert time.monotonic() - start < 2.0, (cid, text[:12])


def test_a_lowercase_answer_counts_its_sentences():
    # english_lowercase and number_sentences together: the full stops before lowercase words
    # end sentences (rlvr used to count one sentence here and score 0.5).
    truth = gt(("change_case:english_lowercase", {}),
               ("length_constraints:number_sentences", {"num_sentences": 3,
                                                        "relation": "at least"}))
    assert ifeval("the sun is out today. the birds are singing. we should walk.", truth) == 1.0


ENGLISH = ("The capital of France is Paris. It is a large city and it is famous for the Eiffel "
           "Tower, which was built for the world fair.")


@pytest.mark.parametrize("padding", [
    " la" * 14,  # every occurrence used to count: one word, repeated, outvoted the answer
    " El la los las de que y en es por para con.",  # more distinct words, fewer than English's
    " ы" * 20,
], ids=["one_word", "word_salad", "letters"])
def test_a_few_words_of_another_language_do_not_make_an_answer_that_language(padding):
    for code in ("es", "fr", "it", "pt"):
        assert not is_language(ENGLISH + padding, code)
    assert is_language(ENGLISH + padding, "en")


def test_a_text_in_the_language_passes_with_a_foreign_phrase_in_it():
    spanish = ("La capital de Francia es París. Es una ciudad grande y es famosa por la Torre "
               "Eiffel, que se construyó para la exposición universal. The end.")
    assert is_language(spanish, "es") and not is_language(spanish, "en")
