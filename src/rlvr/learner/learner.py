"""The learner: policy, optional frozen reference, optimizer and schedule, and one update.

It is algorithm-blind: the caller hands it a loss function (already bound to its loss variant
and normaliser) and a packed batch; the learner runs forward passes, accumulates gradients over
micro-batches, clips, and steps. It does not know which loss it runs, nor about rewards.
It runs unchanged on one rank of a sharded policy (`rlvr.distributed`): that caller passes the
sharded forward function, and gradient clipping handles DTensor parameters.

Its training state is keyed by parameter name (`rlvr.learner.protocol.LearnerState`, built by
`rlvr.learner.state_by_name`), so one process and any number of ranks share one format.

On a GPU it chooses, before its first update, what the config leaves open of activation
checkpointing and the micro-batch budget, from measured memory (`rlvr.learner.memory_plan`).

A LoRA policy (`rlvr.learner.lora`) trains its adapters only: the optimizer holds them, the
training state's policy holds them (the frozen base is reloaded from the model directory), the
reference is the policy with its adapters switched off (`reference_is_base`), and engines get
the merged weights under the base model's names.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     set_model_state_dict)
from torch.distributed.tensor import DTensor
from torch.profiler import record_function

from rlvr.algorithm.losses import LossInputs
from rlvr.algorithm.packing import plan_micro_batches
from rlvr.algorithm.polyak import polyak_update_
from rlvr.checkpoint.sharded import load_sharded, save_sharded
from rlvr.device import device_memory, memory_metrics
from rlvr.learner.compiling import compile_decoder_layers
from rlvr.learner.dropout import disable_dropout
from rlvr.learner.forward import forward_logprobs
from rlvr.learner.lora import (adapters_disabled, engine_weights, is_adapter_dropout,
                               trainable_parameters)
from rlvr.learner.memory_plan import (MemoryPlan, memory_room, plan_memory, probe_pass,
                                      probe_rows)
from rlvr.learner.schedule import build_scheduler
from rlvr.learner.state_by_name import (FULL_STATE, load_optimizer_state_by_name,
                                        load_policy_state_by_name, optimizer_state_by_name,
                                        policy_state_by_name)
from rlvr.learner.protocol import LearnerState
from rlvr.learner.records import LossFn, MiniBatch, UpdateResult  # noqa: F401  (re-exported)
from rlvr.learner.weight_decay import decay_param_groups
from rlvr.types import PackedBatch

log = logging.getLogger(__name__)
# (model, batch, temperature, with_entropy) -> (logprobs_RL, entropy_RL or None)
ForwardFn = Callable[[torch.nn.Module, PackedBatch, float, bool],
                     tuple[torch.Tensor, torch.Tensor | None]]


@dataclass(frozen=True)
class LearnerSettings:
    """What the learner needs to know, and nothing about RL variants."""

    learning_rate: float
    lr_scheduler_type: str
    warm_up_steps: int
    total_optimizer_steps: int
    lr_num_cycles: int = 1  # cosine_with_restarts
    lr_end: float = 1e-7  # polynomial
    lr_power: float = 1.0  # polynomial
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    bf16_autocast: bool = False  # resolved (rlvr.device): autocast of an unsharded policy
    # None: chosen by measured memory where the device has allocator figures (a GPU; see
    # `pack_length`), else off.
    gradient_checkpointing: bool | None = False
    # torch.compile each decoder layer with this backend (`rlvr.learner.compiling`); None: no.
    compile_backend: str | None = None
    # See `plan_micro_batches`. None with `pack_length` set, on a GPU: the most that fit.
    max_tokens_per_micro_batch: int | None = None
    # Rows of this many tokens probe the memory (`rlvr.learner.memory_plan`) before the first
    # update, to choose what the two fields above leave None; None: nothing is planned.
    pack_length: int | None = None
    max_memory_bytes: int | None = None  # of the whole GPU, what the plan may count on


MAX_RATIO_VALUES = 1 << 16


class _FirstPassStats:
    """Entropy and engine-gap sums over the response tokens of the pre-update passes."""

    def __init__(self) -> None:
        self.entropy_sum = self.diff_sum = self.diff_max = self.kl_sum = 0.0
        self.log_ratios: list[torch.Tensor] = []  # [T_i] per micro-batch, on the host

    def add(self, mb: PackedBatch, logprobs_RL: torch.Tensor,
            entropy_RL: torch.Tensor) -> None:
        mask_RL = mb.response_mask_RL
        self.entropy_sum += float(entropy_RL[mask_RL].sum())
        log_ratio = (logprobs_RL - mb.engine_logprobs_RL)[mask_RL]  # log(local / engine)
        diff = log_ratio.abs()
        self.diff_sum += float(diff.sum())
        # k3 (Schulman): r - 1 - log r >= 0, unbiased for KL(engine || local) on engine samples
        self.kl_sum += float((torch.expm1(log_ratio) - log_ratio).sum())
        self.diff_max = max(self.diff_max, float(diff.max()) if diff.numel() else 0.0)
        self.log_ratios.append(log_ratio.detach().float().cpu())

    def ratio_T(self) -> torch.Tensor | None:
        """[T] the ratios of every token added, strided down to MAX_RATIO_VALUES."""
        if not self.log_ratios:
            return None
        log_ratio_T = torch.cat(self.log_ratios)
        stride = -(-log_ratio_T.numel() // MAX_RATIO_VALUES)  # ceil
        return torch.exp(log_ratio_T[::stride]) if log_ratio_T.numel() else None


def accumulate_sums(total: dict[str, float], part: dict[str, float]) -> None:
    """Add micro-batch (or rank) metric sums; `_max` / `_min` entries combine by max / min."""
    for key, value in part.items():
        if key.endswith("_max"):
            total[key] = max(total.get(key, value), value)
        elif key.endswith("_min"):
            total[key] = min(total.get(key, value), value)
        else:
            total[key] = total.get(key, 0.0) + value


def clip_grad_norm(parameters: list[torch.nn.Parameter], max_norm: float) -> float:
    """`torch.nn.utils.clip_grad_norm_`, also for DTensor (FSDP2) parameters: their total norm
    is a DTensor holding this rank's share only, so it is made whole (a collective) before it
    scales the gradients and before it is read as a number."""
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    if isinstance(total_norm, DTensor):
        total_norm = total_norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total_norm)
    return float(total_norm)


class Learner:
    def __init__(self, policy: torch.nn.Module, reference: torch.nn.Module | None,
                 settings: LearnerSettings, forward_fn: ForwardFn = forward_logprobs,
                 device: torch.device | None = None, reference_is_base: bool = False):
        """`forward_fn` computes a packed batch's logprobs under a model (policy or reference);
        a sharded policy needs the sharded variant. `device` is where the forward passes run
        (batches are moved there); None: where the policy's parameters are. It differs from
        them under FSDP2 CPU offload (parameters on the host, compute on the GPU).
        `reference_is_base`: a LoRA policy with `reference` None computes reference logprobs
        itself, with its adapters switched off (the base model, no second copy)."""
        if reference_is_base and reference is not None:
            raise ValueError("reference_is_base means the policy's base is the reference: "
                             "pass no reference model too")
        self.device = device if device is not None else next(policy.parameters()).device
        # Every pass over the same tokens must see the same function: no dropout noise, but
        # for LoRA's, which the user sets (`model.lora.dropout`).
        disable_dropout(policy, keep=is_adapter_dropout)
        if reference is not None:
            disable_dropout(reference)
        self.policy = policy.train()
        self.forward_fn = forward_fn
        self.reference = reference.eval().requires_grad_(False) if reference is not None else None
        self.reference_is_base = reference_is_base
        self.settings = settings
        if settings.gradient_checkpointing:
            policy.gradient_checkpointing_enable()
        # Chosen before the first update, when its memory is what training will have (a
        # colocated engine asleep, another awake beside it); `memory_plan` says what was.
        self.memory_plan: MemoryPlan | None = None
        self._plan_pending = (settings.pack_length is not None
                              and device_memory(self.device) is not None
                              and (settings.gradient_checkpointing is None
                                   or settings.max_tokens_per_micro_batch is None))
        if settings.compile_backend:  # last: the models are final (copied, sharded, wrapped)
            for model in (policy, reference):
                if model is not None:
                    compile_decoder_layers(model, settings.compile_backend)
        # Every parameter of a plain policy; a LoRA policy's adapters only.
        self.trainable = trainable_parameters(policy)
        # Fused: one kernel over every tensor (torch has it for CPUs and GPUs alike) instead of
        # a Python loop of per-parameter ops; SmolLM2's 135M-parameter step takes 0.04 s
        # instead of 0.31 s on 2 CPU cores, and a late quick-start update (214 tokens) 1.03 s
        # instead of 1.20 s.
        # Biases and norm weights are not decayed (open-instruct's default; `weight_decay.py`).
        self.optimizer = torch.optim.AdamW(
            decay_param_groups(policy, self.trainable, settings.weight_decay),
            lr=settings.learning_rate, betas=settings.betas,
            eps=settings.eps, weight_decay=settings.weight_decay, fused=True)
        self.scheduler = build_scheduler(settings.lr_scheduler_type, self.optimizer,
                                         settings.warm_up_steps, settings.total_optimizer_steps,
                                         num_cycles=settings.lr_num_cycles,
                                         lr_end=settings.lr_end, power=settings.lr_power)

    def skip_update(self, num_epochs: int) -> None:
        """A training step without a batch (every group filtered): no optimizer step, but the
        schedule moves as if one had run, so the learning rate is a function of the training
        step as the schedule defines it (a linear decay still reaches 0 at the last step, and
        warm-up is not stretched by empty steps)."""
        with warnings.catch_warnings():
            # torch warns when the scheduler steps before any optimizer step; here it is meant.
            warnings.filterwarnings("ignore", message=".*lr_scheduler.step.*")
            for _ in range(num_epochs):
                self.scheduler.step()

    @staticmethod
    def frozen_copy(policy: torch.nn.Module) -> torch.nn.Module:
        return copy.deepcopy(policy).eval().requires_grad_(False)

    def update_reference(self, alpha: float) -> None:
        """Polyak step of the frozen reference toward the policy."""
        if self.reference is None:
            raise RuntimeError("no reference model is loaded (a LoRA policy's reference is its "
                               "base, which does not move)")
        polyak_update_(list(self.reference.parameters()), list(self.policy.parameters()), alpha)

    def training_state(self) -> LearnerState:
        """Policy, reference, optimizer and scheduler state for exact resume, keyed by parameter
        name (`LearnerState`). A plain policy's tensors are the live ones: save them before the
        next update. On a sharded policy, a collective: rank 0 gets the full state."""
        reference = self.reference
        return {"policy": policy_state_by_name(self.policy),
                "reference": (get_model_state_dict(reference, options=FULL_STATE)
                              if reference is not None else None),
                "optimizer": optimizer_state_by_name(self.policy, self.optimizer),
                "scheduler": self.scheduler.state_dict()}

    def load_training_state(self, state: LearnerState) -> None:
        """Restore a `LearnerState` saved by any learner: this class, or a `GroupLearner` of
        any size. For one process (sharded ranks restore in `LearnerWorker.load_state_dict`)."""
        options = StateDictOptions(full_state_dict=True)
        # The optimizer before the weights: DCP may step it at zero learning rate first.
        load_optimizer_state_by_name(self.policy, self.optimizer, state["optimizer"], options,
                                     fresh=not state["optimizer"]["state"])
        load_policy_state_by_name(self.policy, state["policy"], options)
        if self.reference is not None and state["reference"] is not None:
            set_model_state_dict(self.reference, state["reference"], options=options)
        self.scheduler.load_state_dict(state["scheduler"])

    def close(self) -> None:
        """Nothing to release (the policy is this process's); the trainer closes any learner."""

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Weights to send to an engine, under the base model's names: detached views (no
        copy), or a LoRA policy's merged weights (`rlvr.learner.lora.engine_weights`)."""
        return engine_weights(self.policy)

    def _autocast(self):
        if self.settings.bf16_autocast:
            # The compute device, not a literal: the same code runs on GPUs.
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @torch.no_grad()
    def _reference_logprobs(self, batch: PackedBatch, temperature: float) -> torch.Tensor | None:
        if self.reference is not None:
            model, switch = self.reference, contextlib.nullcontext()
        elif self.reference_is_base:
            model, switch = self.policy, adapters_disabled(self.policy)
        else:
            return None
        with switch, self._autocast():
            return self.forward_fn(model, batch, temperature, False)[0].float()

    def update(self, batch: PackedBatch, loss: LossFn, num_micro_batches: int,
               num_epochs: int, temperature: float) -> UpdateResult:
        """`num_epochs` optimizer steps over `batch`, each accumulating `num_micro_batches` parts:
        `update_mini_batches` with the whole batch as its one mini-batch. `loss` is any
        `LossInputs -> LossOutputs`; the trainer's is a `PolicyLoss`."""
        return self.update_mini_batches([MiniBatch(batch, loss, num_micro_batches)], num_epochs,
                                        temperature)

    def update_mini_batches(self, mini_batches: list[MiniBatch], num_epochs: int,
                            temperature: float) -> UpdateResult:
        """`num_epochs` passes over `mini_batches`, one optimizer step per mini-batch (so
        `num_epochs x len(mini_batches)` steps, each stepping the schedule), each mini-batch's
        gradient accumulated over its micro-batches and normalised by its own loss.

        Old logprobs are the policy's own before the update's first optimizer step. The first
        mini-batch's come from its first forward pass (detached), which saves a pass; every
        later one's from a no-grad pass before that step, as open-instruct computes them (by
        its turn the policy has moved). The entropy and the engine gap are measured on those
        pre-update passes too.
        """
        start = time.perf_counter()
        if self._plan_pending:
            self.plan_memory()
        micro = [self._micro_batches(mb) for mb in mini_batches]
        with record_function("learner.reference"):
            ref_logprobs = [[self._reference_logprobs(m, temperature) for m in parts]
                            for parts in micro]
        stats = _FirstPassStats()
        old_logprobs = [[]] + self._old_logprobs(micro[1:], temperature, stats)
        sums: dict[str, float] = {}
        grad_norm = learning_rate = 0.0
        skipped = 0
        for epoch in range(num_epochs):
            for i, mb in enumerate(mini_batches):
                self.optimizer.zero_grad(set_to_none=True)
                for j, m in enumerate(micro[i]):
                    # Named spans for torch.profiler (`benchmarks/peak.py`); free when not
                    # profiling.
                    first = epoch == 0 and i == 0
                    with record_function("learner.forward"), self._autocast():
                        new_RL, entropy_RL = self.forward_fn(self.policy, m, temperature, first)
                    new_RL = new_RL.float()
                    if first:
                        old_logprobs[0].append(new_RL.detach())
                        stats.add(m, new_RL.detach(), entropy_RL)
                    with record_function("learner.loss"):
                        out = mb.loss(LossInputs(new_logprobs_RL=new_RL,
                                                 old_logprobs_RL=old_logprobs[i][j],
                                                 advantages_RL=m.advantages_RL,
                                                 response_mask_RL=m.response_mask_RL,
                                                 ref_logprobs_RL=ref_logprobs[i][j],
                                                 sequence_ids_RL=m.sequence_index_RL,
                                                 engine_logprobs_RL=m.engine_logprobs_RL))
                    with record_function("learner.backward"):
                        out.loss.backward()
                    if epoch == num_epochs - 1:
                        accumulate_sums(sums, out.sums)
                with record_function("learner.optimizer"):
                    grad_norm = clip_grad_norm(self.trainable, self.settings.max_grad_norm)
                    learning_rate = self.optimizer.param_groups[0]["lr"]  # the rate this step used
                    if math.isfinite(grad_norm):
                        self.optimizer.step()
                    else:  # a non-finite gradient would poison the weights: skip this step
                        skipped += 1
                    self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        batches = [mb.batch for mb in mini_batches]
        return UpdateResult(
            loss_sums=sums, num_response_tokens=sum(b.num_response_tokens for b in batches),
            num_tokens=sum(b.num_tokens for b in batches),
            num_sequences=sum(b.num_sequences for b in batches),
            entropy_sum=stats.entropy_sum, engine_diff_sum=stats.diff_sum,
            engine_diff_max=stats.diff_max, engine_kl_sum=stats.kl_sum,
            engine_ratio_T=stats.ratio_T(),
            grad_norm=grad_norm, learning_rate=learning_rate,
            skipped_steps=skipped, seconds=time.perf_counter() - start,
            memory=memory_metrics(self.device))

    @property
    def memory_plan_pending(self) -> bool:
        """A memory plan is wanted and not made yet (`plan_memory`)."""
        return self._plan_pending

    def plan_memory(self, agree: Callable[[int], int] = lambda rows: rows) -> MemoryPlan:
        """Choose what the settings leave None (checkpointing, the micro-batch budget) from
        probe passes over rows of `pack_length` tokens (`rlvr.learner.memory_plan`); the first
        update calls it, a sharded learner's ranks all at once (`agree`: a collective giving
        the fewest rows any rank fits). The probes' gradients are discarded and the global RNG
        is not drawn, so the run's numbers do not depend on it; MemoryPlanError when no row
        fits."""
        s, self._plan_pending = self.settings, False
        vocab = self.policy.config.get_text_config().vocab_size

        def probe(rows: int, checkpointing: bool):
            self._set_checkpointing(checkpointing)
            if rows == 1:  # unmeasured first: the gradients' first allocation, any compile
                probe_pass(self.policy, self.forward_fn, self._autocast(),
                           probe_rows(1, s.pack_length, vocab), self.device)
            return probe_pass(self.policy, self.forward_fn, self._autocast(),
                              probe_rows(rows, s.pack_length, vocab), self.device)

        try:
            plan = plan_memory(probe, lambda: memory_room(self.device, self._pending_state_bytes(),
                                                          s.max_memory_bytes),
                               s.pack_length, s.gradient_checkpointing,
                               s.max_tokens_per_micro_batch, agree)
        finally:
            self.optimizer.zero_grad(set_to_none=True)
        self._set_checkpointing(plan.gradient_checkpointing)
        self.settings = dataclasses.replace(
            s, gradient_checkpointing=plan.gradient_checkpointing,
            max_tokens_per_micro_batch=plan.max_tokens_per_micro_batch)
        (log.info if plan.fits else log.warning)("learner memory plan: %s", plan.describe())
        self.memory_plan = plan
        return plan

    def _pending_state_bytes(self) -> int:
        """AdamW's two moments, allocated at its first step, on the learner's device: this
        rank's shards of a sharded policy, none that live on the host (CPU offload)."""
        if self.optimizer.state:
            return 0
        local = [p.to_local() if isinstance(p, DTensor) else p for p in self.trainable]
        return 2 * sum(t.numel() * t.element_size() for t in local
                       if t.device.type == self.device.type)

    def _set_checkpointing(self, on: bool) -> None:
        if on:
            self.policy.gradient_checkpointing_enable()
        else:
            self.policy.gradient_checkpointing_disable()

    @torch.no_grad()
    def _old_logprobs(self, micro: list[list[PackedBatch]], temperature: float,
                      stats: _FirstPassStats) -> list[list[torch.Tensor]]:
        """The policy's logprobs of these mini-batches' micro-batches before any step of the
        update (a no-grad pass), their entropy and engine gap added to `stats`."""
        out = []
        with record_function("learner.old_logprobs"):
            for parts in micro:
                out.append([])
                for m in parts:
                    with self._autocast():
                        old_RL, entropy_RL = self.forward_fn(self.policy, m, temperature, True)
                    out[-1].append(old_RL.float())
                    stats.add(m, out[-1][-1], entropy_RL)
        return out

    def _micro_batches(self, mini_batch: MiniBatch) -> list[PackedBatch]:
        """A mini-batch's rows cut into its micro-batches (`plan_micro_batches`), on the device."""
        batch, budget = mini_batch.batch, self.settings.max_tokens_per_micro_batch
        row_tokens = [sum(lens) for lens in batch.seq_lens_per_row]
        parts = [p for p in plan_micro_batches(row_tokens, mini_batch.num_micro_batches, budget)
                 if p]
        # A token budget bounds memory only if each part drops the batch's padding columns.
        micro = [batch.select_rows(p).trimmed() if budget else batch.select_rows(p)
                 for p in parts]
        # Batches are built on the host; each micro-batch is copied to the device once.
        return [mb.to(self.device) for mb in micro]

    def save_sharded_state(self, directory: Path, extra: dict[str, Any]) -> None:
        """Policy, reference, optimizer and scheduler, with `extra` (small picklable values),
        written to `directory` by `rlvr.checkpoint.sharded`: on a sharded policy each rank writes
        its own shards (a collective; `directory` must be on a filesystem every rank reaches),
        in one process the whole state. Replaces an earlier copy only once complete."""
        save_sharded(directory, self.policy, self.optimizer, self.reference,
                     {"scheduler": self.scheduler.state_dict(), "extra": extra})

    def load_sharded_state(self, directory: Path) -> dict[str, Any]:
        """Restore what `save_sharded_state` wrote, on any number of ranks or in one process
        (DCP reshards); returns its `extra`."""
        saved = load_sharded(directory, self.policy, self.optimizer, self.reference)
        self.scheduler.load_state_dict(saved["scheduler"])
        return saved["extra"]
