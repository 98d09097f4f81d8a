"""From a config to the parts of a run: data, tokenizer, learner, engine, verifiers, episode
source, metric sinks, and the saved state to resume from. `build_run` does it in an order that
fails fast: names are checked against the registries and data rows are validated before any
model loads. Each part gets only its own settings record (`rlvr.run.settings`).

Not here: what happens each step (`rlvr.run.loop`).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from rlvr.checkpoint import write_text_atomic
from rlvr.checkpoint.rerun import check_rerun, config_path, move_aside
from rlvr.checkpoint.resume import plan_resume
from rlvr.checkpoint.state import TrainingState
from rlvr.config import Config, ConfigError, to_dict, to_yaml, warnings_for
from rlvr.console import phase, quiet_imported_torch, quiet_third_party
from rlvr.data import DataBundle, load_datasets, tokenize_datasets
from rlvr.device import (HOST, ONE_GPU_PER_RANK_FIX, DeviceUnavailable, cluster_bf16,
                         cluster_device_type, collective_backend, keep_freed_host_memory,
                         resolve_device)
from rlvr.distributed.data_prep import DataPrepActor
from rlvr.distributed.engine_group import EngineGroup
from rlvr.distributed.trainer_learner import GroupLearner
from rlvr.run.input_checks import (check_code_sandbox, check_custom_verifiers,
                               check_judge_configured, check_position_limit,
                               check_registered_names, check_run_paths, check_template_turns)
from rlvr.learner import Learner, LearnerProtocol
from rlvr.learner.lora import LoraTargetError, wrap_lora
from rlvr.learner.attention import (PackedLayout, check_attention_backward,
                                    check_attention_window, check_packed_attention,
                                    packed_layout)
from rlvr.learner.forward import check_logit_path
from rlvr.metrics import JsonlSink, MetricsLogger, ModelShape, build_sinks
from rlvr.metrics.distributions import distributions_path
from rlvr.metrics.traces import TraceWriter
from rlvr.models import load_causal_lm, load_tokenizer, resolve_model_dir
from rlvr.producer.ahead import RolloutProducer
from rlvr.producer.evaluation import Evaluator
from rlvr.producer.source import EpisodeSource
from rlvr.rewards.scorer import RewardScorer
from rlvr.rollout import RolloutEngine, create_engine
from rlvr.rollout.base import Engine, resolve_engine_name
from rlvr.run.paths import RunPaths
from rlvr.run.settings import (actor_threads, engine_settings, eval_settings, learner_settings,
                           lora_settings, scorer_settings, source_settings)

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
    # An asynchronous run's producer thread, while it runs (`rlvr.run.loop`): training states
    # hold the batches it made ahead.
    producer: RolloutProducer | None = None
    # Weight updates so far, the version the engines hold (0: the initial weights). Staleness
    # counts the updates between a sample's version and this, not steps: a step without a
    # batch changes no weights, and counting it made every batch look stale after a few.
    policy_version: int = 0
    last_update_step: int = 0  # the last step whose update the learner holds
    # Steps in a row whose every sample failed its verifier, and the first failure of them.
    failed_verification_steps: int = 0
    first_verifier_failure: str | None = None
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
    # The learners' attention (a model.attn_implementation value, auto resolved) and whether
    # packing shares a group's prompt (`rlvr.learner.attention.packed_layout`).
    attention: str = "sdpa"
    share_prompts: bool = True

    def describe(self) -> str:
        return (f"device {self.type}, bf16 compute {'on' if self.bf16 else 'off'}, "
                f"collectives {collective_backend(self.type)}, attention {self.attention} "
                f"({'shared' if self.share_prompts else 'unshared'} prompts)"
                + (", freed host memory kept" if self.keep_host_memory else "")
                + (f", {self.gpus_per_learner} GPU per learner, {self.gpus_per_engine} per "
                   "engine actor" if self.type != HOST.type else ""))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def prepare_process(cfg: Config) -> None:
    """What every entry point does first: the registered names checked, the seeds set, the
    config's warnings logged, torch's thread count set, and the libraries' chatter silenced
    (`rlvr.console`: the same console from Python as from the CLI)."""
    quiet_third_party()
    quiet_imported_torch()
    check_registered_names(cfg)
    seed_everything(cfg.experiment.seed)
    for warning in warnings_for(cfg):
        log.warning(warning)
    if cfg.model.num_threads > 0:
        torch.set_num_threads(cfg.model.num_threads)


class StartPlan(NamedTuple):
    """What `plan_start` decided: the run's prompts and the state it resumes (None: step 0)."""

    prompts: PromptData
    state: TrainingState | None


