"""Name -> implementation maps with a registering decorator: the extension point for variants
(losses, advantage normalisations, verifiers, engines), chosen by a config string.

Plain Python with no imports, so verifier worker processes can use it without loading torch.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")


def origin(obj: Any) -> str:
    """Where a registered object was defined: "module.qualname"."""
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def add_unique(table: dict[str, T], kind: str, name: str, obj: T) -> None:
    """`table[name] = obj`, refusing a second, different object under the same name.

    Re-importing a module (importlib.reload, a worker importing a plugin twice) re-runs its
    decorators with new objects of the same origin: that is not a clash.
    """
    known = table.get(name)
    if known is not None and origin(known) != origin(obj):
        raise ValueError(f"{kind} '{name}' is already registered by {origin(known)}; "
                         f"{origin(obj)} cannot take the name")
    table[name] = obj


class Registry(dict[str, T], Generic[T]):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind  # what the names name, for error messages ("loss_fn", "verifier")

    def register(self, name: str) -> Callable[[T], T]:
        def wrap(obj: T) -> T:
            self[name] = obj
            return obj

        return wrap

    def lookup(self, name: str) -> T:
        if name not in self:
            raise ValueError(f"{self.kind} '{name}' is not one of {sorted(self)}")
        return self[name]
