"""`rollout.engine=remote`: generation on inference servers over HTTP, behind the engine protocol.

What it is: `RemoteEngine`, an `AsyncRolloutEngine` over one or more servers
(`rollout.server_addresses`, or `RLVR_LLM_SERVER_ADDRS`; a launcher may have started them).
Each request goes to the live server with the fewest requests in flight; a request that fails
is retried on another server (`rollout.server_max_retries` times); a server that fails and
then does not answer its health check is dropped, named in the log, and never asked again.
When no server is left, `EngineUnavailable` names every address and why it was dropped, and
the trainer stops with its last good state saved. New weights reach every live server through
the disk or a broadcast (`rlvr.rollout.weight_sync.servers`); a server whose update fails is
dropped, so no server keeps serving an old version unnoticed (and every token carries the
version that sampled it, which staleness checks read). Every request is signed with the run's
key (`RLVR_SERVER_KEY` / `RLVR_SERVER_KEY_FILE`, else `<output_dir>/server.key`, which a
launcher writes: `rlvr.serving.auth`) for the name each server proved at start
(`rlvr.serving.server.proven_name`), and every answer must carry that server's signature
(`rlvr.serving.signing`).

What it is not: a server (`rlvr.serving`), or a launcher of servers (`rlvr.launch`).

Why its own event loop thread: the HTTP client's connections belong to one loop, while
requests come from the episode runner's loop (`agenerate`) and from plain threads
(evaluation's `generate`); both hand their requests to this one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

import torch

from rlvr.rollout.base import EngineSettings, EngineUnavailable
from rlvr.rollout.seeds import derive_seed
from rlvr.rollout.weight_sync.servers import BroadcastUpdate, DiskUpdate
from rlvr.serving.auth import client_key
from rlvr.serving.client import ServerClient, ServerError
from rlvr.serving.server import proven_name
from rlvr.types import Completion, SamplingParams

log = logging.getLogger(__name__)

ADDRESSES_ENV = "RLVR_LLM_SERVER_ADDRS"


def server_addresses(configured: Iterable[str]) -> list[str]:
    """`rollout.server_addresses`, else the comma-separated `RLVR_LLM_SERVER_ADDRS`; each as
    "http://host:port" (a bare "host:port" gets the scheme)."""
    addresses = [a for a in configured if a] or \
        [a.strip() for a in os.environ.get(ADDRESSES_ENV, "").split(",") if a.strip()]
    return [a if "://" in a else f"http://{a}" for a in addresses]


@dataclass
class _Server:
    client: ServerClient
    in_flight: int = 0
    dropped: str | None = None  # why it was dropped; None while live


@dataclass
class ServerPool:
    """The servers and their load; which one takes the next request."""

    servers: list[_Server] = field(default_factory=list)

    def live(self) -> list[_Server]:
        return [s for s in self.servers if s.dropped is None]

    def pick(self, exclude: set[str]) -> _Server | None:
        """The live server with the fewest requests in flight, not in `exclude` (ties: the
        first listed); with every live one excluded, the least loaded live one."""
        live = self.live()
        fresh = [s for s in live if s.client.address not in exclude] or live
        return min(fresh, key=lambda s: s.in_flight, default=None)

    def drop(self, server: _Server, why: str) -> None:
        if server.dropped is None:
            server.dropped = why
            log.error("inference server %s dropped: %s (%d left)", server.client.address, why,
                      len(self.live()))

    def unavailable(self) -> EngineUnavailable:
        reasons = "; ".join(f"{s.client.address}: {s.dropped}" for s in self.servers)
        return EngineUnavailable(f"no inference server is left ({reasons})")


def create_remote_engine(model_dir: str, cfg: EngineSettings, eos_token_ids: tuple[int, ...],
                         pad_token_id: int) -> "RemoteEngine":
    addresses = server_addresses(cfg.server_addresses)
    if not addresses:
        raise EngineUnavailable(f"rollout.engine=remote needs servers: set rollout.server_"
                                f"addresses, {ADDRESSES_ENV}, or let a launcher start "
                                "rollout.num_servers of them")
    return RemoteEngine(addresses, cfg, eos_token_ids, model_dir=model_dir)


class RemoteEngine:
    def __init__(self, addresses: list[str], cfg: EngineSettings,
                 eos_token_ids: tuple[int, ...], model_dir: str = ""):
        self.cfg, self.eos_token_ids = cfg, tuple(eos_token_ids)
        self.version = 0
        key = client_key(cfg.server_key_file or None)
        # Each server's name as it proves the key: what its requests are signed for (through
        # a forwarded port, not the address's own "host:port").
        names = {a: proven_name(a, timeout_s=10.0, key=key) for a in addresses}
        unhealthy = [a for a, name in names.items() if name is None]
        if unhealthy:
            raise EngineUnavailable(f"inference servers not answering /health: {unhealthy} "
                                    f"({'with' if key else 'without'} a server key; servers "
                                    "rlvr starts need the run's: rlvr.serving.auth)")
        self.pool = ServerPool([_Server(ServerClient(a, cfg.server_request_timeout_s,
                                                     cfg.weight_update_timeout_s, key=key,
                                                     name=names[a] or None))
                                for a in addresses])
        self._updater = self._make_updater(cfg, model_dir, key)
        self._update_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rlvr-remote",
                                        daemon=True)
        self._thread.start()
        log.info("remote engine: %d servers (%s), weights by %s", len(addresses),
                 ", ".join(addresses), cfg.weight_update)

    # ---- generation -----------------------------------------------------------------------

    async def agenerate(self, prompt_ids: list[int], params: SamplingParams) -> list[Completion]:
        """`params.n` completions of one prompt, sampled with `params.seed` as given."""
        future = asyncio.run_coroutine_threadsafe(self._generate_one(prompt_ids, params),
                                                  self._loop)
        return await asyncio.wrap_future(future)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """Every prompt at once; prompt i seeded as the in-process vLLM engine seeds it."""
        async def all_prompts() -> list[list[Completion]]:
            return list(await asyncio.gather(*[
                self._generate_one(p, replace(params, seed=None if params.seed is None
                                              else derive_seed(params.seed, prompt=i)))
                for i, p in enumerate(prompts)]))

        return asyncio.run_coroutine_threadsafe(all_prompts(), self._loop).result()

    async def _generate_one(self, prompt_ids: list[int], params: SamplingParams
                            ) -> list[Completion]:
        tried: set[str] = set()
        last: ServerError | None = None
        for _ in range(1 + self.cfg.server_max_retries):
            server = self.pool.pick(tried)
            if server is None:
                raise self.pool.unavailable()
            server.in_flight += 1
            try:
                return await server.client.generate(
                    prompt_ids, params, params.seed,
                    self.eos_token_ids + tuple(params.stop_token_ids))
            except ServerError as e:
                if not e.retryable:
                    raise
                last = e
                tried.add(server.client.address)
                # A failed request alone does not condemn a server (a timeout under load); one
                # that then fails its health check is gone.
                if not await asyncio.to_thread(server.client.healthy):
                    self.pool.drop(server, str(e))
            finally:
                server.in_flight -= 1
        if not self.pool.live():
            raise self.pool.unavailable()
        raise ServerError(last.address if last else "?", f"the request failed on "
                          f"{1 + self.cfg.server_max_retries} attempts (last: {last})")

    # ---- weights --------------------------------------------------------------------------

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        """Every live server loads the weights as `version`; a server that fails is dropped.
        Raises `EngineUnavailable` if none is left."""
        with self._update_lock:
            live = self.pool.live()
            if not live:
                raise self.pool.unavailable()
            failures = self._updater.push([s.client for s in live], named_tensors, version)
            for server in live:
                if server.client.address in failures:
                    self.pool.drop(server, f"weight update to version {version} failed: "
                                           f"{failures[server.client.address]}")
            if not self.pool.live():
                raise self.pool.unavailable()
            self.version = version

    def live_addresses(self) -> list[str]:
        return [s.client.address for s in self.pool.live()]

    def close(self) -> None:
        if self._loop.is_running():
            async def close_clients() -> None:
                for s in self.pool.servers:
                    await s.client.aclose()

            try:
                asyncio.run_coroutine_threadsafe(close_clients(), self._loop).result(timeout=10)
            except Exception:  # noqa: BLE001  closing must not mask the run's own error
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if isinstance(self._updater, BroadcastUpdate):
            self._updater.close([s.client for s in self.pool.live()])
        for s in self.pool.servers:
            s.client.close()

    @staticmethod
    def _make_updater(cfg: EngineSettings, model_dir: str,
                      key: str | None) -> DiskUpdate | BroadcastUpdate:
        # In-flight updates freeze running requests and continue them on the new weights;
        # otherwise the update waits for them to finish on the old ones.
        pause_mode = "keep" if cfg.inflight_updates else "wait"
        if cfg.weight_update == "disk":
            return DiskUpdate(Path(cfg.weight_update_dir), _tied_embeddings(model_dir),
                              pause_mode, timeout_s=cfg.weight_update_timeout_s)
        return BroadcastUpdate(cfg.weight_sync_host or "127.0.0.1", cfg.tensor_parallel_size,
                               cfg.weight_sync_bucket_mb * 2**20, cfg.weight_update_timeout_s,
                               device=torch.device(cfg.device) if cfg.device != "auto" else None,
                               pause_mode=pause_mode, key=key)


def _tied_embeddings(model_dir: str) -> bool:
    import json

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(config.get("tie_word_embeddings", False))
