"""A model directory is untrusted input: weights that do not match the config, sizes the
weights contradict, files that are FIFOs or links out of the directory, unusable special tokens
and malformed rope scalings are refused with ConfigError (exit 2) before a run writes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from rlvr.config import ConfigError
from rlvr.run.input_checks import model_position_limit
from rlvr.models import load_causal_lm, load_tokenizer, resolve_model_dir
from tests.cli_checks import fails_in_one_line

REPO = Path(__file__).resolve().parents[2]
SMOLLM2 = Path.home() / ".cache" / "rlvr" / "models" / "smollm2-135m-instruct"


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(tiny_model_dir, copy)
    return copy


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _train(capsys, model: Path, tmp_path: Path, *expected: str) -> None:
    out = tmp_path / "run"
    fails_in_one_line(capsys, ["train", str(REPO / "configs" / "tiny.yaml"),
                               f"model.name_or_path={model}", f"experiment.output_dir={out}"],
                      *expected)
    assert not out.exists()


# 1. weights that do not match the config


def test_the_built_in_models_load_without_a_missing_key(tiny_model_dir):
    load_causal_lm(tiny_model_dir)  # its lm_head is tied: absent from the file, and fine


@pytest.mark.skipif(not (SMOLLM2 / "model.safetensors").is_file(), reason="SmolLM2 not cached")
def test_smollm2_loads():
    load_causal_lm(str(SMOLLM2))


def test_renamed_weights_are_refused_not_initialised_at_random(model_copy):
    weights = load_file(model_copy / "model.safetensors")
    save_file({f"junk.{k}": v for k, v in weights.items()}, model_copy / "model.safetensors")
    with pytest.raises(ConfigError, match="missing from the weights.*model.embed_tokens"):
        load_causal_lm(str(model_copy))


def test_another_layer_count_is_refused(model_copy):
    _edit_json(model_copy / "config.json", num_hidden_layers=4)
    with pytest.raises(ConfigError, match="num_hidden_layers=4.*hold 2 layers"):
        load_causal_lm(str(model_copy))


def test_train_on_mismatched_weights_exits_2_and_writes_nothing(model_copy, tmp_path, capsys):
    _edit_json(model_copy / "config.json", num_hidden_layers=4)
    _train(capsys, model_copy, tmp_path, str(model_copy), "num_hidden_layers=4")


# 2. sizes checked against the weights' headers before modules are built


def test_a_million_layers_is_refused_within_seconds(model_copy):
    _edit_json(model_copy / "config.json", num_hidden_layers=10**6)
    start = time.monotonic()
    with pytest.raises(ConfigError, match="num_hidden_layers=1000000"):
        load_causal_lm(str(model_copy))
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("changes", [{"vocab_size": 10**9}, {"hidden_size": 10**5}])
def test_an_embedding_the_weights_do_not_hold_is_refused(model_copy, changes):
    _edit_json(model_copy / "config.json", **changes)
    with pytest.raises(ConfigError, match="model.embed_tokens.weight has shape"):
        load_causal_lm(str(model_copy))


# 3. the directory's files: regular, inside, not too large


def test_a_fifo_config_exits_2_without_hanging(model_copy, tmp_path):
    (model_copy / "config.json").unlink()
    os.mkfifo(model_copy / "config.json")
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from rlvr.cli import main; sys.exit(main())",
         "train", str(REPO / "configs" / "tiny.yaml"), f"model.name_or_path={model_copy}",
         f"experiment.output_dir={out}"],
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "config.json is not a regular file" in done.stderr
    assert not out.exists()


def test_a_link_out_of_the_directory_exits_2(model_copy, tmp_path, capsys):
    secret = tmp_path / "secret"
    secret.write_text("PRIVATE KEY")
    secret.chmod(0o600)
    (model_copy / "chat_template.jinja").unlink()
    (model_copy / "chat_template.jinja").symlink_to(secret)
    _train(capsys, model_copy, tmp_path, "chat_template.jinja links to", "outside")


def test_a_link_within_the_directory_is_allowed(model_copy):
    (model_copy / "config.json").rename(model_copy / "real_config")
    (model_copy / "config.json").symlink_to("real_config")
    assert resolve_model_dir(str(model_copy)) == str(model_copy)


def test_a_device_is_refused(model_copy):
    (model_copy / "tokenizer.json").unlink()
    (model_copy / "tokenizer.json").symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match="tokenizer.json links to /dev/zero"):
        resolve_model_dir(str(model_copy))


# 4. special tokens


@pytest.mark.parametrize("changes", [{"eos_token": ""}, {"eos_token": " "},
                                     {"eos_token": None, "pad_token": None}])
def test_an_unusable_eos_token_is_refused(model_copy, changes):
    _edit_json(model_copy / "tokenizer_config.json", **changes)
    with pytest.raises(ConfigError, match="tokenizer_config.json: eos_token="):
        load_tokenizer(str(model_copy))


def test_more_tokens_than_embedding_rows_is_refused(model_copy):
    _edit_json(model_copy / "config.json", vocab_size=100)
    with pytest.raises(ConfigError, match="more than vocab_size=100"):
        load_tokenizer(str(model_copy))


def test_an_empty_eos_token_exits_2_before_the_run_writes(model_copy, tmp_path, capsys):
    _edit_json(model_copy / "tokenizer_config.json", eos_token="")
    _train(capsys, model_copy, tmp_path, "eos_token=''")


# 5. malformed config.json values in rlvr's own position check


@pytest.mark.parametrize("config", [
    [1, 2, 3],
    {"max_position_embeddings": 2048, "rope_scaling": [1, 2]},
    {"max_position_embeddings": 2048, "rope_scaling": "yarn"},
    {"max_position_embeddings": 2048, "rope_parameters": {"rope_type": "yarn", "factor": "x"}},
    {"max_position_embeddings": 2048,
     "rope_parameters": {"rope_type": "yarn", "factor": float("inf")}},
    {"max_position_embeddings": 2048,
     "rope_parameters": {"rope_type": "linear", "factor": float("nan")}},
    {"max_position_embeddings": 2048, "rope_parameters": {
        "rope_type": "yarn", "factor": 4, "original_max_position_embeddings": "x"}},
], ids=["list", "rope-list", "rope-string", "factor-string", "factor-inf", "factor-nan",
        "base-string"])
def test_a_malformed_config_is_a_config_error(tmp_path, config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="config.json"):
        model_position_limit(str(tmp_path))


def test_a_valid_rope_scaling_still_extends_the_limit(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(
        {"max_position_embeddings": 2048, "rope_scaling": {"rope_type": "yarn", "factor": 4}}))
    assert model_position_limit(str(tmp_path))[0] == 8192


def test_a_deeply_nested_config_is_a_config_error(tmp_path):
    # json raises RecursionError (not a ValueError) past about 1,000 levels
    (tmp_path / "config.json").write_text('{"a":' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ConfigError, match="config.json is not valid JSON"):
        model_position_limit(str(tmp_path))
