"""Data problems that name where they are: source, row and field."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The suffixes read as JSON lines (`rlvr.data.readers.read_rows`).
JSONL_SUFFIXES = (".jsonl", ".json")


def is_jsonl_name(source: str) -> bool:
    """Whether the source `source` names is read as JSON lines: a file, not an `hf:` set."""
    return not source.startswith("hf:") and Path(source).suffix in JSONL_SUFFIXES


def row_place(source: str, row: int) -> str:
    """Where row `row` (0-based, as readers count and example ids hold it) of `source` is, as
    a person looks for it: a JSONL file's line as an editor numbers it (from 1, blank lines
    counted: readers count them), else the row's number counted from 1, said to be so."""
    if is_jsonl_name(source):
        return f"line {row + 1}"
    return f"row {row + 1} (counted from 1)"


class DataError(ValueError):
    """`row` is the 0-based index readers give a row; the message names it by `row_place`."""

    def __init__(self, source: str, row: int | None, field: str | None, problem: str):
        self.source, self.row, self.field, self.problem = source, row, field, problem
        where = source
        if row is not None:
            where += f" {row_place(source, row)}"
        if field is not None:
            where += f" field '{field}'"
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class Example:
    """One prompt before tokenisation: chat messages, the answer, the verifiers to apply, and
    the row's other fields for verifiers that read them (JSON text, so the record stays
    immutable; `metadata` gives the dict)."""

    id: str  # "<source>/<row>"
    messages: tuple[dict[str, str], ...]
    ground_truth: str
    verifiers: tuple[str, ...]
    source: str
    metadata_json: str = ""  # "" when the source keeps none

    @property
    def metadata(self) -> dict[str, Any]:
        """The row's other fields, a fresh dict each call."""
        return json.loads(self.metadata_json) if self.metadata_json else {}
