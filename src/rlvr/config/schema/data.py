"""Where prompts come from: `data`, its `train` and `eval` sources.
One section per dataclass; each field's comment, range and choices are its facts
(`rlvr.config.fields`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from omegaconf import MISSING

from rlvr.config.fields import (AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, choice, ranged)


@dataclass
class DataSourceConfig:
    # A built-in name (gsm8k, math, math500, addition, ...), a file path, or hf: and a hub id or
    # a local directory. A relative path in a YAML file is read beside that file; in a
    # command-line override, in the working directory (docs/data.md#paths).
    name: str = MISSING
    weight: float = ranged(1.0, POSITIVE)  # relative sampling weight in the mixture
    # For built-ins and `datasets`; null: train for a training source, test for an eval source
    split: Optional[str] = None
    # `hf:` sources only: the data set's configuration (a hub id's config name, e.g. `main` of
    # openai/gsm8k; for a local `hf:` directory, its subdirectory of that name); null: none.
    subset: Optional[str] = None
    # `hf:` hub ids only: the branch, tag or commit to read from the `datasets` cache; null:
    # the default branch.
    revision: Optional[str] = None
    messages_field: str = "messages"  # the row field holding the chat messages
    prompt_field: str = "prompt"  # used when a row has no messages
    ground_truth_field: str = "ground_truth"  # the row field the verifier compares with
    verifier_field: str = "dataset"  # open-instruct keeps the verifier name in `dataset`
    verifier: Optional[str] = None  # verifier for rows that do not name one
    max_rows: Optional[int] = ranged(None, AT_LEAST_ONE)  # read at most this many rows; null: all
    # Row fields kept as the prompt's metadata, for verifiers that declare `metadata`; null:
    # every field but the messages, prompt, ground truth and verifier ones (values JSON cannot
    # hold are left out). A listed field a row lacks, or JSON cannot hold, is a bad row.
    metadata_fields: Optional[list[str]] = None
    # What metrics call the source (eval/<label>/pass@1); null: its name, or a path's file
    # stem, or for a stem that names a split (eval.jsonl, test.parquet) its directory's name.
    label: Optional[str] = None

    @property
    def display_name(self) -> str:
        """`label`, else the name with any directory and extension dropped (`data/t.jsonl`: t,
        `hf:openai/gsm8k`: gsm8k; built-in names have neither). A stem in `SPLIT_STEMS` says
        nothing of the task and doubled the prefix of its metrics (`eval/eval/pass@1`): the
        directory names it then (`tasks/mytask/eval.jsonl`: mytask), else `<stem>_set`."""
        if self.label is not None:
            return self.label
        path = Path(self.name.removeprefix("hf:"))
        if path.stem.lower() not in SPLIT_STEMS:
            return path.stem
        # A file's own directory, even when named relative to it (eval.jsonl run from mytask/);
        # a hub id's owner (hf:org/test) is no directory here.
        parent = (path if self.name.startswith("hf:") else Path(os.path.abspath(path))).parent.name
        return parent if parent and parent.lower() not in SPLIT_STEMS else f"{path.stem}_set"


# File stems that name a split or say "data", not a task: no name for a source's metrics.
SPLIT_STEMS = frozenset({"eval", "test", "validation", "val", "dev", "train", "data"})


@dataclass
class DataConfig:
    # Training sources, mixed by weight
    train: list[DataSourceConfig] = field(
        default_factory=lambda: [DataSourceConfig(name="addition")]
    )
    eval: list[DataSourceConfig] = field(default_factory=list)  # empty: hold out from train
    # rows held out of the train mixture when `eval` is empty
    eval_holdout: int = ranged(32, NON_NEGATIVE)
    max_prompt_length: int = ranged(256, AT_LEAST_ONE)  # longer prompts are dropped and counted
    system_prompt: Optional[str] = None  # put first in prompts that have no system message
    # How prompts are written (rlvr.data.templates): `tokenizer` (its chat template), a built-in
    # (`r1_zero`: R1-Zero's plain-text prompt, stops at </answer>; `plain`: the user's text as
    # is, for base models), or a path to a Jinja template file.
    chat_template: str = "tokenizer"
    shuffle: bool = True  # each source reshuffled every epoch (seeded); false: file order
    on_bad_row: str = choice("error", {"error", "skip"})  # error | skip
    # The largest row a file source may hold (bytes of its JSONL line or Parquet/datasets
    # record): a longer row is a bad row, refused before it is parsed (a 20 MB row cost 60 s
    # and 4.5 GB before it was dropped as too long).
    max_row_bytes: int = ranged(4_000_000, AT_LEAST_ONE)
