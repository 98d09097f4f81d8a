"""The JSON files transformers parses from a model or tokenizer directory are untrusted input:
one that is not JSON, not a JSON object, or nested deeply is refused with a ConfigError (exit 2,
one line) naming the file, and tokenizer.json is one the tokenizers library opens. Before these
checks each failed inside transformers with a JSONDecodeError, RecursionError, AttributeError,
TypeError, KeyError or the tokenizers library's bare Exception."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlvr.config import ConfigError
from rlvr.models import load_causal_lm, load_tokenizer
from tests.cli_checks import fails_in_one_line

REPO = Path(__file__).resolve().parents[2]
SMOLLM2 = Path.home() / ".cache" / "rlvr" / "models" / "smollm2-135m-instruct"
NESTED = '{"a":' + "[" * 100_000 + "]" * 100_000 + "}"  # past json's recursion limit
BAD_JSON = {"not-json": ("{nope", "is not valid JSON"),
            "list": ("[1, 2]", "holds a JSON list, not a JSON object"),
            "nested-deeply": (NESTED, "maximum recursion depth")}


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(tiny_model_dir, copy)
    return copy


# Each small JSON file, and the load that parsed it unchecked. chat_template.json: transformers
# 5.19's AutoTokenizer skips it beside a chat_template.jinja, but its processors read it.
SMALL_FILES = {"tokenizer_config.json": load_tokenizer, "special_tokens_map.json": load_tokenizer,
               "added_tokens.json": load_tokenizer, "chat_template.json": load_tokenizer,
               "config.json": load_tokenizer, "generation_config.json": load_causal_lm}


@pytest.mark.parametrize("bad", BAD_JSON)
@pytest.mark.parametrize("name", SMALL_FILES)
def test_a_malformed_json_file_is_refused_naming_it(model_copy, name, bad):
    text, message = BAD_JSON[bad]
    (model_copy / name).write_text(text)
    with pytest.raises(ConfigError, match=f"{model_copy / name} ") as e:
        SMALL_FILES[name](str(model_copy))
    assert message in str(e.value)


def _tokenizer_json(directory: Path, **changes) -> str:
    data = json.loads((directory / "tokenizer.json").read_text())
    data.update(changes)
    return json.dumps(data)


# What each hostile tokenizer.json is (a function of the tiny model's), and a phrase of the
# library's refusal.
HOSTILE_TOKENIZERS = {
    "not-json": (lambda m: "{nope", "key must be a string"),
    "list": (lambda m: "[1, 2]", "expected struct Tokenizer"),
    "nested-deeply": (lambda m: NESTED, "at line 1"),
    # 200 levels: within json's limit, past the tokenizers library's parser's 128
    "nested-200": (lambda m: _tokenizer_json(m, extra=[json.loads("[" * 200 + "]" * 200)]),
                   "at line 1"),
    "empty-object": (lambda m: "{}", "Model missing"),
    "model-list": (lambda m: _tokenizer_json(m, model=[1]), "did not match any variant"),
}


@pytest.mark.parametrize("name", HOSTILE_TOKENIZERS)
def test_a_hostile_tokenizer_json_is_refused_naming_it(model_copy, name):
    make, message = HOSTILE_TOKENIZERS[name]
    (model_copy / "tokenizer.json").write_text(make(model_copy))
    with pytest.raises(ConfigError, match=f"{model_copy / 'tokenizer.json'} is not a tokenizer "
                                          "the tokenizers library opens") as e:
        load_tokenizer(str(model_copy))
    assert message in str(e.value)


def test_the_checks_leave_the_built_in_tokenizers_alone(tiny_model_dir):
    load_tokenizer(tiny_model_dir)
    if (SMOLLM2 / "tokenizer.json").is_file():
        load_tokenizer(str(SMOLLM2))


@pytest.mark.parametrize("name, text, expected", [
    ("tokenizer.json", NESTED, "is not a tokenizer the tokenizers library opens"),
    ("tokenizer_config.json", "{nope", "is not valid JSON"),
    ("generation_config.json", NESTED, "is not valid JSON"),
], ids=["tokenizer", "tokenizer-config", "generation-config"])
def test_train_on_a_malformed_json_file_exits_2_in_one_line(model_copy, tmp_path, capsys, name,
                                                            text, expected):
    (model_copy / name).write_text(text)
    out = tmp_path / "run"
    fails_in_one_line(capsys, ["train", str(REPO / "configs" / "tiny.yaml"),
                               f"model.name_or_path={model_copy}", f"experiment.output_dir={out}"],
                      str(model_copy / name), expected)
    assert not out.exists()


def test_a_tokenizer_transformers_cannot_build_is_refused_naming_the_directory(model_copy):
    """The tokenizers library opens a tokenizer.json without `added_tokens`; transformers then
    raised KeyError out of its own loader."""
    data = json.loads((model_copy / "tokenizer.json").read_text())
    del data["added_tokens"]
    (model_copy / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=f"{model_copy}: transformers cannot build a "
                                          "tokenizer from it: KeyError"):
        load_tokenizer(str(model_copy))