def state_dir_of(cfg: Config) -> Path:
    return Path(cfg.checkpoint.checkpoint_state_dir or RunPaths(cfg.experiment.output_dir).state)


def plan_start(cfg: Config) -> StartPlan:
    """The checks of a run's input and directory, before any model loads, with nothing
    written: the process prepared, the run's directories checked (`check_run_paths`), the
    prompts built (data, chat template, verifiers, the model's positions), the code sandbox
    decided, and where the run starts (`check_rerun`: a changed config is another run,
    refused naming the fields; `plan_resume`: the state to resume, or RunFinished /
    ResumeRefused). The one thing it may write comes last: starting over
    (`checkpoint.resume=false`) moves an earlier run aside (`move_aside`). `build_run` makes it
    unless it is handed one: a launcher that starts servers or learner ranks before training
    makes it first, so that bad input, a finished run or a refused resume starts nothing, and
    hands it on, so nothing is read twice (a resumed state can be tens of GB)."""
    prepare_process(cfg)
    check_run_paths(cfg)  # the run's and its states' directories can be made
    model_dir, tokenizer, data = build_data(cfg, trains=True)
    check_code_sandbox(cfg, data)  # before the scorer: its workers inherit the decision
    output_dir, state_dir = Path(cfg.experiment.output_dir), state_dir_of(cfg)
    if cfg.checkpoint.resume:  # another config's run is not continued (nor called finished)
        check_rerun(output_dir, state_dir, to_yaml(cfg))
    state = plan_resume(output_dir, state_dir, cfg.checkpoint.resume, cfg.num_training_steps,
                        cfg.checkpoint.save_final)
    if not cfg.checkpoint.resume:  # starting over keeps the earlier run, moved aside
        move_aside(output_dir, state_dir)
    return StartPlan(PromptData(model_dir, tokenizer, data), state)


