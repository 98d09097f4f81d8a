"""From a config to the parts of a run: data, tokenizer, learner, engine, verifiers, episode
source, metric sinks, and the saved state to resume from. `build_run` does it in an order that
fails fast: names are checked against the registries and data rows are validated before any
model loads. Each part gets only its own settings record (`rlvr.settings`).

Not here: what happens each step (`rlvr.trainer`).
"""

from __future__ import annotations

import logging
import os
import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from rlvr.checkpoint import write_text_atomic
from rlvr.checkpoint.state import TrainingState, load_latest_state
from rlvr.config import Config, ConfigError, to_dict, to_yaml, warnings_for
from rlvr.data import DataBundle, LoadedData, load_datasets, tokenize_datasets
from rlvr.data.templates import check_template_choice, load_chat_template
from rlvr.device import (HOST, DeviceUnavailable, cluster_bf16, cluster_device_type,
                         collective_backend, keep_freed_host_memory, resolve_device)
from rlvr.distributed.data_prep import DataPrepActor
from rlvr.distributed.engine_group import EngineGroup
from rlvr.distributed.trainer_learner import GroupLearner
from rlvr.learner import Learner, LearnerProtocol
from rlvr.learner.lora import LoraTargetError, wrap_lora
from rlvr.learner.attention import (check_attention_backward, check_attention_window,
                                    check_packed_attention)
from rlvr.learner.forward import check_logit_path
from rlvr.metrics import JsonlSink, MetricsLogger, ModelShape, build_sinks
from rlvr.metrics.traces import TraceWriter
from rlvr.models import load_causal_lm, load_tokenizer, resolve_model_dir
from rlvr.producer.evaluation import Evaluator
from rlvr.producer.source import EpisodeSource
from rlvr.rewards.scorer import RewardScorer
from rlvr.rollout import RolloutEngine, create_engine
from rlvr.rollout.base import resolve_engine_name
from rlvr.settings import (actor_threads, engine_settings, eval_settings, learner_settings,
                           lora_settings, scorer_settings, source_settings)
from rlvr.workflows import get_workflow, is_known_workflow
from rlvr.workflows.chat import check_turns

log = logging.getLogger(__name__)


@dataclass
class Run:
    """Everything a training step touches, built once by `build_run`."""

    cfg: Config
    output_dir: Path
    tokenizer: object
    data: DataBundle
    learner: LearnerProtocol  # one process, or ranks elsewhere (distributed.launcher=ray)
    engine: RolloutEngine
    scorer: RewardScorer  # evaluation's; a data-preparation actor scores training batches
    source: EpisodeSource | DataPrepActor  # a step's scored groups
    logger: MetricsLogger
    model_shape: ModelShape
    state_dir: Path
    episode: int = 0
    start_step: int = 0  # the step a resumed run continues after
    history: list[dict[str, float]] = field(default_factory=list)
    resume_from: TrainingState | None = None  # the saved state `train` restores first
    # Weight updates so far, the version the engines hold (0: the initial weights). Staleness
    # counts the updates between a sample's version and this, not steps: a step without a
    # batch changes no weights, and counting it made every batch look stale after a few.
    policy_version: int = 0
    last_update_step: int = 0  # the last step whose update the learner holds
    peak_flops: float | None = None  # what learner_mfu divides by (`run_peak_flops`)
    started: float = field(default_factory=time.perf_counter)  # for time/elapsed
    devices: "DevicePlan | None" = None  # where learners and engines compute
    evaluator: Evaluator | None = None  # the eval sets and settings; None: no eval
    traces: TraceWriter | None = None  # logging.save_traces: every step's samples to traces/

    def close(self) -> None:
        """Release what `build_run` started: metric sinks, the episode loop, verifier workers,
        the engine and any learner ranks."""
        self.logger.close()
        self.source.close()
        self.scorer.close()
        self.engine.close()
        self.learner.close()


