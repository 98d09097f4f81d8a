"""Name -> implementation maps with a registering decorator: the extension point for variants
(losses, advantage normalisations, verifiers, IFEval constraints, engines), chosen by a string.

Every table of named things is a `Registry`, so they all behave alike: a name is taken once (a
second, different object under it is refused, naming where both were defined), a lookup of an
unknown name lists the known ones, and the table is read like a dict but filled only through
`register`/`add`. What a variant needs besides its function (a loss's normalisation unit, a
verifier's ground-truth check) is part of its entry: the registering module stores a small record.

Plugins (docs/plugins.md): `lookup` also takes a name of the form `package.module:attr`. It
imports `package.module` (`rlvr.plugins.import_module`: the run's directory counts as on the
path), and the entry is the one registered for the object the module calls `attr`, so
`my_project.losses:clipped_sign` names the loss that module registered when it defined
`clipped_sign`, with everything its decorator recorded. A registry built with `adapt` also takes
an attribute nobody registered and makes it an entry with `adapt` (verifiers and workflows: a
plain function is enough). The entry is then stored under the full name, so later lookups of it
import nothing. Only `lookup` imports: `[]`, `in` and `get` read the table as it is, so names a
data row carries (IFEval constraint ids) never import code; the callers whose names are a
config's choice use `lookup`.

Plain Python that imports nothing beyond the standard library, so verifier worker processes can
use it without loading torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

MAIN = "__main__"  # the module name of a script, a notebook or `python -c`


def is_plugin_name(name: str) -> bool:
    """True for a `package.module:attr` name (both parts non-empty)."""
    module, colon, attr = name.partition(":")
    return bool(colon and module and attr)


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

    def __init__(self, kind: str, adapt: Callable[[Any], T] | None = None) -> None:
        self.kind = kind  # what the names name, for error messages ("loss_fn", "verifier")
        # For a `module:attr` name whose attribute nobody registered: attribute -> entry (it
        # raises TypeError or ValueError for an attribute that cannot be one). None: refused.
        self.adapt = adapt
        self._entries: dict[str, T] = {}
        self._origins: dict[str, str] = {}  # name -> where its entry was defined
        self._defined_by: dict[str, Any] = {}  # name -> the object its entry was registered for

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
        self._defined_by[name] = entry if defined_by is None else defined_by

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `add(name, obj)`, returning `obj` unchanged."""
        def wrap(obj: T) -> T:
            self.add(name, obj)
            return obj

        return wrap

    def lookup(self, name: str) -> T:
        """The entry called `name`, importing `package.module` for a `package.module:attr` name
        (see the module's docstring). ValueError, one line, if there is none: listing the known
        names, or saying why the module or its attribute gives none."""
        if name in self._entries:
            return self._entries[name]
        if not is_plugin_name(name):
            raise ValueError(f"{self.kind} '{name}' is not one of {self.names()} "
                             "(or 'package.module:name')")
        return self._import(name)

    def _import(self, name: str) -> T:
        from rlvr.plugins import import_module  # stdlib only, like this module

        module_name, _, attr = name.partition(":")
        try:
            module = import_module(module_name)
        except Exception as e:  # noqa: BLE001  importing runs the user's module: anything
            raise ValueError(f"{self.kind} '{name}': cannot import {module_name}: "
                             f"{type(e).__name__}: {_first_line(e)}") from e
        if not hasattr(module, attr):
            raise ValueError(f"{self.kind} '{name}': module {module_name} has no function named "
                             f"{attr!r}")
        obj = getattr(module, attr)
        registered = [n for n in self._entries if self._defined_by.get(n) is obj]
        if registered:
            entry = self._entries[registered[0]]
        elif self.adapt is None:
            raise ValueError(f"{self.kind} '{name}': {module_name}.{attr} is not registered as "
                             f"a {self.kind}; register it with the {self.kind} registry's "
                             "decorator in its module")
        else:
            try:
                entry = self.adapt(obj)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{self.kind} '{name}': {_first_line(e)}") from e
        self.add(name, entry, defined_by=obj)  # later lookups import nothing
        return entry

    def names(self) -> list[str]:
        """The registered names, sorted, without the `module:attr` names looked up so far."""
        return sorted(name for name in self._entries if not is_plugin_name(name))

    def defined_in_main(self) -> list[str]:
        """The names whose entries were defined in `__main__` (a script or notebook), which
        no other process can import (`rlvr.plugins.check_main_entries`)."""
        return sorted(name for name, where in self._origins.items()
                      if where.startswith(MAIN + ".") or name.startswith(MAIN + ":"))

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._entries)})"


def _first_line(e: BaseException) -> str:
    text = str(e)
    return text.splitlines()[0] if text else ""
