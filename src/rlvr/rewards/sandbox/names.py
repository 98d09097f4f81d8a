"""Which names a sandbox's tests take from the answer, and what each is bound to: pure
functions of code and source text, for `harness.TestRunner`.

A test reads names; those the answer defined (and neither the setup, the builtins nor an
earlier test did) come from the answer's process as proxies, except modules and what is
imported from them, which the runner imports itself (`real_import`): the answer's process could
have rewritten them. A setup's stub is the answer's to replace (`is_stub`).

Runs inside the sandbox (sent as compiled code, before `harness`): standard library only.
"""

from __future__ import annotations

MISSING = object()


def answer_imports(source: str) -> dict[str, tuple[str, str | None]]:
    """The names the answer's source binds by import, anywhere in it: name -> (module, None)
    for `import m` / `import m as name`, (module, attribute) for `from m import attribute as
    name`, and (module, "*") keyed by "*m" for `from m import *`. Read here, from the text (the
    answer's process is out of this process's trust): the tests get what these imports mean,
    imported here, not the answer's objects (`real_import`). {} for a source that does not
    parse (the load then fails anyway)."""
    import ast  # the runner's only use of it

    try:
        tree = ast.parse(source)
    except BaseException:  # noqa: BLE001  SyntaxError, or a tree too deep to parse
        return {}
    found: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found[alias.asname] = (alias.name, None)
                else:  # `import a.b` binds `a`
                    top = alias.name.split(".")[0]
                    found[top] = (top, None)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name == "*":
                    found["*" + node.module] = (node.module, "*")
                else:
                    found[alias.asname or alias.name] = (node.module, alias.name)
    return found


def real_import(name: str, imports: dict[str, tuple[str, str | None]]):
    """What `name` is when the tests read it and the answer defined it, if it is an import:
    the object imported here; `MISSING` when that import fails here; None when `name` is not
    an import (the answer's own helper: a proxy).

    A module is never taken from the answer, whose process can rewrite it (`math.isclose =
    lambda *a, **k: True` would pass every `assert math.isclose(...)` of a test list that uses
    `math` without importing it, as MBPP-style lists do). A name counts as a module when the
    answer's source imports it, or when it is a top-level module importable here, however the
    answer bound it (`globals()["math"] = ...`, or `def math()` with attributes set on it)."""
    import importlib
    import importlib.util

    def imported(module: str, attribute: str | None):
        try:
            value = importlib.import_module(module)
            return value if attribute is None else getattr(value, attribute)
        except Exception:  # noqa: BLE001  ImportError, AttributeError, a module failing to load
            return MISSING

    if name in imports:
        return imported(*imports[name])
    for module, _ in (v for k, v in imports.items() if k.startswith("*")):
        if (value := imported(module, name)) is not MISSING:
            return value
    try:
        is_module = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        is_module = False
    return imported(name, None) if is_module else None


def global_names(code) -> set[str]:
    """Every name `code` and the functions in it may read (attribute names too: a superset)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, type(code)):
            names |= global_names(const)
    return names


# The bytecode of a function that does nothing, with and without a docstring (which moves None
# to the second constant). Compiled from source: this module itself runs without docstrings.
_STUB_CODES = tuple(compile(source, "<stub>", "exec", optimize=0).co_consts[0].co_code
                    for source in ("def f():\n    pass\n", "def f():\n    'doc'\n"))


def is_stub(value) -> bool:
    """A function with no body but a docstring, `pass` or `...`: a stub the answer is to write
    (HumanEval's prompt ends with one), so the answer's version of the name is taken."""
    code = getattr(value, "__code__", None)
    return isinstance(code, type(is_stub.__code__)) and not code.co_names and \
        code.co_code in _STUB_CODES and \
        all(c is None or isinstance(c, str) for c in code.co_consts)
