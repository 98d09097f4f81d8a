"""The range of every numeric config field, keyed by its dotted path: the one place that says
which numbers a field may hold. `rlvr.config.checks.validate` enforces it (every value finite
and inside its range, every offender named at once), a test walks the schema and fails for a
numeric field without an entry here (or an entry naming no field), and the generated config
reference prints each range as text (`str(Range)`: "> 0", "[0, 1)").

Paths are those of the config tree; a field of a list of sections is written with `[]`
(`data.train[].weight`, checked for every source). A value of null (where the schema allows
it) is not a number and is not checked here; a list of numbers is checked element by element.
Rules that tie several fields together (pack_length >= prompt + response, ...) stay in
`rlvr.config.checks`. This module imports nothing from rlvr.

Adding a numeric field to `rlvr.config.schema`: add its range here, in its section's block.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Iterator


@dataclass(frozen=True)
class Range:
    """An interval of admitted numbers, each end closed or open or absent, plus any lone
    values admitted besides (`also`: -1 in "-1 or >= 1"). Infinities and NaN are refused unless
    `finite` is false. `why` is appended to the message of a value out of range."""

    low: float | None = None  # None: no lower bound
    high: float | None = None  # None: no upper bound
    low_open: bool = False  # True: `low` itself is refused
    high_open: bool = False
    also: tuple[float, ...] = ()
    finite: bool = True
    why: str = ""

    def admits(self, value: float) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if value in self.also:
            return True
        if not fits_a_float(value):  # a 401-digit integer: no bound of ours is that wide
            return False
        if math.isnan(value) or (self.finite and math.isinf(value)):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high
                                          or (self.high_open and value == self.high))

    def __str__(self) -> str:
        if self.low is None and self.high is None:
            text = "finite" if self.finite else "any number"
        elif self.high is None:
            text = f"{'>' if self.low_open else '>='} {_num(self.low)}"
        elif self.low is None:
            text = f"{'<' if self.high_open else '<='} {_num(self.high)}"
        else:
            text = (f"{'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}"
                    f"{')' if self.high_open else ']'}")
        return " or ".join([*(_num(v) for v in self.also), text])


def fits_a_float(value: float) -> bool:
    """Whether `value` converts to a float (a Python int may have any number of digits;
    `math.isnan` and every float computation raise OverflowError past 1.8e308)."""
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _num(x: float | None) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


# The usual ranges, by what they read as.
POSITIVE = Range(low=0, low_open=True)  # > 0: sizes, timeouts, rates
NON_NEGATIVE = Range(low=0)  # >= 0: counts where 0 means "off" or "none"
AT_LEAST_ONE = Range(low=1)  # >= 1: counts that must hold something
FRACTION = Range(low=0, high=1)  # [0, 1]
UNIT_OPEN_HIGH = Range(low=0, high=1, high_open=True)  # [0, 1): clip ranges, Adam betas, dropout
UNIT_OPEN_LOW = Range(low=0, high=1, low_open=True)  # (0, 1]: top_p, shares of a device
ANY_FINITE = Range()  # any finite number (a reward value, which may be negative)
# Seconds a wait may last. A week bounds it: past threading.TIMEOUT_MAX (about 292 years here)
# waits raise OverflowError, and deadlines of now + 1e10 s overflow clocks ("timestamp too
# large"), both only when the wait starts, after the run directory is written.
WEEK_S = 7 * 24 * 3600
TIMEOUT = Range(low=0, low_open=True, high=WEEK_S, why="seconds, at most a week")
# vLLM raises a temperature in (0, 0.01) to 0.01 ("may cause numerical errors nan or inf"), so
# its samples would not be drawn at the temperature the learner divides by; and logits over a
# tiny temperature overflow float32 (1e-320: inf logits, NaN probabilities).
MIN_TEMPERATURE = 0.01


RANGES: dict[str, Range] = {
    # experiment
    "experiment.seed": Range(low=0, high=2**32 - 1, why="numpy seeds are below 2**32"),
    "experiment.total_episodes": AT_LEAST_ONE,
    # model
    "model.num_threads": NON_NEGATIVE,
    "model.max_memory_gb": POSITIVE,
    "model.lora.rank": NON_NEGATIVE,
    "model.lora.alpha": POSITIVE,
    "model.lora.dropout": UNIT_OPEN_HIGH,
    # data
    "data.train[].weight": POSITIVE,
    "data.train[].max_rows": AT_LEAST_ONE,
    "data.eval[].weight": POSITIVE,
    "data.eval[].max_rows": AT_LEAST_ONE,
    "data.eval_holdout": NON_NEGATIVE,
    "data.max_prompt_length": AT_LEAST_ONE,
    "data.max_row_bytes": AT_LEAST_ONE,
    # rewards
    "rewards.num_workers": NON_NEGATIVE,
    "rewards.timeout_s": TIMEOUT,
    "rewards.r1_style_format_reward": NON_NEGATIVE,
    "rewards.max_failed_steps": AT_LEAST_ONE,
    "rewards.judge.max_tokens": AT_LEAST_ONE,
    "rewards.judge.temperature": Range(low=MIN_TEMPERATURE, also=(0,), why="0 is greedy; "
                                       "vLLM raises lower ones to 0.01"),
    "rewards.judge.timeout_s": TIMEOUT,
    "rewards.judge.max_score": POSITIVE,
    "rewards.judge.max_concurrency": AT_LEAST_ONE,
    # rollout
    "rollout.num_unique_prompts_rollout": AT_LEAST_ONE,
    "rollout.num_samples_per_prompt_rollout": Range(
        low=2, why="group advantages need at least two samples per prompt"),
    "rollout.response_length": AT_LEAST_ONE,
    "rollout.temperature": Range(low=MIN_TEMPERATURE, why="training samples are drawn, not "
                                 "greedy; vLLM raises lower ones to 0.01"),
    "rollout.top_p": UNIT_OPEN_LOW,
    "rollout.max_batch_rows": AT_LEAST_ONE,
    "rollout.async_steps": NON_NEGATIVE,
    "rollout.vllm_kv_cache_gb": POSITIVE,
    "rollout.vllm_max_model_len": AT_LEAST_ONE,
    "rollout.vllm_block_size": Range(low=16),
    "rollout.vllm_num_engines": NON_NEGATIVE,
    "rollout.vllm_tensor_parallel_size": AT_LEAST_ONE,
    "rollout.vllm_gpu_memory_utilization": UNIT_OPEN_LOW,
    "rollout.weight_sync_bucket_mb": AT_LEAST_ONE,
    "rollout.max_turns": AT_LEAST_ONE,
    "rollout.turn_discount": UNIT_OPEN_LOW,
    "rollout.max_tool_calls": NON_NEGATIVE,
    "rollout.tool_timeout_s": TIMEOUT,
    "rollout.tool_output_chars": AT_LEAST_ONE,
    "rollout.max_episode_tokens": NON_NEGATIVE,
    "rollout.episode_timeout_s": TIMEOUT,
    "rollout.num_servers": AT_LEAST_ONE,
    "rollout.server_port": Range(low=0, high=65535),
    "rollout.server_max_retries": NON_NEGATIVE,
    "rollout.server_request_timeout_s": TIMEOUT,
    "rollout.server_startup_timeout_s": TIMEOUT,
    # algorithm
    "algorithm.beta": NON_NEGATIVE,
    "algorithm.kl_estimator": Range(low=0, high=3),
    "algorithm.ref_policy_update_freq": AT_LEAST_ONE,
    "algorithm.alpha": FRACTION,
    "algorithm.rho_clamp_lower": UNIT_OPEN_HIGH,
    "algorithm.rho_clamp_upper": Range(low=1, low_open=True, why="rho is 1 when the engine and "
                                       "the learner agree"),
    "algorithm.clip_lower": UNIT_OPEN_HIGH,  # the ratio's floor 1 - clip_lower stays above 0
    "algorithm.clip_higher": NON_NEGATIVE,
    "algorithm.active_sampling_max_rounds": AT_LEAST_ONE,
    "algorithm.no_resampling_pass_rate": UNIT_OPEN_LOW,
    "algorithm.loss_denominator": POSITIVE,
    "algorithm.non_stop_penalty_value": ANY_FINITE,
    "algorithm.overlong_buffer": NON_NEGATIVE,
    "algorithm.overlong_penalty_factor": NON_NEGATIVE,
    "algorithm.max_tokens_per_micro_batch": AT_LEAST_ONE,
    "algorithm.num_mini_batches": AT_LEAST_ONE,
    "algorithm.gradient_accumulation_steps": AT_LEAST_ONE,
    "algorithm.num_epochs": AT_LEAST_ONE,
    "algorithm.max_steps_without_update": NON_NEGATIVE,
    "algorithm.pack_length": AT_LEAST_ONE,
    # optimizer
    "optimizer.learning_rate": POSITIVE,
    "optimizer.warm_up_steps": NON_NEGATIVE,
    "optimizer.warmup_ratio": UNIT_OPEN_HIGH,
    "optimizer.lr_num_cycles": AT_LEAST_ONE,
    "optimizer.lr_end": NON_NEGATIVE,
    "optimizer.lr_power": POSITIVE,
    "optimizer.weight_decay": NON_NEGATIVE,
    # A negative clip norm reverses every gradient; 0 freezes the model.
    "optimizer.max_grad_norm": POSITIVE,
    "optimizer.max_consecutive_skipped_steps": AT_LEAST_ONE,
    "optimizer.adam_beta1": UNIT_OPEN_HIGH,
    "optimizer.adam_beta2": UNIT_OPEN_HIGH,
    "optimizer.adam_eps": POSITIVE,
    # distributed
    "distributed.num_learners_per_node": NON_NEGATIVE,  # each node's count
    "distributed.collective_timeout_s": TIMEOUT,
    "distributed.slurm.nodes": AT_LEAST_ONE,
    "distributed.slurm.gpus_per_node": NON_NEGATIVE,
    "distributed.slurm.cpus_per_task": NON_NEGATIVE,
    # checkpoint
    "checkpoint.save_freq": NON_NEGATIVE,
    "checkpoint.keep_last_n_checkpoints": Range(low=1, also=(-1,), why="-1 keeps all"),
    "checkpoint.checkpoint_state_freq": NON_NEGATIVE,
    "checkpoint.keep_last_n_states": AT_LEAST_ONE,
    # eval
    "eval.local_eval_every": NON_NEGATIVE,
    "eval.temperature": Range(low=MIN_TEMPERATURE, also=(0,), why="0 is greedy; vLLM "
                                                                 "raises lower ones to 0.01"),
    "eval.max_prompts": AT_LEAST_ONE,
    "eval.num_samples": AT_LEAST_ONE,
    "eval.pass_at_k": AT_LEAST_ONE,  # each k; k <= eval.num_samples is checked with it
    "eval.top_p": UNIT_OPEN_LOW,
    "eval.response_length": AT_LEAST_ONE,
    # logging
    "logging.peak_flops": POSITIVE,
    # health (bounds of signals; the warn bounds lie below the stop bounds, rlvr.config.checks)
    "health.mismatch_warn_logprob_diff": POSITIVE,
    "health.mismatch_stop_logprob_diff": POSITIVE,
    "health.mismatch_warn_kl": POSITIVE,
    "health.mismatch_stop_kl": POSITIVE,
    "health.stop_after_steps": AT_LEAST_ONE,
    "health.window_steps": Range(low=2, why="two halves of at least a step each"),
    "health.hacking_evals": Range(low=2, why="a trend needs two evals"),
    "health.reward_rise": POSITIVE,
    "health.flat_reward": POSITIVE,
    "health.length_growth": POSITIVE,
    "health.entropy_min": NON_NEGATIVE,
    "health.clipfrac_max": UNIT_OPEN_LOW,
    "health.verifier_error_rate_max": UNIT_OPEN_LOW,
}


def range_errors(cfg: Any) -> list[str]:
    """One message per number of `cfg` (a config dataclass tree) outside its declared range
    or not finite, naming the value's full path (`data.train[1].weight=-1 must be > 0`)."""
    errors = []
    for path, key, value in _numbers(cfg, "", ""):
        bounds = RANGES.get(key)
        if bounds is not None and not bounds.admits(value):
            text = str(bounds)
            must = f"in {text}" if text[0] in "[(" else text
            too_large = "" if fits_a_float(value) else " is too large for any number here:"
            errors.append(f"{path}={_shown(value)}{too_large} must be {must}"
                          + (f" ({bounds.why})" if bounds.why else ""))
    return errors


