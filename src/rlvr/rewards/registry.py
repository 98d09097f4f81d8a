"""The verifier registry: a name a data row carries -> a function (completion, truth) -> score.

A verifier returns a score (normally in [0, 1]) and raises on anything it cannot judge, such as
a ground truth that holds no answer; the scorer turns that into a recorded, counted error.
Verifiers register with `@register_verifier("name")`, optionally with a cheap ground-truth check
that data loading runs on every row. A name of the form `package.module:function` is also
accepted and imported on first use, so a verifier can be named without being registered anywhere.

This module holds no scoring policy (time limits, processes, aggregation): that is the scorer's.
It imports nothing heavy, so a fresh worker process can load it cheaply.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from rlvr.registry import Registry

Verifier = Callable[[str, str], float]
GroundTruthCheck = Callable[[str], object]  # ground truth -> its parse; ValueError if unusable


@dataclass(frozen=True)
class RegisteredVerifier:
    """A `VERIFIERS` entry: the scoring function and, if it has one, the check run when data is
    loaded, so a row the verifier could never score fails up front with its file, row and field."""

    score: Verifier
    ground_truth_check: GroundTruthCheck | None = None


VERIFIERS: Registry[RegisteredVerifier] = Registry("verifier")


def register_verifier(name: str, ground_truth_check: GroundTruthCheck | None = None
                      ) -> Callable[[Verifier], Verifier]:
    """Decorator: make `fn` available under `name`. Two different functions may not share a name."""
    if not name or ":" in name:
        raise ValueError(f"verifier name {name!r} must be non-empty and contain no ':' "
                         "(':' marks a 'package.module:function' name)")

    def register(fn: Verifier) -> Verifier:
        VERIFIERS.add(name, RegisteredVerifier(fn, ground_truth_check), defined_by=fn)
        return fn

    return register


def get_verifier(name: str) -> Verifier:
    """The verifier called `name`; KeyError listing the known names if there is none."""
    if name in VERIFIERS:
        return VERIFIERS[name].score
    if ":" in name:
        return _import_verifier(name)
    raise KeyError(f"unknown verifier '{name}'; known: {', '.join(sorted(VERIFIERS))} "
                   "(or name one as 'package.module:function')")


def ground_truth_check(name: str) -> GroundTruthCheck | None:
    """The ground-truth check of verifier `name`; None if it has none, if the name is unknown, or
    if it is a 'module:function' name not imported yet (data loading does not import it)."""
    entry = VERIFIERS.get(name)
    return None if entry is None else entry.ground_truth_check


def is_known_verifier(name: str) -> bool:
    """True for a registered name; a 'module:function' name is trusted until it is used."""
    return name in VERIFIERS or ":" in name


def _import_verifier(name: str) -> Verifier:
    module_name, _, attr = name.partition(":")
    fn = getattr(importlib.import_module(module_name), attr, None)
    if not callable(fn):
        raise KeyError(f"verifier '{name}': module {module_name} has no function {attr!r}")
    VERIFIERS.add(name, RegisteredVerifier(fn), defined_by=fn)  # later calls skip the import
    return fn

