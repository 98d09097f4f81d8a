"""The table of shipped configs on docs/getting-started.md says what the configs do: every
config under configs/ (presets aside) has a row, and the row's step count ("20 steps") and
batch ("of 8 x 8": prompts x samples) are the config's own (`rlvr config` prints the step
count as `num_training_steps`)."""

from __future__ import annotations

import re
from pathlib import Path

from rlvr.config import load_config

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"


def table_rows() -> dict[str, str]:
    """config path -> what the row says it trains."""
    section = PAGE.read_text(encoding="utf-8").split("\n## The shipped configs\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| `(configs/[\w/.-]+\.yaml)` \| ([^|]+) \|", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def test_every_shipped_config_has_a_row():
    shipped = {str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.yaml")}
    assert sorted(shipped) == sorted(table_rows())


def test_each_rows_step_count_and_batch_are_the_configs():
    checked = 0
    for config, trains in table_rows().items():
        if config.startswith("configs/presets/"):
            continue  # a preset merged over another config: no step count of its own
        cfg = load_config(str(ROOT / config))
        steps = re.search(r"\b(\d[\d,]*) steps\b", trains)
        assert steps, f"{config}: the row does not say how many steps it trains: {trains!r}"
        assert int(steps.group(1).replace(",", "")) == cfg.num_training_steps, config
        batch = re.search(r"\bsteps of (\d+) x (\d+)\b", trains)
        if batch:
            assert (int(batch.group(1)), int(batch.group(2))) == (
                cfg.rollout.num_unique_prompts_rollout,
                cfg.rollout.num_samples_per_prompt_rollout), config
        checked += 1
    assert checked >= 8
