"""Every metric a run writes is documented: the tiny config trains for its 3 steps in this
process, and each key of its metrics.jsonl must be in the table of docs/metrics.md ("The
metrics"), where a row names a prefix and the names under it (`optim/` and `grad_norm` make
`optim/grad_norm`). `<set>` stands for an eval set's name, `@k` / `@n` for a number."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rlvr.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "metrics.md"


def documented_patterns(page: str) -> list[re.Pattern]:
    """One pattern per metric named in the page's "## The metrics" table."""
    section = page.split("\n## The metrics\n", 1)[1].split("\n## ", 1)[0]
    patterns = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not line.startswith("| ") or set(cells[1]) <= {"-"}:
            continue
        prefixes = [""] if cells[0] == "(none)" else re.findall(r"`([^`]+/)`", cells[0])
        # Metric names only: config fields (`algorithm.rho_correction`) and prose are not.
        names = [n for n in re.findall(r"`([^`]+)`", cells[1]) if re.fullmatch(r"[\w<>@/]+", n)]
        for prefix in prefixes:
            for name in names:
                pattern = re.escape(prefix + name).replace(re.escape("<set>"), r"[^/]+")
                pattern = re.sub(r"@[kn]$", r"@\\d+", pattern)
                patterns.append(re.compile(pattern))
    return patterns


def undocumented(keys: set[str], page: str) -> list[str]:
    patterns = documented_patterns(page)
    return sorted(k for k in keys if not any(p.fullmatch(k) for p in patterns))


@pytest.fixture(scope="module")
def tiny_run_keys(tmp_path_factory) -> set[str]:
    out = tmp_path_factory.mktemp("tiny")
    assert main(["train", str(ROOT / "configs" / "tiny.yaml"), f"experiment.output_dir={out}",
                 "logging.progress_bar=false"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["training_step"] for r in rows] == [0, 1, 2, 3]
    return {key for row in rows for key in row}


def test_every_metric_of_a_run_is_documented(tiny_run_keys):
    missing = undocumented(tiny_run_keys, PAGE.read_text(encoding="utf-8"))
    assert missing == [], f"metrics written by a run but not in docs/metrics.md: {missing}"


def test_a_metric_left_out_of_the_page_is_found(tiny_run_keys):
    # The check itself works: take one name out of the table and it is reported.
    page = PAGE.read_text(encoding="utf-8")
    assert "`packed_ratio`" in page and "packed_ratio" in tiny_run_keys
    assert undocumented(tiny_run_keys, page.replace("`packed_ratio`", "")) == ["packed_ratio"]
    assert "eval/addition/pass@1" in tiny_run_keys  # a per-set key, matched by `<set>/pass@k`
    assert undocumented({"eval/addition/pass@1", "eval/addition/nope"}, page) == \
        ["eval/addition/nope"]
