"""The composition matrix: the features a user combines, each pair of their settings either run
together or refused at config time with a reason, over a covering array of every pair (not the
full product, which would be tens of thousands of runs).

What it is: `FACTORS` (feature -> setting -> the overrides of configs/tiny.yaml that choose it),
`pair_refusal` (what `load_config` says of a pair alone), `covering_rows` (a deterministic greedy
covering array: each allowed pair of settings of two features is in at least one row, and no
row holds a refused pair) and `markdown` (docs/composition.md, checked current by a test).
What it is not: the runs themselves (tests/composition/test_matrix.py).

`python -m tests.composition.matrix > docs/composition.md` rewrites the page.
"""

from __future__ import annotations

import itertools
import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")

# feature -> setting -> overrides of configs/tiny.yaml. The first setting is the default one.
FACTORS: dict[str, dict[str, tuple[str, ...]]] = {
    "launcher": {
        "local": (),
        "local-2-ranks": ("distributed.num_learners_per_node=[2]",
                          "distributed.collective_timeout_s=120"),
        "ray": ("distributed.launcher=ray",),
        "slurm": ("distributed.launcher=slurm",),
    },
    "engine": {
        "transformers": ("rollout.engine=transformers",),
        "vllm": ("rollout.engine=vllm", "rollout.vllm.kv_cache_gb=0.05",
                 "rollout.vllm.max_model_len=512"),
        "remote": ("rollout.engine=remote", "rollout.vllm.kv_cache_gb=0.05",
                   "rollout.vllm.max_model_len=512"),
    },
    "workflow": {
        "single_turn": (),
        "multi_turn": ("rollout.workflow=multi_turn", "rollout.max_turns=2"),
        "tool_use": ("rollout.workflow=tool_use", "rollout.max_turns=2",
                     "rollout.max_tool_calls=1"),
        "custom": ("rollout.workflow=examples.workflows.self_check:self_check",),
    },
    "loss": {
        "dapo": ("algorithm.loss_fn=dapo",),
        "grpo": ("algorithm.loss_fn=grpo",),
        "cispo": ("algorithm.loss_fn=cispo",),
        "gspo": ("algorithm.loss_fn=gspo", "algorithm.clip_lower=0.0003",
                 "algorithm.clip_higher=0.0004"),
    },
    "lora": {"off": (), "on": ("model.lora.rank=4",)},
    "async": {
        "sync": (),
        "async": ("rollout.async_steps=1",),
        "inflight": ("rollout.async_steps=1", "rollout.inflight_updates=true"),
    },
    "active_sampling": {"off": (), "on": ("algorithm.active_sampling=true",)},
    "packing": {"in_order": (), "first_fit_decreasing": ("algorithm.packing=first_fit_decreasing",)},
    "mini_batches": {"1": (), "2": ("algorithm.num_mini_batches=2",
                                    "algorithm.gradient_accumulation_steps=1")},
    "data": {"one_source": (),
             "mixture": ("data.train=[{name: addition}, {name: multiplication, weight: 0.5}]",)},
    "eval": {"greedy": (),
             "pass@2": ("eval.num_samples=2", "eval.pass_at_k=[1,2]", "eval.temperature=1.0")},
    "resume": {"none": (), "after_kill": ()},  # the test kills the run and reruns it
}

Setting = tuple[str, str]  # (feature, setting)
Pair = tuple[Setting, Setting]

# A setting that works only with one setting of another feature takes it along when paired with
# a third feature's setting: a Slurm job generates on inference servers (engine=remote), so
# "slurm with tool_use" is asked with the remote engine, not refused for the default engine.
IMPLIES: dict[Setting, Setting] = {("launcher", "slurm"): ("engine", "remote")}


def overrides_of(row: dict[str, str]) -> list[str]:
    return [o for feature, setting in row.items() for o in FACTORS[feature][setting]]


@lru_cache(maxsize=None)
def pair_refusal(a: Setting, b: Setting) -> str | None:
    """The ConfigError of configs/tiny.yaml with the two settings alone (every other feature at
    its default), or None when the pair loads: the config's checks and those that ask the
    engine's record (`rlvr.run.input_checks`), all run at start before any model loads."""
    from rlvr.config import ConfigError, load_config
    from rlvr.run.input_checks import check_registered_names

    row = dict([a, b])
    for setting in (a, b):
        implied = IMPLIES.get(setting)
        if implied is not None and implied[0] not in row:
            row[implied[0]] = implied[1]
    try:
        check_registered_names(load_config([TINY], overrides_of(row)))
    except ConfigError as e:
        return str(e)
    return None


def all_pairs() -> list[Pair]:
    features = list(FACTORS)
    return [((f, s), (g, t)) for f, g in itertools.combinations(features, 2)
            for s in FACTORS[f] for t in FACTORS[g]]


