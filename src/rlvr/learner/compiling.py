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

The vocabulary head's math is compiled too (`compile_head`). After the output projection (a
library matmul, left eager, inside whatever hooks wrap the head module), eager runs one pass
over memory per op on each chunk's [tokens, vocabulary] logits: the soft-cap or scale, the
float32 cast, the temperature, logsumexp, the gather, the entropy; in the backward pass the
softmax, the scatter of the targets' gradient, the add, the division, the cast back. Counted
per op on bf16 logits, that is 88 bytes read or written per vocabulary entry and token
(forward and backward, before the chunk's rerun), 128 with the entropy, 162 with Gemma2's
soft-cap too; a 1,024-token chunk of a 150k vocabulary is 600 MB per float32 copy. Fused, a
few reads of the 16-bit logits and one write of their gradient. On a GPU those passes may
take longer than the matmuls (estimated, not measured, for a chunk of Qwen2.5-1.5B on an H100:
its four matmuls, forward, rerun and backward, 1.9 TFLOP or 2.4 ms at 800 TFLOP/s; its eager
passes about 20 GB or 6 ms at 3.35 TB/s). On 2 CPU cores, measured, the quick start's head
(1,205 response tokens of SmolLM2, bf16) took 0.83 s instead of 1.04 s, forward and backward,
and its update ran 1.02-1.04x faster (`benchmarks/compile.py --head`). A cold compile of the head
costs about 10 s with gradients and 2 s without.

Compile the model where it will run, last: a deep copy taken afterwards would call the
original's layers (the compiled function holds the original's bound `forward`).
"""

from __future__ import annotations

import torch

from rlvr.learner.forward import COMPILED_HEAD, head_logprobs
from rlvr.models import decoder_layers


def compile_decoder_layers(model: torch.nn.Module, backend: str = "inductor") -> int:
    """Replace each decoder layer's `forward` with its compiled form (dynamic shapes), and
    compile the model's vocabulary head (`compile_head`); returns how many layers; ValueError
    for a model without a list of them. Nothing compiles until the first call. `backend` is
    torch.compile's: inductor generates the fused kernels; aot_eager captures the same graphs,
    forward and backward, and runs them eagerly (no code generation: the tests' structural
    checks)."""
    layers = decoder_layers(model)
    if not isinstance(layers, torch.nn.ModuleList) or len(layers) == 0:
        raise ValueError(f"model.compile: {type(model).__name__} keeps no decoder `layers` "
                         "list to compile layer by layer; set model.compile=false")
    for layer in layers:
        layer.forward = torch.compile(layer.forward, backend=backend, dynamic=True)
    compile_head(model, backend)
    return len(layers)


def compile_head(model: torch.nn.Module, backend: str = "inductor") -> None:
    """Give `model` a compiled `head_logprobs`, which `rlvr.learner.forward` then runs on each
    chunk of logits (`compiled_head`). Shapes are dynamic: the last chunk is shorter. The
    compiled function holds no model (its weights stay in the eager projection), so a copy of
    the model may share it; graphs are cached per code, so every model's is compiled once."""
    # Inductor keeps a fused kernel's intermediates in float32, so a 16-bit model's soft-cap
    # would skip the rounding its forward does after each step (logprobs 5e-3 off eager's);
    # told to round as eager does, they agree to float32 rounding (1e-6, measured).
    options = {"emulate_precision_casts": True} if backend == "inductor" else None
    setattr(model, COMPILED_HEAD,
            torch.compile(head_logprobs, backend=backend, dynamic=True, options=options))
