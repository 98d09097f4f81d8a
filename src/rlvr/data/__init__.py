"""Prompt data: sources (built-in, JSONL, Parquet, `datasets`) -> examples -> tokenised
prompts -> a weighted training mixture and a held-out evaluation set."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rlvr.config import DataConfig, DataSourceConfig
from rlvr.data.builtin import BUILTIN_SOURCES
from rlvr.data.errors import DataError, Example
from rlvr.data.mixer import PromptMixer, split_holdout
from rlvr.data.prompts import tokenize_examples
from rlvr.data.readers import load_file_source
from rlvr.types import Prompt

__all__ = ["BUILTIN_SOURCES", "DataBundle", "DataError", "Example", "PromptMixer",
           "build_datasets", "load_source", "tokenize_examples"]


@dataclass
class DataBundle:
    train: PromptMixer
    eval_prompts: list[Prompt]
    num_dropped_too_long: int
    num_bad_rows: int
    train_sizes: dict[str, int]


def load_source(src: DataSourceConfig, seed: int, on_bad_row: str = "error",
                split: str | None = None) -> tuple[list[Example], int]:
    """Examples of one source and the number of bad rows skipped."""
    if src.name in BUILTIN_SOURCES:
        examples = BUILTIN_SOURCES[src.name](split or src.split, seed)
        return examples[:src.max_rows] if src.max_rows else examples, 0
    return load_file_source(src, on_bad_row)


def _remap(examples: list[Example], remap: dict[str, str]) -> list[Example]:
    if not remap:
        return examples
    return [replace(e, verifiers=tuple(remap.get(v, v) for v in e.verifiers)) for e in examples]


def build_datasets(cfg: DataConfig, tokenizer, seed: int,
                   remap_verifier: dict[str, str] | None = None) -> DataBundle:
    """`remap_verifier` renames the verifiers rows name (e.g. a dataset labelled `math` scored
    by `strict_math`)."""
    remap = remap_verifier or {}
    dropped = bad = 0
    train: list[tuple[str, list[Prompt], float]] = []
    for src in cfg.train:
        examples, n_bad = load_source(src, seed, cfg.on_bad_row)
        prompts, n_drop = tokenize_examples(_remap(examples, remap), tokenizer,
                                            cfg.max_prompt_length, cfg.system_prompt)
        train.append((src.name, prompts, src.weight))
        dropped, bad = dropped + n_drop, bad + n_bad
    eval_prompts: list[Prompt] = []
    if cfg.eval:
        for src in cfg.eval:
            examples, n_bad = load_source(src, seed, cfg.on_bad_row)
            prompts, n_drop = tokenize_examples(_remap(examples, remap), tokenizer,
                                                cfg.max_prompt_length, cfg.system_prompt)
            eval_prompts += prompts
            dropped, bad = dropped + n_drop, bad + n_bad
    elif cfg.eval_holdout > 0:
        # Hold out from the first source: the task the run is about.
        name, prompts, weight = train[0]
        kept, eval_prompts = split_holdout(prompts, cfg.eval_holdout, seed)
        train[0] = (name, kept, weight)
    return DataBundle(train=PromptMixer(train, seed, cfg.shuffle), eval_prompts=eval_prompts,
                      num_dropped_too_long=dropped, num_bad_rows=bad,
                      train_sizes={name: len(p) for name, p, _ in train})
