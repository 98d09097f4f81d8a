"""Where models come from: built-in names materialised once into a local cache, local
directories, or hub ids. Loading returns plain transformers objects; nothing here trains.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import torch

from rlvr.config import ConfigError
from rlvr.console import phase
from rlvr.models.checks import (check_config_against_weights, check_loading_info,
                               check_model_dir_files, check_tokenizer_file,
                               check_tokenizer_tokens, check_weight_files)
from rlvr.models.smollm2 import write_smollm2
from rlvr.models.tiny import write_tiny_model

# Built-in model name -> function writing a Hugging Face directory for it.
BUILTIN_MODELS: dict[str, Callable[[Path], None]] = {
    "tiny-llama": write_tiny_model,
    "smollm2-135m-instruct": write_smollm2,
}

# Bumped when a built-in's contents change, so a cache written by an older rlvr is not reused.
BUILTIN_REVISIONS: dict[str, int] = {"tiny-llama": 2}

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def cache_root() -> Path:
    return Path(os.environ.get("RLVR_CACHE", Path.home() / ".cache" / "rlvr"))


def resolve_model_dir(name_or_path: str) -> str:
    """A directory (or hub id) transformers can load: built-ins are written on first use. A
    local directory's files are checked before anything reads them (`check_model_dir_files`):
    ConfigError where one is not a regular file inside it, or too large."""
    resolved = _resolve(name_or_path)
    check_model_dir_files(resolved)
    return resolved


def _resolve(name_or_path: str) -> str:
    if name_or_path in BUILTIN_MODELS:
        revision = BUILTIN_REVISIONS.get(name_or_path, 1)
        suffix = f".v{revision}" if revision > 1 else ""
        target = cache_root() / "models" / f"{name_or_path}{suffix}"
        if not (target / "config.json").exists():  # the first use: up to a minute
            with phase(f"converting built-in model {name_or_path}") as done:
                _write_atomically(target, BUILTIN_MODELS[name_or_path])
                done["detail"] = f"written to {target}"
        return str(target)
    if Path(name_or_path).exists():
        return name_or_path
    if "/" in name_or_path:
        return name_or_path  # a hub id: transformers downloads it (only works online)
    raise FileNotFoundError(
        f"model.name_or_path='{name_or_path}' is neither a built-in "
        f"({', '.join(BUILTIN_MODELS)}), a local directory, nor a hub id")


def _write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    # Two processes may convert at once (tests under xdist, a user's second run): each writes
    # into its own temporary directory and the first rename wins.
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        write(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# A model, tokenizer or adapter directory is data, not code: one that ships its own (an
# `auto_map` in its config) is refused. Left unset, transformers asks on the terminal whether to
# run it, and a `y`, or `yes |` in a script, would run whatever the directory holds.
TRUST_REMOTE_CODE = False


def load_tokenizer(model_dir: str):
    from transformers import AutoTokenizer

    check_model_dir_files(model_dir)  # a caller may pass a directory not resolved here
    check_tokenizer_file(model_dir)  # transformers' failures on a malformed one are tracebacks
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=TRUST_REMOTE_CODE)
    except ValueError:  # ConfigError included; transformers' refusals (remote code) say why
        raise
    except Exception as e:  # noqa: BLE001
        if not os.path.isdir(model_dir):
            raise  # a hub id: transformers' own message says what is missing
        # What the checks above cannot foresee of transformers' expectations (a tokenizer.json
        # the library opens but with no `added_tokens` was a KeyError traceback): the
        # directory's input is wrong, so exit 2 naming it, the chain kept for RLVR_DEBUG.
        raise ConfigError(f"{model_dir}: transformers cannot build a tokenizer from it: "
                          f"{type(e).__name__}: {str(e)[:200]}") from e
    check_tokenizer_tokens(tokenizer, model_dir)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(model_dir: str, dtype: str = "float32",
                   attn_implementation: str = "sdpa") -> torch.nn.Module:
    """A causal LM whose attention can confine packed sequences (`rlvr.learner.attention`), named
    as `model.attn_implementation`: sdpa (a boolean 4-D mask), eager (transformers' explicit
    attention, given an additive float mask), flex (torch flex attention with a block mask),
    varlen (rlvr's: whole sequences with cumulative lengths, torch's varlen flash kernel on
    CUDA) or flash_attention_2 (varlen kernels; CUDA with flash-attn installed, else
    transformers raises ImportError)."""
    from transformers import AutoModelForCausalLM

    from rlvr.learner.attention import CONFIG_NAMES as transformers_names
    from rlvr.learner.attention import register_varlen_attention

    if attn_implementation not in transformers_names:
        raise ValueError(f"attn_implementation={attn_implementation!r} is not one of "
                         f"{sorted(transformers_names)}")
    register_varlen_attention()
    directory = Path(model_dir)
    if (directory / "adapter_config.json").is_file() and not (directory / "config.json").is_file():
        # transformers would fetch the adapter's base by name (from the hub, for a built-in)
        raise FileNotFoundError(f"{model_dir} holds a LoRA adapter, not a whole model: "
                                f"`rlvr merge {model_dir} OUT` writes one (rlvr generate merges "
                                "on the fly)")
    check_model_dir_files(model_dir)
    headers = check_weight_files(model_dir)  # headers, shard index: transformers trusts both
    check_config_against_weights(model_dir, headers)  # before modules of its sizes are built
    # Safetensors only: a `pytorch_model.bin` is a pickle, and torch's restricted unpickler is
    # still an unpickler of a file someone else wrote (house rule: none).
    model, info = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=DTYPES[dtype], trust_remote_code=TRUST_REMOTE_CODE, use_safetensors=True,
        attn_implementation=transformers_names[attn_implementation], output_loading_info=True)
    # transformers initialises a weight missing from the file at random and only logs it
    # (which rlvr silences): refused here, so a mismatched directory never trains as noise.
    check_loading_info(model_dir, info, bool(getattr(model.config, "tie_word_embeddings", False)))
    return model


def decoder_layers(model: torch.nn.Module) -> torch.nn.Module | None:
    """The decoder's repeated layers, where transformers' decoder-only models keep them
    (`get_decoder().layers`, under a PEFT wrapper too), or None for a model that keeps none
    there. What shards, wraps or compiles a model layer by layer finds the layers here."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    return getattr(decoder, "layers", None)
