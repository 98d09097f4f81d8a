"""Data problems that name where they are: source, row and field."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class DataError(ValueError):
    def __init__(self, source: str, row: int | None, field: str | None, problem: str):
        self.source, self.row, self.field, self.problem = source, row, field, problem
        where = source
        if row is not None:
            where += f" row {row}"
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
