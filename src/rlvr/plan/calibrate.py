"""The calibration behind `rlvr plan`: the run's pieces built as `rlvr.run.build` builds them (same
data, model load, device plan, learner and engine), then a few measurements on this machine:
the step's prompts generated with a capped number of new tokens and scored, real learner
updates over one and two packed rows, and one weight sync.

What it is not: a training run. It writes nothing; its updates and synced weights are
thrown away with the process. It plans runs whose learner and engine live in this process
(one learner, an in-process engine): ranks, Ray actors and remote servers are refused.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace

import torch

from rlvr.run.build import (build_data, build_engine, build_learner, driver_layout,
                        engine_eos_ids, plan_devices, prepare_process)
from rlvr.config import Config, ConfigError
from rlvr.device import device_memory, keep_freed_host_memory, memory_metrics, resolve_device
from rlvr.learner import MiniBatch
from rlvr.learner.memory_plan import MemoryFit, MemoryProbe, probe_rows
from rlvr.models import load_causal_lm
from rlvr.plan.records import (Calibration, LearnerCalibration, LinearCost, MemoryCalibration,
                               RolloutCalibration)
from rlvr.producer.source import EpisodeSource
from rlvr.rewards.scorer import RewardScorer
from rlvr.rollout import ENGINES
from rlvr.rollout.weight_sync import sync_weights
from rlvr.run.settings import scorer_settings, source_settings
from rlvr.run.loop import training_mini_batches

log = logging.getLogger(__name__)
GIB = 1024 ** 3
WARM_UP_TOKENS = 32  # new tokens of the generation that warms the engine up


class MemoryWatch:
    """Bytes held on `device` now, and the most held since the watch began: the CUDA
    allocator's figures on a GPU, the process's resident set on a CPU (what the run logs as
    `memory/*`, `rlvr.device.memory_metrics`)."""

    def __init__(self, device: torch.device):
        self.device, self.peak = device, 0.0

    def read(self) -> tuple[float, float]:
        m = memory_metrics(self.device)  # on a GPU it resets the peak: keep the running most
        if self.device.type == "cuda":
            now, peak = m["memory/allocated_gb"], m["memory/peak_gb"]
        else:  # peak_rss is the process's lifetime peak
            peak = m["memory/peak_rss_gb"]
            now = m.get("memory/rss_gb", peak)
        self.peak = max(self.peak, peak * GIB)
        return now * GIB, self.peak

    def total(self, limit_gb: float | None) -> float:
        memory = device_memory(self.device)
        total = (float(memory.total) if memory is not None
                 else float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")))
        return min(total, limit_gb * GIB) if limit_gb else total


def _uses_servers(engine: str) -> bool:
    record = ENGINES.get(engine)  # None for `auto`, which never picks servers
    return record is not None and record.uses_servers


def check_plannable(cfg: Config) -> None:
    """ConfigError for a run whose learner or engine would not live in this process."""
    d, r = cfg.distributed, cfg.rollout
    where = [what for what, yes in [
        (f"distributed.launcher={d.launcher}", d.launcher == "ray"),
        (f"{cfg.world_size} learner ranks", cfg.world_size > 1),
        (f"rollout.num_engines={r.num_engines}", r.num_engines > 0),
        (f"rollout.engine={r.engine} (inference servers)",
         _uses_servers(r.engine) or bool(r.server_addresses)),
        ("distributed.data_prep_actor", d.data_prep_actor)] if yes]
    if where:
        raise ConfigError("rlvr plan calibrates runs whose learner and engine share one "
                          "process (one learner, an in-process engine); this config has "
                          f"{', '.join(where)}")


def calibrate(cfg: Config, gen_tokens: int | None = None) -> Calibration:
    """Build the run's pieces and measure them (see the module docstring). `gen_tokens`: the
    cap on new tokens of the calibration's generation; None (or the run's response_length or
    more): whole completions, their lengths and rewards as the run will see them."""
    check_plannable(cfg)
    start = time.perf_counter()
    prepare_process(cfg)
    model_dir, tokenizer, data = build_data(cfg, trains=True)
    devices = plan_devices(cfg, None)
    if devices.keep_host_memory:  # as build_run: freed host memory stays with the process
        keep_freed_host_memory()
    device = resolve_device(devices.type)
    watch = MemoryWatch(device.torch)
    before_model, _ = watch.read()
    policy = load_causal_lm(model_dir, cfg.model.dtype, driver_layout(cfg).attention)
    learner = build_learner(cfg, model_dir, policy, devices)
    before_engine, _ = watch.read()
    engine = build_engine(cfg, model_dir, engine_eos_ids(tokenizer, policy),
                          tokenizer.pad_token_id, devices)
    scorer = RewardScorer.from_settings(scorer_settings(cfg, tokenizer))
    try:
        after_build, build_peak = watch.read()
        build_s = time.perf_counter() - start
        memory = MemoryCalibration(
            device_total=watch.total(cfg.model.max_memory_gb), before_model=before_model,
            after_build=after_build,
            build_peak=build_peak, policy_params=_bytes(learner.policy.parameters()),
            reference_params=(_bytes(learner.reference.parameters())
                              if learner.reference is not None else 0.0),
            trainable_params=_bytes(learner.trainable),
            engine=max(after_build - before_engine, 0.0),
            kv_cache=float(getattr(engine, "reserved_kv_cache_bytes", 0)))
        rollout = calibrate_rollout(cfg, data.train, engine, scorer, tokenizer, gen_tokens)
        learner_cal = calibrate_learner(cfg, learner, watch, memory)
        sync_start = time.perf_counter()
        sync_weights(learner, engine, 1)
        weight_sync_s = time.perf_counter() - sync_start
    finally:
        scorer.close()
        engine.close()
        learner.close()
    return Calibration(device=device.describe(), engine=type(engine).__name__, build_s=build_s,
                       rollout=rollout, learner=learner_cal, memory=memory,
                       weight_sync_s=weight_sync_s, seconds=time.perf_counter() - start)


def _bytes(params) -> float:
    return float(sum(p.numel() * p.element_size() for p in params))


def calibrate_rollout(cfg: Config, prompts, engine, scorer, tokenizer,
                      gen_tokens: int | None) -> RolloutCalibration:
    """The step's prompts x samples generated (the run's workflow, engine and verifiers, via
    an `EpisodeSource` as the run builds it) to warm up (at most `WARM_UP_TOKENS` new tokens:
    the engine's first calls compile), at 1 new token, then at the cap: engine
    seconds against decode steps, and what the last call produced."""
    cap = max(1, min(gen_tokens or cfg.rollout.response_length, cfg.rollout.response_length))
    settings = source_settings(cfg)

    def produce(max_tokens: int, step: int):
        source = EpisodeSource(prompts, engine, scorer, replace(
            settings, sampling=replace(settings.sampling, max_tokens=max_tokens)), tokenizer)
        try:
            episodes, metrics = source.produce(step)
        finally:
            source.close()
        scoring = metrics.get("time/scoring", 0.0)
        samples = [s for g in episodes.groups for s in g]
        steps = max((len(s.completion.token_ids_T) for s in samples), default=0)
        return episodes.groups, samples, metrics["time/generation"] - scoring, scoring, steps

    # Warm-up: the engine's first calls compile and allocate for the batch's shapes; a few
    # dozen decode steps meet them, a whole long completion is not needed.
    produce(min(cap, WARM_UP_TOKENS), 1)
    _, _, small_s, _, small_steps = produce(1, 2)
    groups, samples, large_s, scoring_s, large_steps = produce(cap, 3)
    generation = (LinearCost.through((small_steps, small_s), (large_steps, large_s))
                  if large_steps > small_steps else LinearCost(large_s, 0.0))
    whole = cap >= cfg.rollout.response_length
    return RolloutCalibration(
        max_tokens=cap, num_samples=len(samples),
        prompt_tokens_mean=sum(len(s.prompt.token_ids) for s in samples) / max(len(samples), 1),
        finished_lengths=tuple(len(s.completion.token_ids_T) for s in samples
                               if not s.completion.truncated),
        num_truncated=sum(s.completion.truncated for s in samples),
        generation_s=generation, scoring_s_per_sample=scoring_s / max(len(samples), 1),
        spread_fraction=(sum(len({s.reward for s in g}) > 1 for g in groups) / len(groups)
                         if whole and groups else None),
        response_lengths=tuple(cfg.rollout.response_length if s.completion.truncated and not whole
                               else len(s.completion.token_ids_T) for s in samples))


def calibrate_learner(cfg: Config, learner, watch: MemoryWatch,
                      memory: MemoryCalibration) -> LearnerCalibration:
    """Real updates (the run's loss, learner and optimizer) over packed rows of
    `algorithm.pack_length` tokens: one row to warm up (the gradients' and AdamW's first
    allocation, any compile), then one and two rows timed. Memory: on a GPU the learner's
    own measured plan (`rlvr.learner.memory_plan`, made at its first update); on a CPU the
    resident set's peak above what the build held, less gradients and optimizer state, as
    `MemoryFit` takes probes."""
    row_tokens = cfg.algorithm.pack_length
    vocab = learner.policy.config.get_text_config().vocab_size

    def update(rows: int) -> float:
        batch = probe_rows(rows, row_tokens, vocab)
        loss = training_mini_batches(cfg, batch, step=0)[0].loss
        start = time.perf_counter()
        learner.update_mini_batches([MiniBatch(batch, loss, 1)], num_epochs=1,
                                    temperature=cfg.rollout.temperature)
        return time.perf_counter() - start

    held, _ = watch.read()
    update(1)
    _, peak_one = watch.read()
    one_s = update(1)
    two_s = update(2)
    _, peak_two = watch.read()
    plan = getattr(learner, "memory_plan", None)
    if plan is not None:
        fit, source = plan.fit, "allocator"
    else:
        state = 3 * memory.trainable_params  # gradients and AdamW's two moments
        one = max(peak_one - held - state, 0.0)
        fit = MemoryFit.through(MemoryProbe(row_tokens, int(one)),
                                MemoryProbe(2 * row_tokens,
                                            int(max(peak_two - held - state, one))))
        source = "allocator" if watch.device.type == "cuda" else "resident set"
    return LearnerCalibration(
        row_tokens=row_tokens, update_s=LinearCost.through((1, one_s), (2, two_s)),
        activation_bytes=LinearCost(fit.fixed_bytes, fit.per_token_bytes),
        memory_source=source, micro_batch_tokens=learner.settings.max_tokens_per_micro_batch)
