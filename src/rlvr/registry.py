"""Name -> implementation maps with a registering decorator: the extension point for variants
(losses, advantage normalisations, verifiers, engines), chosen by a config string.

Plain Python with no imports, so verifier worker processes can use it without loading torch.
"""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

T = TypeVar("T")


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
