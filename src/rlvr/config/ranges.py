"""The range and choice checks of every config field, read from the schema: a numeric field
declared with `ranged(default, Range(...))` and a field declared with `choice(default, {...})`
(`rlvr.config.fields`) carry their facts in their dataclass metadata, and `RANGES`/`CHOICES`
(dotted path -> Range / admitted values) are walked out of the schema once. `range_errors` and
`choice_errors` name every offender at once (`data.train[1].weight=-1 must be > 0`);
`rlvr.config.checks.validate` calls both; the generated reference prints the same facts. A test
walks the schema and fails for a numeric field declared without a range.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Iterator

from rlvr.config.fields import CHOICES_KEY, RANGE_KEY, Range, fits_a_float
from rlvr.config.schema import Config


def schema_leaves(section: type, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(RANGES/CHOICES path, dataclass field, its type inside Optional/list) of every field
    under the dataclass `section` that is not a section itself, walked by type, so sections
    that are null or empty lists by default count too."""
    hints = typing.get_type_hints(section)
    for f in dataclasses.fields(section):
        path = f"{prefix}{f.name}"
        inner, in_list = unwrap_hint(hints[f.name])
        if dataclasses.is_dataclass(inner):
            yield from schema_leaves(inner, f"{path}[]." if in_list else f"{path}.")
        else:
            yield path, f, inner


def declared(section: type, key: str) -> dict[str, Any]:
    """path -> the metadata `key` of every field under `section` that has it."""
    return {path: f.metadata[key] for path, f, _ in schema_leaves(section) if key in f.metadata}


def choice_errors(cfg: Any) -> list[str]:
    """One message per field of `cfg` holding a value outside its declared choices."""
    errors = []
    for path, key, value in _values(cfg, "", "", lambda v: not isinstance(v, (list, dict))):
        allowed = CHOICES.get(key)
        if allowed is not None and value not in allowed:
            errors.append(f"{path}={value!r} is not one of {sorted(allowed, key=str)}")
    return errors


def range_errors(cfg: Any) -> list[str]:
    """One message per number of `cfg` (a config dataclass tree) outside its declared range
    or not finite, naming the value's full path (`data.train[1].weight=-1 must be > 0`)."""
    errors = []
    for path, key, value in _values(cfg, "", "", _is_number):
        bounds = RANGES.get(key)
        if bounds is not None and not bounds.admits(value):
            text = str(bounds)
            must = f"in {text}" if text[0] in "[(" else text
            too_large = "" if fits_a_float(value) else " is too large for any number here:"
            errors.append(f"{path}={_shown(value)}{too_large} must be {must}"
                          + (f" ({bounds.why})" if bounds.why else ""))
    return errors


def _shown(value: float) -> str:
    """`value` as the message shows it: an integer of many digits by its first and its count."""
    if isinstance(value, int) and abs(value) >= 10**20:
        digits = str(abs(value))
        return f"{'-' if value < 0 else ''}{digits[:6]}...({len(digits)} digits)"
    return repr(value)


def _values(node: Any, path: str, key: str, wanted) -> Iterator[tuple[str, str, Any]]:
    """(path with list indices, RANGES/CHOICES key, value) for every value under the section
    `node` that `wanted` accepts; a list's items are yielded one by one."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        sub_path, sub_key = f"{path}{f.name}", f"{key}{f.name}"
        if dataclasses.is_dataclass(value):
            yield from _values(value, sub_path + ".", sub_key + ".", wanted)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    yield from _values(item, f"{sub_path}[{i}].", f"{sub_key}[].", wanted)
                elif wanted(item):
                    yield f"{sub_path}[{i}]", sub_key, item
        elif wanted(value):
            yield sub_path, sub_key, value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def numeric_fields(section: type) -> list[str]:
    """The RANGES key of every numeric field of the schema under the dataclass `section`
    (int or float, optional or in a list; bool is no number)."""
    return [path for path, _, inner in schema_leaves(section) if inner in (int, float)]


def unwrap_hint(hint: Any) -> tuple[Any, bool]:
    """The type inside Optional[...] and list[...], and whether a list was unwrapped."""
    in_list = False
    while True:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, types.UnionType):
            rest = [a for a in args if a is not type(None)]
            if len(rest) != 1:
                return hint, in_list
            hint = rest[0]
        elif origin in (list, tuple):
            in_list, hint = True, args[0] if args else Any
        else:
            return hint, in_list


# path -> the field's Range / admitted values, walked out of the schema once.
RANGES: dict[str, Range] = declared(Config, RANGE_KEY)
CHOICES: dict[str, tuple] = declared(Config, CHOICES_KEY)
