"""Prompt data: sources (built-in, JSONL, Parquet, `datasets`) -> examples -> tokenised
prompts -> a weighted training mixture and named evaluation sets (one per `data.eval` source,
or a holdout of the first training source)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rlvr.config import DataConfig, DataSourceConfig
from rlvr.data.builtin import BUILTIN_SOURCES
from rlvr.data.errors import DataError, Example
from rlvr.data.mixer import PromptMixer, split_holdout
from rlvr.data.overlap import check_eval_overlap
from rlvr.data.prompts import tokenize_examples
from rlvr.data.readers import DEFAULT_MAX_ROW_BYTES, load_file_source
from rlvr.data.templates import load_chat_template
from rlvr.types import Prompt

__all__ = ["BUILTIN_SOURCES", "DataBundle", "DataError", "EvalSet", "Example", "LoadedData",
           "PromptMixer", "build_datasets", "load_datasets", "load_source", "tokenize_datasets",
           "tokenize_examples"]


@dataclass(frozen=True)
class EvalSet:
    """Prompts scored together and reported under one name (`eval/<name>/pass@1`): a
    `data.eval` source (named by `DataSourceConfig.display_name`), or the holdout of the first
    training source (named after it)."""

    name: str
    prompts: list[Prompt]


@dataclass
class DataBundle:
    train: PromptMixer
    eval_sets: list[EvalSet]
    num_dropped_too_long: int
    num_bad_rows: int
    train_sizes: dict[str, int]
    # {eval set: its prompts that are also training prompts}, every data.eval set (none for
    # the holdout); rlvr.data.overlap
    eval_overlap: dict[str, int] = field(default_factory=dict)

    @property
    def eval_prompts(self) -> list[Prompt]:
        """Every eval set's prompts, in order."""
        return [p for s in self.eval_sets for p in s.prompts]


def load_source(src: DataSourceConfig, seed: int, on_bad_row: str = "error",
                split: str | None = None, max_row_bytes: int = DEFAULT_MAX_ROW_BYTES
                ) -> tuple[list[Example], int]:
    """Examples of one source and the number of bad rows skipped."""
    if src.name in BUILTIN_SOURCES:
        examples = BUILTIN_SOURCES[src.name](split or src.split or "train", seed)
        return examples[:src.max_rows] if src.max_rows else examples, 0
    return load_file_source(src, on_bad_row, max_row_bytes)


def _remap(examples: list[Example], remap: dict[str, str]) -> list[Example]:
    if not remap:
        return examples
    return [replace(e, verifiers=tuple(remap.get(v, v) for v in e.verifiers)) for e in examples]


@dataclass
class LoadedData:
    """Validated examples of every source, before tokenisation (no model needed yet)."""

    train: list[tuple[DataSourceConfig, list[Example]]]
    eval: list[tuple[DataSourceConfig, list[Example]]]
    num_bad_rows: int
    eval_overlap: dict[str, int] = field(default_factory=dict)  # as DataBundle's


def load_datasets(cfg: DataConfig, seed: int,
                  remap_verifier: dict[str, str] | None = None) -> LoadedData:
    """Read and validate every row, so bad data fails before any model is loaded.
    `remap_verifier` renames the verifiers rows name (e.g. `math` scored by `strict_math`)."""
    remap, bad = remap_verifier or {}, 0
    train, evals = [], []
    for sources, out, split in ((cfg.train, train, "train"), (cfg.eval, evals, "test")):
        for src in sources:
            if src.split is None:  # unset: a training source reads train, an eval source test
                src = replace(src, split=split)
            examples, n_bad = load_source(src, seed, cfg.on_bad_row,
                                          max_row_bytes=cfg.max_row_bytes)
            out.append((src, _remap(examples, remap)))
            bad += n_bad
    for src, examples in train + evals:  # an empty source is a mistake, not a quiet no-op
        if not examples:
            skipped = (" (every row was bad and skipped: data.on_bad_row=skip)"
                       if cfg.on_bad_row == "skip" else "")
            raise DataError(src.name, None, None, f"holds no rows{skipped}")
    overlap = check_eval_overlap(train, evals)  # refuses an eval set inside the training set
    return LoadedData(train=train, eval=evals, num_bad_rows=bad, eval_overlap=overlap)


def tokenize_datasets(loaded: LoadedData, cfg: DataConfig, tokenizer, seed: int) -> DataBundle:
    """Every row through `data.chat_template` (a bad template or row fails here, before any
    model loads), too-long prompts dropped, the eval set held out if none is given."""
    template = load_chat_template(cfg.chat_template, tokenizer)
    dropped = 0
    train: list[tuple[str, list[Prompt], float]] = []
    eval_sets: list[EvalSet] = []
    for src, examples in loaded.train:
        prompts, n_drop = tokenize_examples(examples, template, cfg.max_prompt_length,
                                            cfg.system_prompt)
        if not prompts:  # else dropped from the mix in silence, its weight given to the rest
            raise DataError(src.name, None, None,
                            f"every prompt is longer than data.max_prompt_length="
                            f"{cfg.max_prompt_length} tokens ({n_drop} dropped); raise it, or "
                            "leave this source out")
        train.append((src.name, prompts, src.weight))
        dropped += n_drop
    for src, examples in loaded.eval:
        prompts, n_drop = tokenize_examples(examples, template, cfg.max_prompt_length,
                                            cfg.system_prompt)
        eval_sets.append(EvalSet(src.display_name, prompts))
        dropped += n_drop
    if not loaded.eval and cfg.eval_holdout > 0:
        # Hold out from the first source: the task the run is about.
        name, prompts, weight = train[0]
        if cfg.eval_holdout >= len(prompts):
            raise DataError(name, None, None, f"data.eval_holdout={cfg.eval_holdout} holds out "
                            f"all {len(prompts)} of its prompts (the first training source "
                            "gives the eval set when data.eval is empty), leaving none to train "
                            "on; lower data.eval_holdout or name data.eval sets")
        kept, held = split_holdout(prompts, cfg.eval_holdout, seed)
        train[0] = (name, kept, weight)
        eval_sets.append(EvalSet(loaded.train[0][0].display_name, held))
    return DataBundle(train=PromptMixer(train, seed, cfg.shuffle), eval_sets=eval_sets,
                      num_dropped_too_long=dropped, num_bad_rows=loaded.num_bad_rows,
                      train_sizes={name: len(p) for name, p, _ in train},
                      eval_overlap=dict(loaded.eval_overlap))


def build_datasets(cfg: DataConfig, tokenizer, seed: int,
                   remap_verifier: dict[str, str] | None = None) -> DataBundle:
    return tokenize_datasets(load_datasets(cfg, seed, remap_verifier), cfg, tokenizer, seed)