def _shown(value: float) -> str:
    """`value` as the message shows it: an integer of many digits by its first and its count."""
    if isinstance(value, int) and abs(value) >= 10**20:
        digits = str(abs(value))
        return f"{'-' if value < 0 else ''}{digits[:6]}...({len(digits)} digits)"
    return repr(value)


def _numbers(node: Any, path: str, key: str) -> Iterator[tuple[str, str, float]]:
    """(path with list indices, RANGES key, value) for every number under the section `node`."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        sub_path, sub_key = f"{path}{f.name}", f"{key}{f.name}"
        if dataclasses.is_dataclass(value):
            yield from _numbers(value, sub_path + ".", sub_key + ".")
        elif _is_number(value):
            yield sub_path, sub_key, value
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    yield from _numbers(item, f"{sub_path}[{i}].", f"{sub_key}[].")
                elif _is_number(item):
                    yield f"{sub_path}[{i}]", sub_key, item


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def numeric_fields(section: type, prefix: str = "") -> list[str]:
    """The RANGES key of every numeric field of the schema under the dataclass `section`
    (int or float, optional or in a list; bool is no number), walked by type, so sections that
    are null or empty lists by default count too."""
    out = []
    for name, hint in typing.get_type_hints(section).items():
        path = f"{prefix}{name}"
        inner, in_list = _unwrap(hint)
        if dataclasses.is_dataclass(inner):
            out += numeric_fields(inner, f"{path}[]." if in_list else f"{path}.")
        elif inner in (int, float):
            out.append(path)
    return out


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """The type inside Optional[...] and list[...], and whether a list was unwrapped."""
    in_list = False
    while True:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, types.UnionType):
            rest = [a for a in args if a is not type(None)]
            if len(rest) != 1:
                return hint, in_list
            hint = rest[0]
        elif origin in (list, tuple):
            in_list, hint = True, args[0] if args else Any
        else:
            return hint, in_list
