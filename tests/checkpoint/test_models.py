"""Model checkpoints: atomic, loadable, pruned to the last N."""

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from rlvr.checkpoint import latest_checkpoint, list_checkpoints, save_model_checkpoint
from rlvr.run.errors import SaveFailed


def _model():
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                        num_hidden_layers=1, num_attention_heads=2,
                                        num_key_value_heads=1))


def test_round_trip_and_keep_last_n(tmp_path):
    model = _model()
    for step in (1, 2, 3):
        save_model_checkpoint(model, None, tmp_path, step, keep_last_n=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000002", "step_000003"]
    loaded = AutoModelForCausalLM.from_pretrained(latest_checkpoint(tmp_path))
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values()):
        assert torch.equal(a, b)


def test_a_crash_mid_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    model = _model()
    good = save_model_checkpoint(model, None, tmp_path, 1, keep_last_n=3)

    def crash(self, path, **kw):
        (path / "partial").mkdir(parents=True)
        raise OSError("disk full")

    monkeypatch.setattr(LlamaForCausalLM, "save_pretrained", crash)
    with pytest.raises(SaveFailed, match="the model checkpoint .*step_000002 failed "
                                         r"\(OSError: disk full\)"):
        save_model_checkpoint(model, None, tmp_path, 2, keep_last_n=3)
    assert list_checkpoints(tmp_path) == [good] and (good / "model.safetensors").exists()
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))  # its space given back at once
    monkeypatch.undo()
    save_model_checkpoint(model, None, tmp_path, 3, keep_last_n=3)  # cleans the stale temp dir
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
