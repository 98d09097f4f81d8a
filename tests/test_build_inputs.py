"""The start checks that read the filesystem but no weights (`rlvr.run.input_checks`): whether a
run's directories can be made, and how many positions a model places, from its config.json."""

from __future__ import annotations

import json
import os

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.run.input_checks import (check_position_limit, check_run_paths, directory_problem,
                               model_position_limit)


def _model(tmp_path, **config) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


@pytest.mark.parametrize("config, limit", [
    ({"max_position_embeddings": 2048}, 2048),
    ({"n_positions": 64, "n_ctx": 64}, 64),  # GPT-2
    ({"text_config": {"max_position_embeddings": 4096}}, 4096),  # a multimodal model's
    # YaRN extends the original positions by its factor, as vLLM counts them
    ({"max_position_embeddings": 32768, "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, 131072),
    # llama3 scaling is counted in max_position_embeddings already
    ({"max_position_embeddings": 131072, "rope_parameters": {
        "rope_type": "llama3", "factor": 8.0}}, 131072),
    ({"max_position_embeddings": 2048, "rope_parameters": {"rope_type": "default"}}, 2048),
])
def test_the_position_limit_comes_from_config_json(tmp_path, config, limit):
    assert model_position_limit(_model(tmp_path, **config))[0] == limit


def test_no_config_json_or_no_limit_in_it_checks_nothing(tmp_path):
    assert model_position_limit(str(tmp_path)) is None  # a LoRA checkpoint, a hub id
    assert model_position_limit(_model(tmp_path, model_type="mamba")) is None
    cfg = load_config(None, ["rollout.response_length=100000", "algorithm.pack_length=200000",
                             "rollout.engine=transformers"])
    check_position_limit(cfg, str(tmp_path / "nowhere"))


def test_a_multi_turn_episode_is_counted_whole(tmp_path):
    model = _model(tmp_path, max_position_embeddings=500)
    cfg = load_config(None, ["rollout.workflow=multi_turn", "rollout.max_turns=3",
                             "rollout.response_length=128", "data.max_prompt_length=128",
                             "algorithm.pack_length=1024"])
    with pytest.raises(ConfigError, match=r"rollout.response_length=128 x rollout.max_turns=3 "
                                          r"= 512 tokens, more than the model's 500"):
        check_position_limit(cfg, model)
    # `rlvr eval` (trains=False) plays the run's episodes too, turns and all; it once counted
    # one eval answer (256) and let the third turn run past the positions.
    with pytest.raises(ConfigError, match=r"rollout.response_length=128 x rollout.max_turns=3"):
        check_position_limit(cfg, model, trains=False)


def test_directory_problems(tmp_path):
    assert directory_problem(tmp_path / "new" / "run") is None
    (tmp_path / "afile").write_text("x")
    assert "exists and is not a directory" in directory_problem(tmp_path / "afile" / "run")
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    assert "symbolic link to nothing" in directory_problem(tmp_path / "dangling")
    assert "NUL byte" in directory_problem(tmp_path / "a\0b")
    assert "bytes long; this filesystem allows" in directory_problem(tmp_path / ("n" * 300))
    deep = tmp_path.joinpath(*["d" * 200] * 21)  # each name fits, the whole path does not
    assert "passes this system's limit" in directory_problem(deep)


def test_a_state_dir_that_is_a_file_names_its_field(tmp_path):
    (tmp_path / "afile").write_text("x")
    cfg = load_config(None, [f"experiment.output_dir={tmp_path / 'run'}",
                             f"checkpoint.checkpoint_state_dir={tmp_path / 'afile'}"])
    with pytest.raises(ConfigError, match="^checkpoint.checkpoint_state_dir=.*afile: .*is not a "
                                          "directory"):
        check_run_paths(cfg)
    check_run_paths(load_config(None, [f"experiment.output_dir={tmp_path / 'run'}"]))