def build_run(cfg: Config, start: StartPlan | None = None) -> Run:
    """Everything is checked (config, data, templates, verifiers, the state to resume, model,
    devices) before the first file of the run directory is written, so a run that fails its
    checks leaves an existing run's files as they were. `start`: `plan_start`'s checks, made
    already by the caller, for this config."""
    (model_dir, tokenizer, data), state = start if start is not None else plan_start(cfg)
    output_dir = Path(cfg.experiment.output_dir)
    state_dir = state_dir_of(cfg)
    layout = driver_layout(cfg)
    try:
        with phase("model") as done:
            policy = load_causal_lm(model_dir, cfg.model.dtype, layout.attention)
            done["detail"] = (f"{cfg.model.name_or_path}, "
                              f"{sum(p.numel() for p in policy.parameters()) / 1e6:.0f}M "
                              f"parameters, {cfg.model.dtype}")
    except ImportError as e:  # flash_attention_2 without flash-attn installed
        raise ConfigError(f"model.attn_implementation={layout.attention!r}: "
                          f"{str(e).splitlines()[0]}") from e
    # Before any sharding: the learner must compute the logits the model's forward computes.
    try:
        check_logit_path(policy)
        check_attention_window(policy, longest_sequence(cfg))
        check_packed_attention(policy, layout.share_prompts)
    except ValueError as e:  # a model the learner cannot train faithfully: the user's input
        raise ConfigError(f"model.name_or_path={cfg.model.name_or_path!r}: {e}") from e
    cluster_gpus = None
    if cfg.distributed.launcher == "ray":  # sized for learners and engines before either starts
        from rlvr.distributed.ray_session import cluster_gpus as ray_gpus, ensure_ray

        r = cfg.rollout
        ensure_ray(cfg.distributed.ray_address or None,
                   cfg.world_size + r.num_engines * r.tensor_parallel_size)
        cluster_gpus = ray_gpus()
    devices = plan_devices(cfg, cluster_gpus)
    if devices.keep_host_memory and cfg.distributed.launcher != "ray":  # learner runs here
        log.info(keep_freed_host_memory())
    if cfg.rollout.colocate and devices.type != "cuda":
        raise ConfigError("rollout.colocate=true puts the engine to sleep (a CUDA feature) so the "
                          f"learner can use its GPU, but this run computes on {devices.type}; "
                          "on CPU the engine and learner share memory without it: set "
                          "rollout.colocate=false")
    try:  # flex attention has no backward on CPU (torch 2.13)
        check_attention_backward(policy, torch.device(devices.type))
    except ValueError as e:
        raise ConfigError(f"model.attn_implementation={layout.attention!r}: {e}") from e
    log.info("compute: %s", devices.describe())
    # Every check passed: from here on the run writes.
    output_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(config_path(output_dir), to_yaml(cfg))  # what a rerun compares
    learner = build_learner(cfg, model_dir, policy, devices)
    eos_ids = engine_eos_ids(tokenizer, policy)
    with phase("engine") as done:
        engine = build_engine(cfg, model_dir, eos_ids, tokenizer.pad_token_id, devices)
        done["detail"] = type(engine).__name__
    scorer = RewardScorer.from_settings(scorer_settings(cfg, tokenizer))
    source = build_source(cfg, data, engine, scorer, tokenizer)
    # Before the sinks open the files: drop steps the state does not hold, or, for a start at
    # step 0 `plan_resume` allowed (resume or not), every step (none had trained).
    for path in (RunPaths(output_dir).metrics, distributions_path(output_dir)):
        JsonlSink.truncate_after(path, state.step if state is not None else -1)
    traces = TraceWriter(RunPaths(output_dir).traces) if cfg.logging.save_traces else None
    if traces is not None and state is not None:  # a resumed run redoes the later steps
        traces.truncate_after(state.step)
    logger = MetricsLogger(build_sinks(cfg, output_dir, to_dict(cfg)))
    run = Run(cfg=cfg, output_dir=output_dir, tokenizer=tokenizer, data=data, learner=learner,
              engine=engine, scorer=scorer, source=source, logger=logger,
              model_shape=ModelShape.of(policy), state_dir=state_dir, resume_from=state,
              devices=devices, traces=traces,
              evaluator=Evaluator(data.eval_sets, eval_settings(cfg), tokenizer))
    return run


def longest_sequence(cfg: Config) -> int:
    """The most tokens one sequence holds, in the engine and in the learner's packed rows: the
    prompt and every token of its episode (all turns and what was given between them, for a
    multi-turn workflow), or the prompt and an eval answer."""
    return cfg.data.max_prompt_length + max(cfg.episode_tokens, cfg.eval_response_length)


def check_run_inputs(cfg: Config) -> None:
    """What `build_run` checks of the input before any model loads (registered names, data,
    chat template, verifiers), with nothing built or written: for a launcher whose trainer
    runs elsewhere (a Slurm job), so that bad input fails here, before the job's files are
    written. Raises ConfigError or DataError. The state to resume is left to the trainer: its
    checksums would read every byte of the state here."""
    check_registered_names(cfg)
    check_run_paths(cfg)
    build_data(cfg, trains=True)


class PromptData(NamedTuple):
    model_dir: str
    tokenizer: object
    data: DataBundle


def build_data(cfg: Config, trains: bool = False) -> PromptData:
    """The prompts of training and eval, tokenised, with the model's tokenizer and directory.
    Data first: a bad row fails before any model (or a 45 s conversion) is touched. The
    longest sequence is checked against the model's positions: an eval answer's, and a
    training episode's for a run that `trains` (`rlvr eval` does not)."""
    with phase("data") as done:
        loaded = load_datasets(cfg.data, cfg.experiment.seed, cfg.rewards.remap_verifier)
        check_judge_configured(cfg, loaded)
        check_custom_verifiers(cfg, loaded)
        model_dir = resolve_model_dir(cfg.model.name_or_path)
        check_position_limit(cfg, model_dir, trains)
        tokenizer = load_tokenizer(model_dir)
        data = tokenize_datasets(loaded, cfg.data, tokenizer, cfg.experiment.seed)
        check_template_turns(cfg, tokenizer)
        done["detail"] = describe_data(data)
    return PromptData(model_dir, tokenizer, data)


