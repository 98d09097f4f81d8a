"""The verifier registry. A verifier is a plain function (completion, ground_truth) -> score.

Verifiers register under the name a data row carries. A name of the form `package.module:func`
is imported on first use, so users (and tests) add verifiers without touching this package, and
worker processes can find them by name alone.
"""

from __future__ import annotations

import importlib
from typing import Callable

Verifier = Callable[[str, str], float]
VERIFIERS: dict[str, Verifier] = {}


def register_verifier(name: str) -> Callable[[Verifier], Verifier]:
    def wrap(fn: Verifier) -> Verifier:
        VERIFIERS[name] = fn
        return fn

    return wrap


def get_verifier(name: str) -> Verifier:
    if name in VERIFIERS:
        return VERIFIERS[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        fn = getattr(importlib.import_module(module), attr)
        VERIFIERS[name] = fn
        return fn
    raise KeyError(f"unknown verifier '{name}'; known: {sorted(VERIFIERS)} "
                   "(or give 'package.module:function')")


def is_known_verifier(name: str) -> bool:
    return name in VERIFIERS or ":" in name
