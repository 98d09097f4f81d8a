"""What rlvr sees on this machine (`rlvr env`): devices, bf16 support, and the versions of the
libraries whose presence changes what a run can do. Read-only; imports nothing heavy it does
not report on."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform

import torch

from rlvr.device import cpu_flags, cpu_has_native_bf16, cpu_name, resolve_device

# (name, import name, distribution names to read a version from, what it enables)
_LIBRARIES = [("transformers", "transformers", ("transformers",), "models"),
              ("flash-attn", "flash_attn", ("flash-attn", "flash_attn"),
               "model.attn_implementation=flash_attention_2"),
              ("ray", "ray", ("ray",), "distributed.launcher=ray"),
              ("math-verify", "math_verify", ("math-verify",), "the math verifier"),
              ("tensorboard", "tensorboard", ("tensorboard",), "logging.with_tracking"),
              ("wandb", "wandb", ("wandb",), "logging.with_tracking")]


_SHOWN_FLAGS = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "bf16"})


def report() -> list[tuple[str, str]]:
    """(label, value) lines, in display order."""
    lines = [("python", platform.python_version()),
             ("torch", f"{torch.__version__} (CUDA build: {torch.version.cuda or 'none'})"),
             ("CPU", f"{cpu_name()}, {os.cpu_count()} cores, capability "
                     f"{torch.backends.cpu.get_cpu_capability()}"),
             ("CPU native bf16", f"{cpu_has_native_bf16()} (flags seen: "
                                 f"{', '.join(sorted(cpu_flags() & _SHOWN_FLAGS)) or 'none'})")]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            lines.append((f"cuda:{i}", f"{props.name}, {props.total_memory / 1024**3:.1f} GB, "
                                       f"compute capability {props.major}.{props.minor}"))
        lines.append(("CUDA bf16", str(torch.cuda.is_bf16_supported())))
        lines.append(("NCCL", ".".join(map(str, torch.cuda.nccl.version()))))
    else:
        lines.append(("CUDA devices", "none"))
    device = resolve_device("auto")
    lines.append(("model.device=auto", f"{device.torch}, collectives {device.backend}, "
                                       f"bf16 compute by default: {device.bf16_compute(None)}"))
    for label, module, dists, enables in _LIBRARIES:
        lines.append((label, f"{_version(module, dists)} ({enables})"))
    return lines + _engine_lines()


def _engine_lines() -> list[tuple[str, str]]:
    """Each registered engine: usable here (with its library's version), or why not."""
    from rlvr.rollout import ENGINES

    lines = []
    for name in sorted(ENGINES):
        engine = ENGINES[name]
        reason, version = engine.available(), engine.version()
        state = f"not usable: {reason}" if reason else \
            ("usable" + (f", {version}" if version else ""))
        lines.append((f"rollout.engine={name}", state))
    return lines


def _version(module: str, dists: tuple[str, ...]) -> str:
    if importlib.util.find_spec(module) is None:
        return "not installed"
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "installed (version unknown)"