def describe_data(data: DataBundle) -> str:
    """`data` phase's line: what was read, per source, and what was left out."""
    train = ", ".join(f"{n} {name}" for name, n in data.train_sizes.items())
    evals = ", ".join(f"{len(s.prompts)} {s.name}" for s in data.eval_sets) or "none"
    left = [f"{data.num_dropped_too_long} too long" if data.num_dropped_too_long else "",
            f"{data.num_bad_rows} bad rows" if data.num_bad_rows else ""]
    left_out = "; left out: " + ", ".join(x for x in left if x) if any(left) else ""
    return f"training prompts {train or 'none'}; eval prompts {evals}{left_out}"


def plan_devices(cfg: Config, cluster_gpus: float | None) -> DevicePlan:
    """`model.device` against what exists: this process's devices (local launcher), or the Ray
    cluster's GPUs (`cluster_gpus`; the driver of a GPU cluster may have none itself).
    ConfigError naming what was asked and what exists when it does not fit. Host memory is kept
    where the learners compute on the host, unless `model.keep_freed_host_memory` says."""
    plan = _device_and_precision(cfg, cluster_gpus)
    keep = cfg.model.keep_freed_host_memory
    layout = _layout(cfg, plan.type)
    return replace(plan, keep_host_memory=plan.type == HOST.type if keep is None else keep,
                   attention=layout.attention, share_prompts=layout.share_prompts)


def driver_layout(cfg: Config) -> PackedLayout:
    """The attention and packing of the policy this process loads: the learner's own where it
    trains here (local and slurm launchers), the same as `plan_devices` gives. Under Ray this
    copy trains nowhere (it is checked and saved; the ranks load their own): it takes the
    layout of model.device, the CPU's for auto (the cluster is not known yet)."""
    if cfg.distributed.launcher == "ray":
        return _layout(cfg, "cuda" if cfg.model.device == "cuda" else HOST.type)
    try:
        return _layout(cfg, resolve_device(cfg.model.device).type)
    except DeviceUnavailable as e:
        raise ConfigError(str(e)) from None


def _layout(cfg: Config, device_type: str) -> PackedLayout:
    try:
        return packed_layout(cfg.model.attn_implementation, cfg.algorithm.share_prompts,
                             device_type)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _device_and_precision(cfg: Config, cluster_gpus: float | None) -> DevicePlan:
    m, r = cfg.model, cfg.rollout
    if cluster_gpus is None:
        try:
            device = resolve_device(m.device)
        except DeviceUnavailable as e:
            raise ConfigError(str(e)) from None
        here = cfg.world_size if cfg.distributed.launcher == "local" else 1
        if device.type == "cuda" and here > torch.cuda.device_count():
            # NCCL would refuse the shared GPU at its first collective, after every rank loaded
            raise ConfigError(
                f"distributed.num_learners_per_node={list(cfg.distributed.num_learners_per_node)}"
                f" starts {here} learner ranks on this machine, which has "
                f"{torch.cuda.device_count()} GPU(s): NCCL needs one GPU per rank. "
                f"{ONE_GPU_PER_RANK_FIX}")
        return DevicePlan(device.type, device.bf16_compute(m.bf16_autocast))
    learner_gpus = cfg.world_size
    engine_gpus = r.num_engines * r.tensor_parallel_size
    wanted = learner_gpus + engine_gpus
    device_type = cluster_device_type(m.device, cluster_gpus)
    bf16 = cluster_bf16(device_type, m.bf16_autocast)
    if device_type == HOST.type:
        return DevicePlan(device_type, bf16)
    if cluster_gpus < wanted:
        raise ConfigError(
            f"model.device={m.device}: the run needs {wanted} GPUs ({learner_gpus} learners "
            f"from distributed.num_learners_per_node={list(cfg.distributed.num_learners_per_node)}"
            f" + rollout.num_engines={r.num_engines} x tensor_parallel_size="
            f"{r.tensor_parallel_size}), but the Ray cluster has {cluster_gpus:g}")
    return DevicePlan(device_type, bf16,
                      gpus_per_learner=1, gpus_per_engine=r.tensor_parallel_size)