def refused_pairs() -> dict[Pair, str]:
    return {pair: why for pair in all_pairs() if (why := pair_refusal(*pair)) is not None}


def covering_rows() -> list[dict[str, str]]:
    """Rows (feature -> setting) such that every allowed pair is in one of them and no row
    holds a refused pair. Greedy and deterministic: each row starts from the first pair not yet
    covered, then takes, feature by feature, the setting that covers most uncovered pairs with
    the settings chosen so far (the first such setting on a tie)."""
    refused = set(refused_pairs())
    uncovered = [p for p in all_pairs() if p not in refused]
    left = set(uncovered)
    rows = []
    while left:
        (f, s), (g, t) = next(p for p in uncovered if p in left)
        row = {f: s, g: t}
        for feature in FACTORS:
            if feature in row:
                continue
            best, gain = None, -1
            for setting in FACTORS[feature]:
                pairs = [_pair((h, row[h]), (feature, setting)) for h in row]
                if any(p in refused for p in pairs):
                    continue
                n = sum(p in left for p in pairs)
                if n > gain:
                    best, gain = setting, n
            if best is None:
                raise ValueError(f"no setting of {feature} combines with {row}")
            row[feature] = best
        row = {feature: row[feature] for feature in FACTORS}
        left -= {_pair(a, b) for a, b in itertools.combinations(row.items(), 2)}
        rows.append(row)
    return rows


def _pair(a: Setting, b: Setting) -> Pair:
    order = list(FACTORS)
    return (a, b) if order.index(a[0]) < order.index(b[0]) else (b, a)


def row_id(row: dict[str, str]) -> str:
    return ",".join(f"{f}={s}" for f, s in row.items() if s != next(iter(FACTORS[f])))


def _reason(message: str) -> str:
    text = message.removeprefix("invalid config: ").replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 300 else text[:297] + "..."


def markdown() -> str:
    rows, refused = covering_rows(), refused_pairs()
    lines = [
        "# Which features compose",
        "",
        "<!-- Generated by `python -m tests.composition.matrix > docs/composition.md`; "
        "tests/composition/test_matrix.py checks it is current. -->",
        "",
        "The features a user combines, and for every pair of their settings: both run together, "
        "or the config is refused (exit 2) with the reason below. The runs are a covering array "
        "of every allowed pair, not the full product: each row trains configs/tiny.yaml with its "
        "settings for two steps with an eval, checks every metric is finite and that eval played "
        "the run's workflow, and, where `resume` is `after_kill`, kills the run after a step's "
        "state is saved and checks the rerun repeats the uninterrupted run "
        "(`make test-slow`: tests/composition/test_matrix.py).",
        "",
        "## Features",
        "",
        "| feature | settings (first: the default) |",
        "|---|---|",
    ]
    for feature, settings in FACTORS.items():
        lines.append(f"| {feature} | " + ", ".join(
            f"`{s}`" + (f" ({'; '.join(f'`{o}`' for o in o_)})" if o_ else "")
            for s, o_ in settings.items()) + " |")
    lines += ["", f"## Refused pairs ({len(refused)} of {len(all_pairs())})", "",
              "| settings | reason |", "|---|---|"]
    for ((f, s), (g, t)), why in refused.items():
        lines.append(f"| {f}=`{s}` with {g}=`{t}` | {_reason(why)} |")
    allowed = len(all_pairs()) - len(refused)
    lines += ["", f"## Runs ({len(rows)} rows cover the {allowed} allowed pairs)", "",
              "| # | " + " | ".join(FACTORS) + " |", "|---|" + "---|" * len(FACTORS)]
    for i, row in enumerate(rows, 1):
        lines.append(f"| {i} | " + " | ".join(row.values()) + " |")
    return "\n".join(lines) + "\n"


def rows_from_page(text: str) -> list[dict[str, str]]:
    """The rows docs/composition.md lists (read back, so that collecting the tests does not
    load the ~460 pair configs the matrix is computed from: the page is checked current)."""
    section = text.split("\n## Runs", 1)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells and cells[0].isdigit():
            rows.append(dict(zip(FACTORS, cells[1:])))
    return rows


def refused_from_page(text: str) -> list[Pair]:
    section = text.split("\n## Refused pairs", 1)[1].split("\n## ", 1)[0]
    pairs = []
    for line in section.splitlines():
        found = re.match(r"\| (\w+)=`([^`]+)` with (\w+)=`([^`]+)` \|", line)
        if found:
            f, s, g, t = found.groups()
            pairs.append(((f, s), (g, t)))
    return pairs


if __name__ == "__main__":
    print(markdown(), end="")