@dataclass(frozen=True)
class DevicePlan:
    """Where a run computes, decided once on the driver (`plan_devices`) and handed to every
    learner and engine, in this process or in actors: the device type, bf16 compute, and the
    GPUs each actor asks Ray for."""

    type: str  # a torch device type (`rlvr.device`)
    bf16: bool  # bf16 matmuls (autocast, or FSDP2 mixed precision when sharded)
    # the learners' processes keep freed host memory (`rlvr.device.keep_freed_host_memory`)
    keep_host_memory: bool = False
    gpus_per_learner: int = 0
    gpus_per_engine: int = 0

    def describe(self) -> str:
        return (f"device {self.type}, bf16 compute {'on' if self.bf16 else 'off'}, "
                f"collectives {collective_backend(self.type)}"
                + (", freed host memory kept" if self.keep_host_memory else "")
                + (f", {self.gpus_per_learner} GPU per learner, {self.gpus_per_engine} per "
                   "engine actor" if self.type != HOST.type else ""))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def check_registered_names(cfg: Config) -> None:
    """Every name the config picks from a registry exists; ConfigError naming all that do not.
    Here rather than in `rlvr.config`, which imports no part of rlvr."""
    from rlvr.algorithm.advantages import ADVANTAGE_NORMALIZATIONS
    from rlvr.algorithm.losses import POLICY_LOSSES
    from rlvr.learner.schedule import SCHEDULES
    from rlvr.rewards import is_known_verifier
    from rlvr.rewards.scorer import AGGREGATORS
    from rlvr.rollout import ENGINES
    from rlvr.workflows import WORKFLOWS

    a = cfg.algorithm
    choices = [("algorithm.loss_fn", a.loss_fn, POLICY_LOSSES),
               ("algorithm.advantage_normalization_type", a.advantage_normalization_type,
                ADVANTAGE_NORMALIZATIONS),
               ("optimizer.lr_scheduler_type", cfg.optimizer.lr_scheduler_type, SCHEDULES),
               ("rollout.engine", cfg.rollout.engine, {*ENGINES, "auto"}),
               ("rewards.reward_aggregator", cfg.rewards.reward_aggregator, AGGREGATORS)]
    errors = [f"{field}={value!r} is not one of {sorted(known)}"
              for field, value, known in choices if value not in known]
    if not is_known_workflow(cfg.rollout.workflow):
        errors.append(f"rollout.workflow={cfg.rollout.workflow!r} is not one of "
                      f"{sorted(WORKFLOWS)} (or 'package.module:function')")
    elif ":" in cfg.rollout.workflow:
        try:  # imported now: a typo fails before any model loads
            get_workflow(cfg.rollout.workflow)
        except (ImportError, KeyError) as e:
            errors.append(f"rollout.workflow={cfg.rollout.workflow!r}: {e}")
    errors += [f"rewards.remap_verifier.{source}={target!r} is not a known verifier"
               for source, target in cfg.rewards.remap_verifier.items()
               if not is_known_verifier(target)]
    errors += check_template_choice(cfg.data.chat_template,
                                    multi_turn=cfg.rollout.workflow != "single_turn")
    errors += _judge_errors(cfg, ENGINES)
    if errors:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(errors))


def _judge_errors(cfg: Config, engines: object) -> list[str]:
    """`rewards.judge.engine` names an engine that loads a model here, or `openai`; the API
    key it names is set. (`remote` would reach the policy's own servers: a judge on a server
    is `openai` with that server's base_url.)"""
    j = cfg.rewards.judge
    if j is None:
        return []
    known = sorted({*engines, "openai"} - {"remote"})
    if j.engine not in known:
        return [f"rewards.judge.engine={j.engine!r} is not one of {known}"]
    if j.engine == "openai" and j.api_key_env and not os.environ.get(j.api_key_env):
        return [f"rewards.judge.api_key_env={j.api_key_env!r}: that environment variable is "
                "not set"]
    return []