def build_learner(cfg: Config, model_dir: str, policy: torch.nn.Module,
                  devices: DevicePlan) -> LearnerProtocol:
    """The policy trained here (one learner, moved to the run's device), or by ranks that load
    their own copies and shard them: Ray actors (ray launcher), or processes a launcher
    started (local, slurm, torchrun: this process is rank 0). `policy` then stays the
    driver's host copy for checkpoints."""
    d = cfg.distributed
    settings = learner_settings(cfg, devices.bf16)
    lora = lora_settings(cfg)
    if lora is not None:  # here too under Ray: the driver's copy saves adapter checkpoints
        try:
            policy = wrap_lora(policy, lora)
        except (LoraTargetError, ImportError) as e:  # a target matching nothing; no PEFT
            raise ConfigError(str(e)) from e
    if d.launcher != "ray" and cfg.world_size == 1:  # local, slurm: one learner, here
        device = resolve_device(devices.type)
        policy.to(device.torch)
        # A LoRA policy's reference is its own base (adapters off): no copy.
        reference = (Learner.frozen_copy(policy) if cfg.loads_reference and lora is None
                     else None)
        return Learner(policy, reference, settings, device=device.torch,
                       reference_is_base=cfg.loads_reference and lora is not None)
    from rlvr.distributed import LearnerGroup, LearnerSpec

    spec = LearnerSpec(model_dir=str(model_dir), settings=settings, device=devices.type,
                       dtype=cfg.model.dtype, attn_implementation=devices.attention,
                       sharding=d.sharding if cfg.world_size > 1 else
                       "none", cpu_offload=d.cpu_offload, with_reference=cfg.loads_reference,
                       timeout_s=d.collective_timeout_s, num_threads=actor_threads(cfg),
                       lora=lora, keep_host_memory=devices.keep_host_memory)
    group = LearnerGroup(spec, num_learners=cfg.world_size,
                         backend="ray" if d.launcher == "ray" else "ranks",
                         ray_address=d.ray_address or None,
                         learners_per_node=list(d.num_learners_per_node),
                         gpus_per_learner=devices.gpus_per_learner)
    return GroupLearner(group, policy)


def _anywhere(engine: Engine) -> str | None:
    return None


def _beside_local_ranks(engine: Engine) -> str | None:
    if engine.beside_local_ranks:
        return None
    return ("it cannot start inside a learner rank's process group (rollout.engine=remote "
            "runs it on servers)")


def build_engine(cfg: Config, model_dir: str, eos_ids: tuple[int, ...],
                 pad_id: int, devices: DevicePlan) -> RolloutEngine:
    """The engine in this process, or `rollout.num_engines` engine actors behind the same
    protocol."""
    r, settings = cfg.rollout, engine_settings(cfg, devices.type, devices.bf16)
    if r.num_engines == 0:
        # With local learner ranks the engine starts in rank 0's process, which already holds
        # their process group: `auto` passes over an engine that would wait on it (the config
        # check refuses naming one here).
        among_ranks = cfg.world_size > 1 and cfg.distributed.launcher == "local"
        name = resolve_engine_name(r.engine, _beside_local_ranks if among_ranks else _anywhere)
        return create_engine(name, model_dir, settings, eos_ids, pad_id)
    # Resolved here: the actors' tensor-parallel ranks depend on which engine it is.
    return EngineGroup(r.num_engines, resolve_engine_name(r.engine), str(model_dir),
                       settings, eos_ids, pad_id,
                       num_threads=actor_threads(cfg),
                       cpus_per_engine=float(r.tensor_parallel_size),
                       timeout_s=cfg.distributed.collective_timeout_s,
                       ray_address=cfg.distributed.ray_address or None,
                       gpus_per_engine=devices.gpus_per_engine,
                       bucket_bytes=r.weight_sync_bucket_mb * 2**20)


def engine_eos_ids(tokenizer: object, policy: torch.nn.Module) -> tuple[int, ...]:
    """The ids that end a completion: the tokenizer's EOS and the model's generation config's."""
    return tuple(sorted({tokenizer.eos_token_id} | _generation_eos_ids(policy)))


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
    return DataPrepActor(data.train, engine, source_settings(cfg), scorer_settings(cfg, tokenizer),
                         timeout_s=cfg.distributed.collective_timeout_s)
