"""LoRA adapter checkpoints: recognise one, load it on its base model, merge it into a plain
Hugging Face model directory (`rlvr merge CHECKPOINT OUT`).

A LoRA run's checkpoints (`rlvr.checkpoint.models`) hold PEFT's adapter files
(`adapter_config.json`, `adapter_model.safetensors`), the tokenizer and `rlvr_checkpoint.json`.
The base model is named by the adapter config's `base_model_name_or_path`, which rlvr writes as
a built-in name (tiny-llama, smollm2-135m-instruct) or an absolute directory
(`rlvr.run.settings.lora_settings`), so the checkpoint resolves it from any working directory and on
any machine that has the built-ins. The merged directory is written atomically and loads like
any model: `rlvr generate OUT`, every engine.

An adapter directory is input: before PEFT builds anything, `check_adapter_config` refuses a
rank outside [1, the base's hidden size], an `init_lora_weights` that is not a bool (PiSSA,
OLoRA, LoftQ ... would recompute, and rewrite, the base weights) and options rlvr never writes
(layer replication, modules to save, DoRA, ...), the directory's files must be regular files
inside it (`check_model_dir_files`) and the weights file one the safetensors library opens, with
no tensor named twice (`read_safetensors_header`: PEFT opens it with no check of its own, and a
truncated file or unknown dtype failed inside it with a SafetensorError traceback); after
loading, the adapter file's tensor names must be exactly those PEFT expected (a renamed key
would leave its matrix at random init).

Not here: writing adapters (PEFT's `save_pretrained`, through `rlvr.learner.lora.save_adapter`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from rlvr.checkpoint.atomic import fresh_tmp_dir, publish_dir
from rlvr.config import ConfigError
from rlvr.models.checks import (check_model_dir_files, is_positive_int, read_json_object,
                               read_model_config, text_config)
from rlvr.models.safetensors_header import read_safetensors_header

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
CHECKPOINT_INFO = "rlvr_checkpoint.json"
MAX_CONFIG_BYTES = 1 << 20  # an adapter config is a few KiB of JSON
# PEFT options rlvr's adapters never set (`rlvr.learner.lora.wrap_lora`); each changes what the
# merge computes or builds, so an adapter setting one to anything but "off" is refused.
UNSUPPORTED_OPTIONS = ("layer_replication", "modules_to_save", "trainable_token_indices",
                       "use_dora", "use_rslora", "use_qalora", "use_bdlora", "lora_bias",
                       "loftq_config", "eva_config", "corda_config", "lora_ga_config",
                       "arrow_config", "kasa_config", "monteclora_config", "velora_config",
                       "alora_invocation_tokens", "target_parameters", "layers_to_transform",
                       "megatron_config")


def is_adapter_checkpoint(directory: str | Path) -> bool:
    """A directory holding a PEFT adapter (and no full model of its own)."""
    return (Path(directory) / ADAPTER_CONFIG).is_file()


def read_adapter_config(directory: str | Path) -> dict:
    """The adapter's config as a dict; ConfigError naming the file when it is not a small
    regular file holding a JSON object."""
    return read_json_object(Path(directory) / ADAPTER_CONFIG, MAX_CONFIG_BYTES)


def adapter_base_model(directory: str | Path) -> str:
    """The base model an adapter checkpoint was trained on, as its config names it."""
    base = read_adapter_config(directory).get("base_model_name_or_path")
    if not base or not isinstance(base, str):
        raise ConfigError(f"{Path(directory) / ADAPTER_CONFIG} names no base model "
                          "(base_model_name_or_path)")
    return base


def _is_off(value) -> bool:
    return value is None or value is False or value == {} or value == [] or value == ""


def _rank_cap(base_dir: str) -> int:
    """The largest rank that can be full-rank on any target: the base's hidden size (every
    decoder linear layer has it as one side)."""
    try:  # a broken base config.json is refused when the base loads, right after
        base = read_model_config(base_dir) or {}
    except ConfigError:
        base = {}
    size = base.get("hidden_size", text_config(base).get("hidden_size"))
    return size if is_positive_int(size) else 65536


def check_adapter_config(directory: str | Path, base_dir: str) -> None:
    """Refuse (ConfigError naming the file) an adapter config PEFT would turn into a huge
    allocation, a long SVD over the base weights, or a model rlvr never trains."""
    path = Path(directory) / ADAPTER_CONFIG
    config, cap = read_adapter_config(directory), _rank_cap(base_dir)
    if config.get("peft_type", "LORA") != "LORA":
        raise ConfigError(f"{path}: peft_type={config.get('peft_type')!r}; rlvr merges LoRA "
                          "adapters only")
    ranks = {"r": config.get("r")}
    pattern = config.get("rank_pattern") or {}
    if not isinstance(pattern, dict):
        raise ConfigError(f"{path}: rank_pattern must be a mapping of module names to ranks")
    ranks.update({f"rank_pattern[{k!r}]": v for k, v in pattern.items()})
    for name, r in ranks.items():
        if not is_positive_int(r) or r > cap:
            raise ConfigError(f"{path}: {name}={r!r} is not a rank in [1, {cap}] (the base "
                              "model's hidden size)")
    if not isinstance(config.get("init_lora_weights", True), bool):
        raise ConfigError(f"{path}: init_lora_weights={config['init_lora_weights']!r}; only "
                          "true or false (a computed init such as PiSSA or OLoRA rewrites the "
                          "base weights)")
    alpha = config.get("lora_alpha", 8)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not abs(alpha) < 1e6:
        raise ConfigError(f"{path}: lora_alpha={alpha!r} is not a finite number")
    for option in UNSUPPORTED_OPTIONS:
        if not _is_off(config.get(option)):
            raise ConfigError(f"{path}: {option}={config[option]!r} is a PEFT option rlvr's "
                              "adapters never use; refused")


def check_adapter_keys(model: torch.nn.Module, directory: str | Path) -> None:
    """The adapter file's tensor names are exactly those the PEFT model expects: PEFT only
    warns about a missing one and keeps its random init."""
    from peft import get_peft_model_state_dict

    path = Path(directory) / ADAPTER_WEIGHTS
    found = set(read_safetensors_header(path))
    wanted = set(get_peft_model_state_dict(model, save_embedding_layers=False))
    missing, unexpected = sorted(wanted - found), sorted(found - wanted)
    if missing or unexpected:
        raise ConfigError(f"{path} does not fit its adapter config: {len(missing)} tensors "
                          f"missing {missing[:2]}, {len(unexpected)} unexpected "
                          f"{unexpected[:2]}")


def load_adapter_checkpoint(directory: str | Path, dtype: str = "float32") -> torch.nn.Module:
    """The base model (resolved as `model.name_or_path` is) with the adapter loaded on it, in
    eval mode: a PEFT model computing what the trained policy computed."""
    from peft import PeftModel

    from rlvr.models import load_causal_lm, resolve_model_dir

    if not (Path(directory) / ADAPTER_WEIGHTS).is_file():
        # PEFT would fall back to `adapter_model.bin`, a pickle (house rule: none is loaded)
        raise FileNotFoundError(f"{directory} holds no adapter_model.safetensors; an adapter is "
                                "loaded from safetensors only")
    check_model_dir_files(str(directory))  # regular files inside it, each JSON an object
    read_safetensors_header(Path(directory) / ADAPTER_WEIGHTS)  # before PEFT opens it unchecked
    base_dir = resolve_model_dir(adapter_base_model(directory))
    check_adapter_config(directory, base_dir)
    base = load_causal_lm(base_dir, dtype)
    try:
        model = PeftModel.from_pretrained(base, str(directory))
    except ValueError as e:  # e.g. a target module the base does not have
        raise ConfigError(f"{Path(directory) / ADAPTER_CONFIG}: {e}") from None
    check_adapter_keys(model, directory)
    return model.eval()


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
