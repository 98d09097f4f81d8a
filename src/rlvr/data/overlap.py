"""Train/eval overlap: which eval prompts the run also trains on.

An eval set whose prompts are training prompts measures recall, not skill, and nothing in its
curve says so. Each eval example is compared with every training example by a hash of its
prompt messages (role and content, each content's whitespace runs collapsed to one space and
its ends stripped; case and punctuation kept). This is not a near-duplicate finder: a reworded
or re-templated prompt is not found, and the system prompt `data.system_prompt` adds, the same
for both, plays no part.

- An eval source that is a training source read again (the same built-in or `datasets` name
  and split, or the same file) is refused, as is an eval set every prompt of which is a
  training prompt: a `DataError` (exit 2) naming the eval set, the training source and the
  count.
- Some overlap is warned about once and counted per eval set (`LoadedData.eval_overlap`).
- The procedural built-ins (`SHARED_BY_DESIGN`) share problems between splits by design (100
  additions in all): their eval sets are warned about and counted, never refused.
- The `data.eval_holdout` set is held out of its training source by position, so it is not
  compared here (a source that repeats a prompt can still have it on both sides).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from pathlib import Path

from rlvr.config import DataSourceConfig
from rlvr.data.builtin import BUILTIN_SOURCES
from rlvr.data.errors import DataError, Example
from rlvr.data.tasks import PROCEDURAL_TASKS

log = logging.getLogger(__name__)

# Built-ins made from a small problem space or templates, whose splits differ by seed only.
SHARED_BY_DESIGN = frozenset({*PROCEDURAL_TASKS, "code_simple", "ifeval_generated"})

Sources = list[tuple[DataSourceConfig, list[Example]]]


def prompt_key(messages: tuple[dict[str, str], ...]) -> str:
    """A hash of the prompt messages, whitespace-normalised (see the module docstring)."""
    text = "\x1e".join(f"{m['role']}\x1f{' '.join(m['content'].split())}" for m in messages)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _identity(src: DataSourceConfig) -> tuple[str, str | None]:
    """What makes two sources the same rows: a built-in, hub or `datasets` name (an `hf:` one
    with its subset and revision) and its split; a file's resolved path (the split means
    nothing to a JSONL or Parquet file)."""
    if src.name.startswith("hf:"):
        return f"{src.name} subset={src.subset} revision={src.revision}", src.split
    if src.name in BUILTIN_SOURCES:
        return src.name, src.split
    path = Path(src.name).resolve()
    return str(path), src.split if path.is_dir() else None


def _describe(src: DataSourceConfig) -> str:
    split = _identity(src)[1]
    return f"'{src.name}'" + (f" (split {split})" if split is not None else "")


def check_eval_overlap(train: Sources, evals: Sources) -> dict[str, int]:
    """{eval set name: how many of its prompts are training prompts}, for every `data.eval`
    set; refuses or warns as the module docstring says."""
    owners: dict[str, list[int]] = {}  # prompt key -> the training sources holding it
    for i, (_, examples) in enumerate(train):
        for key in {prompt_key(e.messages) for e in examples}:
            owners.setdefault(key, []).append(i)
    counts, warnings = {}, []
    for src, examples in evals:
        per_train: Counter[int] = Counter()
        inside = 0
        for e in examples:
            held_by = owners.get(prompt_key(e.messages), ())
            inside += bool(held_by)
            per_train.update(held_by)
        counts[src.display_name] = inside
        if not inside:
            continue
        where = ", ".join(f"{n} in {_describe(train[i][0])}" for i, n in per_train.most_common())
        same = [t for t, _ in train if _identity(t) == _identity(src)]
        refuse = src.name not in SHARED_BY_DESIGN and (same or inside == len(examples))
        if refuse:
            why = (f"reads the training source {_describe(same[0])} again" if same
                   else "is wholly inside the training set")
            raise DataError(src.name, None, None, (
                f"eval set '{src.display_name}' {why}: {inside} of its {len(examples)} prompts "
                f"are training prompts ({where}), so it would measure recall, not skill. "
                "Evaluate on prompts held out of training (a built-in's `split: test`), or "
                "leave data.eval empty to hold out data.eval_holdout prompts"))
        by_design = " (a procedural task: shared by design)" if src.name in SHARED_BY_DESIGN else ""
        warnings.append(f"'{src.display_name}' {inside} of {len(examples)} ({where}){by_design}")
    if warnings:
        log.warning("eval prompts that are also training prompts (compared by their messages, "
                    "whitespace collapsed; their scores partly measure recall, counted in "
                    "data/eval_overlap): %s", "; ".join(warnings))
    return counts
