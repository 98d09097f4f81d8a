"""What the report plots: which logged metrics go in which panel, the figures it derives from
them (generation throughput), and the per-step time breakdown. Pure functions of a run's
metrics frame; nothing here draws.

Metric names are the trainer's (`rlvr.run.loop`, `rlvr.producer.groups.episode_metrics`,
`rlvr.algorithm.losses`): a panel lists patterns (`fnmatch`), so eval metrics of any set
(`eval/scores`, `eval/<set>/scores`) land in the eval panel. A panel none of whose metrics a
run logged is left out. The distribution panels (`DISTRIBUTION_PANELS`) draw a step's
`distributions.jsonl` summaries as quantile bands; the health gates' signals have a panel of
their own (`health_signals`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

import pandas as pd

from rlvr.metrics import distributions


@dataclass(frozen=True)
class Panel:
    title: str
    ylabel: str
    patterns: tuple[str, ...]  # fnmatch patterns over metric names, in legend order


PANELS = (
    Panel("Training reward", "mean per sample",
          ("objective/verifiable_reward", "objective/scores", "batch/percent_solved_mean")),
    Panel("Eval scores", "score", ("eval/*pass@*", "eval/*maj@*", "eval/*mean_reward",
                                   "eval/scores", "eval/pass_at_1")),
    Panel("KL to the reference", "nats per token", ("objective/kl*_avg", "loss/kl_avg")),
    Panel("Policy entropy", "nats per token", ("policy/entropy_avg",)),
    Panel("Completion length", "tokens", ("val/sequence_lengths", "val/sequence_lengths_min",
                                          "val/sequence_lengths_max", "eval/*sequence_lengths")),
    Panel("Finished and formatted", "fraction of samples",
          ("val/stop_rate", "eval/*stop_rate", "val/format_rate")),
    Panel("Clipped ratios", "fraction of tokens",
          ("policy/clipfrac_avg", "policy/clipfrac_lower", "policy/clipfrac_upper")),
    Panel("Groups with reward spread", "fraction of prompts", ("real_batch_size_ratio",)),
    Panel("Throughput", "tokens per second",
          ("learner_tokens_per_second_step", "derived/generation_tokens_per_second")),
    Panel("Loss", "loss", ("loss/policy_avg", "loss/total_avg")),
    Panel("Gradient norm", "norm (before clipping)", ("optim/grad_norm",)),
)


@dataclass(frozen=True)
class DistributionPanel:
    name: str  # the distribution's name in distributions.jsonl (`rlvr.metrics.distributions`)
    title: str
    ylabel: str


DISTRIBUTION_PANELS = (
    DistributionPanel(distributions.REWARD, "Reward per sample", "reward"),
    DistributionPanel(distributions.RESPONSE_LENGTH, "Response length per sample", "tokens"),
    DistributionPanel(distributions.ADVANTAGE, "Advantage per trained sample", "advantage"),
    # 1 where the engine sampled the policy the learner scores; bf16 noise spreads it a little.
    DistributionPanel(distributions.LEARNER_ENGINE_RATIO,
                      "Learner / engine probability per token", "ratio"),
)


def panel_metrics(panel: Panel, metrics: pd.DataFrame) -> list[str]:
    """The metrics of `metrics` the panel shows, in the order of its patterns. One whose values
    repeat, at every step, those of a metric already chosen is left out: with a single eval
    set the pooled figures (`eval/scores`) are that set's (`eval/<set>/mean_reward`)."""
    chosen: list[str] = []
    for pattern in panel.patterns:
        for column in sorted(c for c in metrics.columns if fnmatchcase(c, pattern)):
            if column in chosen or column.startswith("time/"):
                continue
            values = metrics[column]
            if values.notna().any() and not any(values.equals(metrics[c]) for c in chosen):
                chosen.append(column)
    return chosen


def with_derived(metrics: pd.DataFrame) -> pd.DataFrame:
    """`metrics` plus figures the trainer does not log: generated tokens per second of
    generation time (samples this step x their mean length / `time/generation`)."""
    out = metrics.copy()
    needed = {"episode", "val/sequence_lengths", "time/generation"}
    if needed <= set(out.columns):
        samples = out["episode"].diff()
        seconds = out["time/generation"].where(out["time/generation"] > 0)
        out["derived/generation_tokens_per_second"] = (
            samples * out["val/sequence_lengths"] / seconds)
    return out


# The parts of a step's wall time, in stacking order: (label, metric). Scoring runs inside
# generation (episodes are scored as they finish), so generation's bar is what is left of it.
TIME_PARTS = (
    ("generation", "time/generation"),
    ("scoring", "time/scoring"),
    ("waiting for data", "time/trainer_waiting_for_data"),
    ("training", "time/training"),
    ("weight sync", "time/weight_sync"),
    ("traces", "time/traces"),
    ("eval", "time/eval"),
)


def time_breakdown(metrics: pd.DataFrame) -> pd.DataFrame:
    """Seconds per part (columns, `TIME_PARTS` labels) for each step (index). In an
    asynchronous run (`time/trainer_waiting_for_data` logged) generation and scoring overlap
    the training of an earlier batch: the trainer's own time is waiting, training and sync,
    so generation and scoring are left out of the stack. Parts never logged are dropped."""
    steps = metrics["training_step"]
    parts: dict[str, pd.Series] = {}
    for label, name in TIME_PARTS:
        if name in metrics.columns:
            parts[label] = metrics[name].fillna(0.0)
    if "generation" in parts and "scoring" in parts:
        parts["generation"] = (parts["generation"] - parts["scoring"]).clip(lower=0.0)
    if "time/trainer_waiting_for_data" in metrics.columns:
        overlapped = metrics["time/trainer_waiting_for_data"].notna()
        for label in ("generation", "scoring"):
            if label in parts:
                parts[label] = parts[label].mask(overlapped, 0.0)
    frame = pd.DataFrame(parts)
    frame.index = steps.values
    return frame.loc[:, (frame > 0).any(axis=0)]


def eval_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Eval metrics (columns) at the steps that ran an eval (index)."""
    columns = [c for c in metrics.columns if c.startswith("eval/")]
    if not columns:
        return pd.DataFrame()
    rows = metrics.dropna(subset=columns, how="all")
    return rows.set_index("training_step")[columns]
