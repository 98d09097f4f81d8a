"""Compiled decoder layers (`model.compile`): torch.compile on each decoder layer's `forward`.

Why per layer and not the whole model: every layer of a decoder runs the same code, so one
compiled graph serves them all (torch inlines the module and takes its weights as inputs): the
compile costs one layer's, not 30 layers'. For SmolLM2 on 2 CPU cores, forward and backward,
that is about 20 s with an empty kernel cache and a few seconds from the cache (inductor keeps
it on disk, `TORCHINDUCTOR_CACHE_DIR`). Inductor fuses what eager runs as separate passes over
memory (the norms, rotary embeddings, the gated activation, residual adds, autocast's casts);
the matmuls and attention stay library kernels. On a quick-start batch of SmolLM2 (1,466
tokens, bf16 autocast, 2 CPU cores) an update ran 1.05-1.11x faster (`benchmarks/compile.py`).

Why `forward` and not the module (`nn.Module.compile`): hooks stay outside the graph. FSDP2's
gather and reshard hooks and gradient checkpointing wrap the layer's call, which the compiled
`forward` runs inside, eager, as without compilation.

Shapes are dynamic: a packed batch's rows and length change every step, and a graph per shape
would recompile every step. A micro-batch of one row is a second graph (torch specialises
sizes of 1), as is a pass without gradients (the reference's).

Compile the model where it will run, last: a deep copy taken afterwards would call the
original's layers (the compiled function holds the original's bound `forward`).
"""

from __future__ import annotations

import torch

from rlvr.models import decoder_layers


def compile_decoder_layers(model: torch.nn.Module, backend: str = "inductor") -> int:
    """Replace each decoder layer's `forward` with its compiled form (dynamic shapes); returns
    how many layers; ValueError for a model without a list of them. Nothing compiles until the
    first call. `backend` is torch.compile's: inductor generates the fused kernels; aot_eager
    captures the same graphs, forward and backward, and runs them eagerly (no code generation:
    the tests' structural checks)."""
    layers = decoder_layers(model)
    if not isinstance(layers, torch.nn.ModuleList) or len(layers) == 0:
        raise ValueError(f"model.compile: {type(model).__name__} keeps no decoder `layers` "
                         "list to compile layer by layer; set model.compile=false")
    for layer in layers:
        layer.forward = torch.compile(layer.forward, backend=backend, dynamic=True)
    return len(layers)
