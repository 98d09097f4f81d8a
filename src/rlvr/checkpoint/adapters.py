"""LoRA adapter checkpoints: recognise one, load it on its base model, merge it into a plain
Hugging Face model directory (`rlvr merge CHECKPOINT OUT`).

A LoRA run's checkpoints (`rlvr.checkpoint.models`) hold PEFT's adapter files
(`adapter_config.json`, `adapter_model.safetensors`), the tokenizer and `rlvr_checkpoint.json`.
The base model is named by the adapter config's `base_model_name_or_path`, which rlvr writes as
a built-in name (tiny-llama, smollm2-135m-instruct) or an absolute directory
(`rlvr.settings.lora_settings`), so the checkpoint resolves it from any working directory and on
any machine that has the built-ins. The merged directory is written atomically and loads like
any model: `rlvr generate OUT`, the transformers engine, vLLM.

Not here: writing adapters (PEFT's `save_pretrained`, through `rlvr.learner.lora.save_adapter`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from rlvr.checkpoint.atomic import fresh_tmp_dir, publish_dir

ADAPTER_CONFIG = "adapter_config.json"
CHECKPOINT_INFO = "rlvr_checkpoint.json"


def is_adapter_checkpoint(directory: str | Path) -> bool:
    """A directory holding a PEFT adapter (and no full model of its own)."""
    return (Path(directory) / ADAPTER_CONFIG).is_file()


def adapter_base_model(directory: str | Path) -> str:
    """The base model an adapter checkpoint was trained on, as its config names it."""
    path = Path(directory) / ADAPTER_CONFIG
    base = json.loads(path.read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{path} names no base model (base_model_name_or_path)")
    return base


def load_adapter_checkpoint(directory: str | Path, dtype: str = "float32") -> torch.nn.Module:
    """The base model (resolved as `model.name_or_path` is) with the adapter loaded on it, in
    eval mode: a PEFT model computing what the trained policy computed."""
    from peft import PeftModel

    from rlvr.models import load_causal_lm, resolve_model_dir

    if not (Path(directory) / "adapter_model.safetensors").is_file():
        # PEFT would fall back to `adapter_model.bin`, a pickle (house rule: none is loaded)
        raise FileNotFoundError(f"{directory} holds no adapter_model.safetensors; an adapter is "
                                "loaded from safetensors only")
    base_dir = resolve_model_dir(adapter_base_model(directory))
    base = load_causal_lm(base_dir, dtype)
    return PeftModel.from_pretrained(base, str(directory)).eval()


def load_merged_model(directory: str | Path, dtype: str = "float32") -> torch.nn.Module:
    """An adapter checkpoint merged into a plain transformers model (W + scale * B @ A)."""
    return load_adapter_checkpoint(directory, dtype).merge_and_unload()


def merge_adapter_checkpoint(directory: str | Path, out: str | Path,
                             dtype: str = "float32") -> Path:
    """Write `directory`'s adapter merged into its base as a plain model directory `out`
    (weights, config, the checkpoint's tokenizer, and where it came from), atomically."""
    from rlvr.models import load_tokenizer, resolve_model_dir

    directory, out = Path(directory), Path(out)
    if not is_adapter_checkpoint(directory):
        raise FileNotFoundError(f"{directory} is not a LoRA adapter checkpoint (no "
                                f"{ADAPTER_CONFIG}); a full model needs no merge")
    if out.resolve() == directory.resolve():
        raise ValueError(f"merging {directory} into itself would replace the adapter: give "
                         "another output directory")
    merged = load_merged_model(directory, dtype)
    tmp = fresh_tmp_dir(out)
    merged.save_pretrained(tmp, safe_serialization=True)
    has_tokenizer = (directory / "tokenizer_config.json").is_file()
    tokenizer_dir = str(directory) if has_tokenizer else adapter_base_model(directory)
    load_tokenizer(resolve_model_dir(tokenizer_dir)).save_pretrained(tmp)
    info = {"merged_from": str(directory.resolve()), "base_model": adapter_base_model(directory),
            "time": time.time()}
    info_path = directory / CHECKPOINT_INFO
    if info_path.is_file():
        info["step"] = json.loads(info_path.read_text()).get("step")
    (tmp / CHECKPOINT_INFO).write_text(json.dumps(info))
    return publish_dir(tmp, out)