def check_judge_configured(cfg: Config, loaded: LoadedData) -> None:
    """Rows that name `llm_judge` need `rewards.judge`: ConfigError before any model loads."""
    from rlvr.rewards.judge import JUDGE_VERIFIER

    if cfg.rewards.judge is not None:
        return
    sources = [examples for _, examples in loaded.train + loaded.eval]
    users = sorted({e.source for examples in sources for e in examples
                    if JUDGE_VERIFIER in e.verifiers})
    if users:
        raise ConfigError(f"data sources {users} name the '{JUDGE_VERIFIER}' verifier, which "
                          "needs rewards.judge (its engine and model, or openai base_url)")


def prepare_process(cfg: Config) -> None:
    """What every entry point does first: the registered names checked, the seeds set, the
    config's warnings logged, torch's thread count set."""
    check_registered_names(cfg)
    seed_everything(cfg.experiment.seed)
    for warning in warnings_for(cfg):
        log.warning(warning)
    if cfg.model.num_threads > 0:
        torch.set_num_threads(cfg.model.num_threads)


def build_run(cfg: Config) -> Run:
    prepare_process(cfg)
    output_dir = Path(cfg.experiment.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output_dir / "config.yaml", to_yaml(cfg))
    model_dir, tokenizer, data = build_data(cfg)
    try:
        policy = load_causal_lm(model_dir, cfg.model.dtype, cfg.model.attn_implementation)
    except ImportError as e:  # flash_attention_2 without flash-attn installed
        raise ConfigError(f"model.attn_implementation={cfg.model.attn_implementation!r}: "
                          f"{str(e).splitlines()[0]}") from e
    # Before any sharding: the learner must compute the logits the model's forward computes.
    try:
        check_logit_path(policy)
        check_attention_window(policy, cfg.data.max_prompt_length
                               + max(cfg.rollout.response_length, cfg.eval_response_length))
        check_packed_attention(policy)
    except ValueError as e:  # a model the learner cannot train faithfully: the user's input
        raise ConfigError(f"model.name_or_path={cfg.model.name_or_path!r}: {e}") from e
    cluster_gpus = None
    if cfg.distributed.launcher == "ray":  # sized for learners and engines before either starts
        from rlvr.distributed.ray_session import cluster_gpus as ray_gpus, ensure_ray

        r = cfg.rollout
        ensure_ray(cfg.distributed.ray_address or None,
                   cfg.world_size + r.vllm_num_engines * r.vllm_tensor_parallel_size)
        cluster_gpus = ray_gpus()
    devices = plan_devices(cfg, cluster_gpus)
    if devices.keep_host_memory and cfg.distributed.launcher != "ray":  # learner runs here
        log.info(keep_freed_host_memory())
    if cfg.rollout.colocate and devices.type != "cuda":
        raise ConfigError("rollout.colocate=true puts vLLM to sleep (a CUDA feature) so the "
                          f"learner can use its GPU, but this run computes on {devices.type}; "
                          "on CPU the engine and learner share memory without it: set "
                          "rollout.colocate=false")
    try:  # flex attention has no backward on CPU (torch 2.13)
        check_attention_backward(policy, torch.device(devices.type))
    except ValueError as e:
        raise ConfigError(f"model.attn_implementation={cfg.model.attn_implementation!r}: "
                          f"{e}") from e
    log.info("compute: %s", devices.describe())
    learner = build_learner(cfg, model_dir, policy, devices)
    eos_ids = tuple(sorted({tokenizer.eos_token_id} | _generation_eos_ids(policy)))
    engine = build_engine(cfg, model_dir, eos_ids, tokenizer.pad_token_id, devices)
    scorer = RewardScorer.from_settings(scorer_settings(cfg))
    source = build_source(cfg, data, engine, scorer, tokenizer)
    state_dir = Path(cfg.checkpoint.checkpoint_state_dir or output_dir / "state")
    state = load_latest_state(state_dir) if cfg.checkpoint.resume else None
    if state is not None:  # before the sink opens the file: drop steps the state does not hold
        JsonlSink.truncate_after(output_dir / "metrics.jsonl", state.step)
    traces = TraceWriter(output_dir / "traces") if cfg.logging.save_traces else None
    if traces is not None and state is not None:  # a resumed run redoes the later steps
        traces.truncate_after(state.step)
    logger = MetricsLogger(build_sinks(cfg, output_dir, to_dict(cfg)))
    run = Run(cfg=cfg, output_dir=output_dir, tokenizer=tokenizer, data=data, learner=learner,
              engine=engine, scorer=scorer, source=source, logger=logger,
              model_shape=ModelShape.of(policy), state_dir=state_dir, resume_from=state,
              devices=devices, traces=traces,
              evaluator=Evaluator(data.eval_sets, eval_settings(cfg)))
    return run


