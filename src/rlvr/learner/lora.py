"""LoRA adapters on the policy, through PEFT: wrap, count, switch off for the reference, merge.

What it is: the few operations the learner, its sharded ranks and checkpoints need from a
policy trained through low-rank adapters (`model.lora.rank > 0`):
- `wrap_lora`: PEFT's `get_peft_model` on the decoder's linear layers (every `nn.Linear`
  inside a decoder layer, found from the model, so any architecture's names work; the
  embeddings and the output head are never targets). Only the adapters require grad, so the
  learner's optimizer, gradient clipping and training state see only them.
- `adapters_disabled`: the policy with its adapters switched off is the base model, which is
  the reference policy of the KL penalty: no second copy of the model is loaded.
- `merge_adapter_weights` / `engine_weights`: the weights engines load, under the BASE model's
  names (what `check_logit_path` and every engine know): for each adapted
  linear layer W + scale * B @ A, computed while streaming, the trained module untouched (PEFT's
  `merge_adapter` would rewrite the weights in place and need an unmerge after).
- `save_adapter`: PEFT's adapter files (adapter_config.json, adapter_model.safetensors); the
  config names the base model, so `rlvr.checkpoint.adapters` can rebuild or merge it.

What it is not: it knows no loss, optimizer or process group. A sharded policy (FSDP2) works
unchanged: the adapter layers are wrapped before sharding, and the merge takes the gathered
stream (`rlvr.distributed.sharding.iter_full_weights`).

Why PEFT rather than a hand-written low-rank layer: it is what users already know, its adapter
files load in the serving engines, TRL and transformers, and its layers cover bias, dtype and
init details.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

import torch

from rlvr.models import decoder_layers

ADAPTER = "default"  # PEFT's name for the one adapter rlvr trains
_PEFT_PREFIX = "base_model.model."  # PeftModel -> LoraModel -> the wrapped model
_BASE_LAYER = ".base_layer."  # a wrapped linear keeps the original under this name
_LORA_A, _LORA_B = f".lora_A.{ADAPTER}.weight", f".lora_B.{ADAPTER}.weight"
_BASE_WEIGHT = ".base_layer.weight"


@dataclass(frozen=True)
class LoraSettings:
    """`model.lora` as the learner needs it (picklable: Ray learner ranks receive it)."""

    rank: int
    alpha: float  # adapter output scaled by alpha / rank
    dropout: float = 0.0  # on the adapter's input only
    # Module names (a leaf name such as "q_proj", or a full dotted name) of linear layers
    # inside the decoder layers; None: every one of them.
    target_modules: tuple[str, ...] | None = None
    # Written into the adapter's config, so a checkpoint finds its base: a built-in name or
    # an absolute directory (see `rlvr.checkpoint.adapters`).
    base_model: str = ""
    init_seed: int = 0  # the A matrices' random init, the same on every rank and rerun


class LoraTargetError(ValueError):
    """`model.lora.target_modules` names something that is not a linear layer of the decoder."""


def decoder_linear_modules(model: torch.nn.Module) -> list[str]:
    """Full names of the `nn.Linear` modules inside the model's decoder layers (attention and
    MLP projections), in module order; not the embeddings, not the output head."""
    layers = decoder_layers(model)
    if layers is None:
        raise LoraTargetError(f"{type(model).__name__} has no decoder `layers` to put LoRA "
                              "adapters in")
    inside = {id(m) for layer in layers for m in layer.modules()}
    return [name for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and id(module) in inside]


def resolve_targets(model: torch.nn.Module, targets: Iterable[str] | None) -> list[str]:
    """The full module names LoRA wraps: every decoder linear layer (None), or those matching
    a target by leaf name ("q_proj") or dotted suffix ("self_attn.q_proj"). LoraTargetError
    naming each target that matches none, and the linear layers there are."""
    linear = decoder_linear_modules(model)
    if not linear:
        raise LoraTargetError(f"{type(model).__name__} has no nn.Linear inside its decoder "
                              "layers for LoRA to adapt")
    if targets is None:
        return linear
    targets = list(targets)
    matches = {t: [n for n in linear if n == t or n.endswith("." + t)] for t in targets}
    unmatched = [t for t, found in matches.items() if not found]
    if unmatched:
        leaves = sorted({n.rsplit(".", 1)[-1] for n in linear})
        raise LoraTargetError(
            f"model.lora.target_modules: {unmatched} match(es) no linear layer inside the "
            f"decoder layers of {type(model).__name__}; its linear layers there are {leaves} "
            "(the embeddings and the output head cannot be targets)")
    return [n for n in linear if any(n in found for found in matches.values())]


def wrap_lora(model: torch.nn.Module, settings: LoraSettings) -> torch.nn.Module:
    """`model` (changed in place) inside a PEFT `PeftModel` with one LoRA adapter on the
    targets; the base weights frozen, the adapters trainable. B starts at zero, so the wrapped
    model computes exactly what the base does until the first update."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:
        raise ImportError(f"model.lora.rank={settings.rank} needs PEFT ({e}): "
                          "pip install -e '.[lora]'") from e

    targets = resolve_targets(model, settings.target_modules)
    config = LoraConfig(r=settings.rank, lora_alpha=settings.alpha,
                        lora_dropout=settings.dropout, target_modules=targets, bias="none")
    with torch.random.fork_rng(devices=[]):  # the run's own RNG stream is left as it was
        torch.manual_seed(settings.init_seed)
        wrapped = get_peft_model(model, config)
    if settings.base_model:
        wrapped.peft_config[ADAPTER].base_model_name_or_path = settings.base_model
    return wrapped


