"""Model resolution: built-ins are materialised once into the cache and load from it."""

import os
import time

import pytest

from rlvr.models import load_causal_lm, load_tokenizer, resolve_model_dir


def test_tiny_model_is_built_from_a_config(tiny_model_dir, tiny_tokenizer):
    model = load_causal_lm(tiny_model_dir)
    assert model.config.num_hidden_layers == 2 and len(tiny_tokenizer) == model.config.vocab_size
    ids = tiny_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}],
                                             add_generation_prompt=True, tokenize=False)
    assert ids == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_unknown_model_name_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="built-in"):
        resolve_model_dir("no-such-model")


@pytest.mark.slow
def test_smollm2_loads_from_cache_quickly():
    model_dir = resolve_model_dir("smollm2-135m-instruct")  # converts on first use (~45 s)
    start = time.perf_counter()
    model = load_causal_lm(model_dir)
    tokenizer = load_tokenizer(model_dir)
    elapsed = time.perf_counter() - start
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert tokenizer.eos_token == "<|im_end|>"
    assert elapsed < 5.0  # well under a second on an idle machine; slack for a loaded CI box


_MARKER_CODE = """import pathlib, sys
pathlib.Path(sys.argv[0] if False else __file__).with_name("RAN").write_text("ran")
from transformers import PretrainedConfig
class Config(PretrainedConfig):
    model_type = "rlvr_code_carrier"
class Model:
    pass
class Tokenizer:
    pass
"""


def test_a_model_or_tokenizer_that_ships_code_is_refused_even_when_the_terminal_says_yes(
        tmp_path):
    """Unset, transformers asked on stdin whether to run a directory's own code (`auto_map`),
    and a `y` (or `yes |` in a script) ran it."""
    import json
    import subprocess
    import sys

    (tmp_path / "carrier.py").write_text(_MARKER_CODE)
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "rlvr_code_carrier",
        "auto_map": {"AutoConfig": "carrier.Config", "AutoModelForCausalLM": "carrier.Model"}}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "auto_map": {"AutoTokenizer": ["carrier.Tokenizer", None]},
        "tokenizer_class": "Tokenizer"}))
    for loader in ("load_causal_lm", "load_tokenizer"):
        script = (f"from rlvr.models import {loader}\n"
                  f"try:\n    {loader}({str(tmp_path)!r})\n"
                  "except ValueError as e:\n    print('refused:', e)\n")
        done = subprocess.run([sys.executable, "-c", script], input="y\ny\n", text=True,
                              capture_output=True, timeout=120,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert "refused:" in done.stdout, (loader, done.stdout, done.stderr[-2000:])
        assert "trust_remote_code" in done.stdout
        assert not (tmp_path / "RAN").exists(), loader


def test_weights_are_loaded_from_safetensors_only(tmp_path, tiny_model_dir):
    """A `pytorch_model.bin` is a pickle: torch's restricted unpickler loaded it."""
    import torch

    model = load_causal_lm(tiny_model_dir)
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")  # how older checkpoints ship
    with pytest.raises(OSError, match="safetensors"):
        load_causal_lm(str(tmp_path))


def test_an_adapter_is_loaded_from_safetensors_only(tmp_path):
    from rlvr.checkpoint.adapters import load_adapter_checkpoint

    (tmp_path / "adapter_config.json").write_text('{"base_model_name_or_path": "tiny-llama"}')
    (tmp_path / "adapter_model.bin").write_bytes(b"a pickle PEFT would fall back to")
    with pytest.raises(FileNotFoundError, match="adapter_model.safetensors"):
        load_adapter_checkpoint(tmp_path)
