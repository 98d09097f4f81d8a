"""The report's health panel: for each health gate whose signal is a step's figure (a logged
metric, or the verifier failure rate made from logged counts), that signal over the run and
the config bounds the gate compares it with (`rlvr.run.health`, docs/health.md). Pure functions of
a run's metrics frame and config; nothing here draws.

The bounds are the run's own (`health.*` in its config.yaml), else `HealthConfig`'s defaults:
one home for each number. The trend gates (`reward_vs_heldout`, `length_growth`,
`shaping_carries_reward`) compare windows of steps rather than one step's value against a
bound, so they have no line here; their inputs are in the curves.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from rlvr.run import health
from rlvr.config.schema import HealthConfig

# The verifier gate's signal is not logged as such: it is made here from the logged counts.
VERIFIER_ERROR_RATE = "derived/verifier_error_rate"


@dataclass(frozen=True)
class GateSignal:
    """One gate's signal and its bounds, as `HealthConfig` field names."""

    gate: str  # the gate's name in `rlvr.run.health.GATES`
    metric: str  # the metric plotted
    ylabel: str
    bounds: tuple[tuple[str, str], ...]  # (label, HealthConfig field), e.g. ("warn", ...)
    below: bool = False  # the gate fires below its bound (entropy), else above


GATE_SIGNALS = (
    GateSignal("mismatch", health.DIFF, "nats per token",
               (("warn", "mismatch_warn_logprob_diff"), ("stop", "mismatch_stop_logprob_diff"))),
    GateSignal("mismatch", health.KL, "nats per token",
               (("warn", "mismatch_warn_kl"), ("stop", "mismatch_stop_kl"))),
    GateSignal("entropy_collapse", health.ENTROPY, "nats per token",
               (("warn", "entropy_min"),), below=True),
    GateSignal("clip_fraction", health.CLIPFRAC, "fraction of tokens",
               (("warn", "clipfrac_max"),)),
    GateSignal("verifier_errors", VERIFIER_ERROR_RATE, "fraction of samples",
               (("warn", "verifier_error_rate_max"),)),
)


def health_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The run's `health.*` settings: its config.yaml's, a field it lacks (an older run, no
    config) at `HealthConfig`'s default."""
    saved = config.get("health") if isinstance(config, dict) else None
    saved = saved if isinstance(saved, dict) else {}
    out = dataclasses.asdict(HealthConfig())
    for key, value in saved.items():
        if key in out and isinstance(value, (int, float)):
            out[key] = value
    return out


def signal_bounds(signal: GateSignal, config: dict[str, Any]) -> list[tuple[str, float]]:
    """(label, value) of each of the signal's bounds in the run `config`, as
    `"warn: health.mismatch_warn_kl"`-style labels."""
    settings = health_settings(config)
    return [(f"{label}: health.{field}", float(settings[field])) for label, field in signal.bounds]


def with_health_signals(metrics: pd.DataFrame, config: dict[str, Any]) -> pd.DataFrame:
    """`metrics` plus the derived signals (the verifier failure rate per step, with the run's
    samples per prompt); unchanged where the run logged none of its inputs."""
    out = metrics.copy()
    if "batch/prompts_sampled" not in out.columns:
        return out
    try:
        per_prompt = int(config["rollout"]["num_samples_per_prompt_rollout"])
    except (KeyError, TypeError, ValueError):
        return out  # no config to count samples by: the signal cannot be made
    rates = []
    for row in out.to_dict("records"):
        logged = {k: v for k, v in row.items()
                  if isinstance(v, (int, float)) and not math.isnan(v)}
        rate = health.verifier_error_rate(logged, per_prompt)
        rates.append(math.nan if rate is None else rate)
    out[VERIFIER_ERROR_RATE] = rates
    return out