def is_lora(model: torch.nn.Module) -> bool:
    """A policy wrapped by `wrap_lora` (any PEFT model), sharded or not."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """What the optimizer steps: every parameter of a plain model, the adapters of a LoRA one."""
    return [p for p in model.parameters() if p.requires_grad]


def parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts; a sharded model counts this rank's shards."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def is_adapter_dropout(module_name: str) -> bool:
    """LoRA's own dropout module (`...q_proj.lora_dropout.default`): `model.lora.dropout`
    chooses its rate, so `rlvr.learner.dropout.disable_dropout` leaves it alone."""
    return ".lora_dropout." in f".{module_name}."


@contextlib.contextmanager
def adapters_disabled(model: torch.nn.Module):
    """Inside, `model` computes as its base model (the reference policy); a plain model is
    left as it is."""
    if not is_lora(model):
        yield model
        return
    with model.disable_adapter():
        yield model


def adapter_scales(model: torch.nn.Module) -> dict[str, float]:
    """Full module name of each adapted layer -> its scale (alpha / rank)."""
    return {name: module.scaling[ADAPTER] for name, module in model.named_modules()
            if isinstance(getattr(module, "scaling", None), dict) and ADAPTER in module.scaling}


def base_name(name: str) -> str:
    """A PEFT model's weight name as the base model calls it:
    `base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight` ->
    `model.layers.0.self_attn.q_proj.weight`."""
    if name.startswith(_PEFT_PREFIX):
        name = name[len(_PEFT_PREFIX):]
    return name.replace(_BASE_LAYER, ".")


T = TypeVar("T")


def _merge_stream(named: Iterable[tuple[str, T]], scales: dict[str, float],
                  combine: Callable[[T, T, T, float], T]) -> Iterator[tuple[str, T]]:
    """Names and values of a PEFT model's state dict -> the base model's: each adapted layer's
    base weight, A and B combined (`combine(W, A, B, scale)`) and yielded once its three parts
    have come, the adapters' own entries dropped, every other entry renamed. Holds at most one
    layer's parts at a time in the state dict's order (base weight, bias, A, B)."""
    pending: dict[str, dict[str, T]] = {}
    for name, value in named:
        part = _adapter_part(name, scales)
        if part is None:
            if ".lora_" in name:
                raise ValueError(f"{name}: an adapter entry rlvr cannot merge (only plain LoRA "
                                 f"on nn.Linear, adapter {ADAPTER!r})")
            yield base_name(name), value
            continue
        layer, key = part
        parts = pending.setdefault(layer, {})
        parts[key] = value
        if len(parts) == 3:
            del pending[layer]
            yield base_name(layer + ".weight"), combine(parts["W"], parts["A"], parts["B"],
                                                        scales[layer])
    if pending:
        raise ValueError(f"adapted layers {sorted(pending)} lacked their base weight, A or B "
                         "in the weights given")


def _adapter_part(name: str, scales: dict[str, float]) -> tuple[str, str] | None:
    """(adapted layer, "W" | "A" | "B") for an adapted layer's base weight or adapter
    matrices; None for anything else (a bias, a norm, a layer without adapter)."""
    for key, suffix in (("W", _BASE_WEIGHT), ("A", _LORA_A), ("B", _LORA_B)):
        if name.endswith(suffix) and name[:-len(suffix)] in scales:
            return name[:-len(suffix)], key
    return None


def _merge_tensors(weight: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                   scale: float) -> torch.Tensor:
    # [out, in] + scale * [out, r] @ [r, in], in float32 and rounded once to the base's dtype.
    delta = (b.detach().float() @ a.detach().float()) * scale
    return (weight.detach().float() + delta).to(weight.dtype)


def merge_adapter_weights(named: Iterable[tuple[str, torch.Tensor]], scales: dict[str, float]
                          ) -> Iterator[tuple[str, torch.Tensor]]:
    """A LoRA policy's full weights (its state dict, or the gathered stream of a sharded one)
    -> the merged base model's weights under the base model's names."""
    return _merge_stream(named, scales, _merge_tensors)


def merged_layout(layout: Iterable[tuple[str, tuple[int, ...], torch.dtype]],
                  scales: dict[str, float]) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    """(name, shape, dtype) of what `merge_adapter_weights` yields from a stream of this
    layout, in the same order (engines agree on it before the first push)."""
    specs = ((name, (name, shape, dtype)) for name, shape, dtype in layout)
    return [(name, spec[1], spec[2])
            for name, spec in _merge_stream(specs, scales, lambda w, a, b, scale: w)]


def engine_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The weights an engine loads, by base-model name: a plain model's own (detached views,
    no copy), a LoRA model's merged (one new tensor per adapted layer)."""
    named = ((name, tensor.detach()) for name, tensor in model.state_dict().items())
    if not is_lora(model):
        return named
    return merge_adapter_weights(named, adapter_scales(model))


def check_adapter_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """ValueError unless `state` holds exactly the trainable parameters of `model` by name (a
    LoRA policy's training state holds its adapters only)."""
    wanted = {name for name, p in model.named_parameters() if p.requires_grad}
    missing, unexpected = sorted(wanted - state.keys()), sorted(state.keys() - wanted)
    if missing or unexpected:
        raise ValueError(
            f"the saved policy holds {len(state)} tensors where this LoRA policy trains "
            f"{len(wanted)} (missing {missing[:3]}, unexpected {unexpected[:3]}): a state of a "
            "full fine-tuning run, or of other model.lora settings")


def save_adapter(model: torch.nn.Module, directory: Path) -> None:
    """PEFT's adapter files into `directory`. Embedding layers are never adapted here, so
    PEFT is told not to save them (its "auto" would ask the hub whether the vocabulary grew)."""
    model.save_pretrained(directory, safe_serialization=True, save_embedding_layers=False)
