"""Name -> implementation maps with a registering decorator: the extension point for variants
(losses, advantage normalisations, verifiers, IFEval constraints, engines), chosen by a string.

Every table of named things is a `Registry`, so they all behave alike: a name is taken once (a
second, different object under it is refused, naming where both were defined), a lookup of an
unknown name lists the known ones, and the table is read like a dict but filled only through
`register`/`add`. What a variant needs besides its function (a loss's normalisation unit, a
verifier's ground-truth check) is part of its entry: the registering module stores a small record.

Plain Python that imports nothing beyond the standard library, so verifier worker processes can
use it without loading torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def origin(obj: Any) -> str:
    """Where a registered object was defined: "module.qualname"."""
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


class Registry(Mapping[str, T]):
    """Names -> entries of one kind (functions, factories or records), read like a read-only dict.

    A name is taken once. Re-importing a module (importlib.reload, a worker importing a plugin
    twice) re-runs its decorators with new objects of the same origin: that replaces the entry
    and is not a clash. Any other second entry under a taken name is a ValueError, so two
    plugins cannot silently swap each other's variant.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind  # what the names name, for error messages ("loss_fn", "verifier")
        self._entries: dict[str, T] = {}
        self._origins: dict[str, str] = {}  # name -> where its entry was defined

    def add(self, name: str, entry: T, defined_by: Any = None) -> None:
        """Store `entry` under `name`. Whether a taken name clashes is decided by the origin of
        `defined_by` (default: `entry` itself); a record that wraps a function passes that."""
        where = origin(entry if defined_by is None else defined_by)
        known = self._origins.get(name)
        if known is not None and known != where:
            raise ValueError(f"{self.kind} '{name}' is already registered by {known}; "
                             f"{where} cannot take the name")
        self._entries[name] = entry
        self._origins[name] = where

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `add(name, obj)`, returning `obj` unchanged."""
        def wrap(obj: T) -> T:
            self.add(name, obj)
            return obj

        return wrap

    def lookup(self, name: str) -> T:
        """The entry called `name`; ValueError listing the known names if there is none."""
        if name not in self._entries:
            raise ValueError(f"{self.kind} '{name}' is not one of {sorted(self._entries)}")
        return self._entries[name]

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._entries)})"
