"""Model resolution: built-ins are materialised once into the cache and load from it."""

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