class PromptData(NamedTuple):
    model_dir: str
    tokenizer: object
    data: DataBundle


def build_data(cfg: Config) -> PromptData:
    """The prompts of training and eval, tokenised, with the model's tokenizer and directory.
    Data first: a bad row fails before any model (or a 45 s conversion) is touched."""
    loaded = load_datasets(cfg.data, cfg.experiment.seed, cfg.rewards.remap_verifier)
    check_judge_configured(cfg, loaded)
    model_dir = resolve_model_dir(cfg.model.name_or_path)
    tokenizer = load_tokenizer(model_dir)
    data = tokenize_datasets(loaded, cfg.data, tokenizer, cfg.experiment.seed)
    check_template_turns(cfg, tokenizer)
    return PromptData(model_dir, tokenizer, data)


def check_template_turns(cfg: Config, tokenizer: object) -> None:
    """A multi-turn workflow needs a chat template that writes turns: ConfigError if the one
    `data.chat_template` picks cannot (tried on a short conversation; no model needed)."""
    if cfg.rollout.workflow == "single_turn":
        return
    try:
        check_turns(tokenizer, load_chat_template(cfg.data.chat_template, tokenizer).render)
    except ValueError as e:
        raise ConfigError(f"data.chat_template={cfg.data.chat_template!r} with rollout.workflow="
                          f"{cfg.rollout.workflow!r}: {e}") from e


def plan_devices(cfg: Config, cluster_gpus: float | None) -> DevicePlan:
    """`model.device` against what exists: this process's devices (local launcher), or the Ray
    cluster's GPUs (`cluster_gpus`; the driver of a GPU cluster may have none itself).
    ConfigError naming what was asked and what exists when it does not fit. Host memory is kept
    where the learners compute on the host, unless `model.keep_freed_host_memory` says."""
    plan = _device_and_precision(cfg, cluster_gpus)
    keep = cfg.model.keep_freed_host_memory
    return replace(plan, keep_host_memory=plan.type == HOST.type if keep is None else keep)


def _device_and_precision(cfg: Config, cluster_gpus: float | None) -> DevicePlan:
    m, r = cfg.model, cfg.rollout
    if cluster_gpus is None:
        try:
            device = resolve_device(m.device)
        except DeviceUnavailable as e:
            raise ConfigError(str(e)) from None
        return DevicePlan(device.type, device.bf16_compute(m.bf16_autocast))
    learner_gpus = cfg.world_size
    engine_gpus = r.vllm_num_engines * r.vllm_tensor_parallel_size
    wanted = learner_gpus + engine_gpus
    device_type = cluster_device_type(m.device, cluster_gpus)
    bf16 = cluster_bf16(device_type, m.bf16_autocast)
    if device_type == HOST.type:
        return DevicePlan(device_type, bf16)
    if cluster_gpus < wanted:
        raise ConfigError(
            f"model.device={m.device}: the run needs {wanted} GPUs ({learner_gpus} learners "
            f"from distributed.num_learners_per_node={list(cfg.distributed.num_learners_per_node)}"
            f" + rollout.vllm_num_engines={r.vllm_num_engines} x vllm_tensor_parallel_size="
            f"{r.vllm_tensor_parallel_size}), but the Ray cluster has {cluster_gpus:g}")
    return DevicePlan(device_type, bf16,
                      gpus_per_learner=1, gpus_per_engine=r.vllm_tensor_parallel_size)


