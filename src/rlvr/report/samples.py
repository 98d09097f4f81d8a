"""Which completions the report shows: at a few eval points (or training steps, for a run
without eval traces), the best and worst by reward and a few at random, so both what the
policy gets right and how it fails are on the page. Pure functions of a traces frame
(`rlvr.metrics.traces.TRACE_SCHEMA`); the random picks use a fixed seed, so a report made
twice shows the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class SampleChoice:
    best: int = 2
    worst: int = 2
    random: int = 2
    max_points: int = 6  # eval points (or steps) shown, spread over the run
    seed: int = 0


def spread_points(steps: list[int], max_points: int) -> list[int]:
    """At most `max_points` of the sorted distinct `steps`, evenly spread, first and last
    always among them."""
    steps = sorted(set(steps))
    if len(steps) <= max_points:
        return steps
    index = np.linspace(0, len(steps) - 1, max_points).round().astype(int)
    return [steps[i] for i in sorted(set(index.tolist()))]


def pick_samples(traces: pd.DataFrame, choice: SampleChoice = SampleChoice()) -> pd.DataFrame:
    """Rows of `traces` to show, with a `pick` column ("best", "worst", "random"): for each
    chosen step and eval set, the `best` highest rewards, the `worst` lowest of the rest, and
    `random` of what remains. Ties are broken at random (seeded), not by file order."""
    if traces is None or traces.empty:
        return pd.DataFrame()
    shown = traces[traces["step"].isin(spread_points(traces["step"].tolist(),
                                                     choice.max_points))]
    rng = np.random.default_rng(choice.seed)
    picked = []
    keys = ["step", "eval_set"] if shown["eval_set"].notna().any() else ["step"]
    for _, group in shown.groupby(keys, sort=True, dropna=False):
        picked.append(_pick_from(group, choice, rng))
    return pd.concat(picked, ignore_index=True)


def _pick_from(group: pd.DataFrame, choice: SampleChoice, rng: np.random.Generator
               ) -> pd.DataFrame:
    shuffled = group.sample(frac=1.0, random_state=rng)
    ranked = shuffled.sort_values("reward", ascending=False, kind="stable")
    best = ranked.head(choice.best)
    rest = ranked.drop(best.index)
    worst = rest.tail(choice.worst).iloc[::-1]
    rest = rest.drop(worst.index)
    random = rest.sample(n=min(choice.random, len(rest)), random_state=rng)
    return pd.concat([best.assign(pick="best"), worst.assign(pick="worst"),
                      random.assign(pick="random")])
