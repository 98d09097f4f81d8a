"""`rlvr serve` checks its input (the model argument, the device, the directory of its key)
before it writes its key: a refused command leaves no server.key behind, exits 2 in one line,
and names what the user gave (the MODEL_OR_CHECKPOINT argument, not `model.name_or_path`)."""

from __future__ import annotations

import pytest
import torch

import rlvr.serving as serving
from rlvr.serving.auth import KEY_ENV, KEY_FILE_ENV

from tests.cli_checks import fails_in_one_line


@pytest.fixture(autouse=True)
def no_server(monkeypatch):
    """No key in the environment (so serve would write one); starting a server fails the test."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.setattr(serving.ServerProcess, "start",
                        lambda *a, **k: pytest.fail("a server started past a failed check"))


def _refused(capsys, args, *expected):
    return fails_in_one_line(capsys, ["serve", *args, "--port", "0"], *expected)


def test_a_model_that_does_not_exist_writes_no_key_and_names_the_argument(tmp_path, capsys):
    out = tmp_path / "srv"
    line = _refused(capsys, ["no-such-model", "configs/tiny.yaml",
                             f"experiment.output_dir={out}"],
                    "MODEL_OR_CHECKPOINT argument 'no-such-model' is neither a built-in")
    assert "model.name_or_path" not in line
    assert not (out / "server.key").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_missing_gpu_is_exit_2_and_writes_no_key(tmp_path, capsys):
    _refused(capsys, ["tiny-llama", "configs/tiny.yaml", f"experiment.output_dir={tmp_path}",
                      "model.device=cuda"], "model.device=cuda")
    assert not (tmp_path / "server.key").exists()


def test_an_output_dir_that_is_a_file_is_refused_naming_the_field(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    _refused(capsys, ["tiny-llama", "configs/tiny.yaml", f"experiment.output_dir={afile}"],
             "experiment.output_dir", "exists and is not a directory")
    assert afile.read_text() == "x"