def build_learner(cfg: Config, model_dir: str, policy: torch.nn.Module,
                  devices: DevicePlan) -> LearnerProtocol:
    """The policy trained here (local launcher, moved to the run's device), or by Ray actors
    that load their own copies and shard them (ray launcher); `policy` then stays the
    driver's host copy for checkpoints."""
    d = cfg.distributed
    settings = learner_settings(cfg, devices.bf16)
    lora = lora_settings(cfg)
    if lora is not None:  # here too under Ray: the driver's copy saves adapter checkpoints
        try:
            policy = wrap_lora(policy, lora)
        except (LoraTargetError, ImportError) as e:  # a target matching nothing; no PEFT
            raise ConfigError(str(e)) from e
    if d.launcher != "ray":  # local, slurm: the one learner in this process
        device = resolve_device(devices.type)
        policy.to(device.torch)
        # A LoRA policy's reference is its own base (adapters off): no copy.
        reference = (Learner.frozen_copy(policy) if cfg.loads_reference and lora is None
                     else None)
        return Learner(policy, reference, settings, device=device.torch,
                       reference_is_base=cfg.loads_reference and lora is not None)
    from rlvr.distributed import LearnerGroup, LearnerSpec

    spec = LearnerSpec(model_dir=str(model_dir), settings=settings, device=devices.type,
                       dtype=cfg.model.dtype, attn_implementation=cfg.model.attn_implementation,
                       sharding=d.sharding if cfg.world_size > 1 else
                       "none", cpu_offload=d.cpu_offload, with_reference=cfg.loads_reference,
                       timeout_s=d.collective_timeout_s, num_threads=actor_threads(cfg),
                       lora=lora, keep_host_memory=devices.keep_host_memory)
    group = LearnerGroup(spec, num_learners=cfg.world_size, backend="ray",
                         ray_address=d.ray_address or None,
                         learners_per_node=list(d.num_learners_per_node),
                         gpus_per_learner=devices.gpus_per_learner)
    return GroupLearner(group, policy)


def build_engine(cfg: Config, model_dir: str, eos_ids: tuple[int, ...],
                 pad_id: int, devices: DevicePlan) -> RolloutEngine:
    """The engine in this process, or `rollout.vllm_num_engines` engine actors behind the same
    protocol."""
    r, settings = cfg.rollout, engine_settings(cfg, devices.type, devices.bf16)
    if r.vllm_num_engines == 0:
        return create_engine(r.engine, model_dir, settings, eos_ids, pad_id)
    # Resolved here: the actors' tensor-parallel ranks depend on which engine it is.
    return EngineGroup(r.vllm_num_engines, resolve_engine_name(r.engine), str(model_dir),
                       settings, eos_ids, pad_id,
                       num_threads=actor_threads(cfg),
                       cpus_per_engine=float(r.vllm_tensor_parallel_size),
                       timeout_s=cfg.distributed.collective_timeout_s,
                       ray_address=cfg.distributed.ray_address or None,
                       gpus_per_engine=devices.gpus_per_engine,
                       bucket_bytes=r.weight_sync_bucket_mb * 2**20)


def _generation_eos_ids(model: torch.nn.Module) -> set[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return set()
    return set(eos) if isinstance(eos, (list, tuple)) else {eos}


def build_source(cfg: Config, data: DataBundle, engine: RolloutEngine, scorer: RewardScorer,
                 tokenizer: object = None) -> EpisodeSource | DataPrepActor:
    """Prompts -> engine -> scored groups: here, or in the data-preparation actor."""
    if not cfg.distributed.data_prep_actor:
        return EpisodeSource(data.train, engine, scorer, source_settings(cfg), tokenizer)
    return DataPrepActor(data.train, engine, source_settings(cfg), scorer_settings(cfg),
                         timeout_s=cfg.distributed.collective_timeout_s)
