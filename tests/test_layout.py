"""The house's shape, checked: no import cycles among rlvr's modules, no source file over 500
lines, and vLLM named only where engine-specific code lives (issue 49; docs/STYLE principles 7
and 18).

The import graph holds module-level imports only (found with `ast`, so nothing is imported):
an import inside a function runs when it is called, after every module has loaded, and is how a
module reaches an optional or heavy dependency late. Imports under `if TYPE_CHECKING:` never
run and are left out too. `from a import b` is an edge to the module `a.b` when that is a module,
else to `a`; a package's `__init__` being run by importing one of its submodules is not an
edge (every package that registers its submodules would be a cycle).

What the checks still allow is listed below, each entry with its reason, so the debt stays in
sight: an entry that is no longer needed fails the test, so the lists only shrink.
"""

from __future__ import annotations

import ast
from pathlib import Path

from rlvr.rollout import NOT_ENGINE_SUBPACKAGES  # the rest of rollout/'s subpackages are engines

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "rlvr"
MAX_LINES = 500

# Files over MAX_LINES, by path under src/rlvr, with why they still are.
LONG_FILES_ALLOWED: dict[str, str] = {
}

# Where vLLM may be named: the engine subpackages (rollout/<engine>/), the serving layer (it runs
# vLLM servers) and the config (its engine sections).
VLLM_HOMES = ("serving/", "config/")
# Modules outside those homes that still name vLLM, with why.
VLLM_ALLOWED: dict[str, str] = {
    "moved.py": "the migration of module paths: names the vLLM engine's old modules to say "
                "where they went (rlvr.rollout.vllm_engine -> rlvr.rollout.vllm.engine)",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(tree: ast.Module):
    """Import nodes that run when the module is imported: the top level, and inside `if`,
    `try` and `with` blocks there (not in functions or classes, not under TYPE_CHECKING)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node):
                stack.extend(node.body)
            stack.extend(node.orelse)
        elif isinstance(node, (ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, block, []):
                    stack.extend(child.body if isinstance(child, ast.ExceptHandler) else [child])


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """rlvr module -> the rlvr modules it imports at module level."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in _module_level_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(module, path, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            graph[module].update(t for t in targets if t in modules and t != module)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles among rlvr's modules (module-level imports):\n" + \
        "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_no_source_file_over_500_lines():
    long = {_relative(p): len(p.read_text().splitlines()) for p in _modules().values()}
    long = {path: n for path, n in long.items() if n > MAX_LINES}
    unexpected = sorted(set(long) - set(LONG_FILES_ALLOWED))
    assert not unexpected, f"files over {MAX_LINES} lines: " + \
        ", ".join(f"{p} ({long[p]})" for p in unexpected)
    stale = sorted(set(LONG_FILES_ALLOWED) - set(long))
    assert not stale, f"no longer over {MAX_LINES} lines: drop them from LONG_FILES_ALLOWED: {stale}"


def _in_engine_subpackage(path: str) -> bool:
    parts = path.split("/")
    return len(parts) > 2 and parts[0] == "rollout" and parts[1] not in NOT_ENGINE_SUBPACKAGES


def test_vllm_is_named_only_in_engine_subpackages_serving_and_config():
    naming = {_relative(p) for p in _modules().values() if "vllm" in p.read_text().lower()}
    outside = {p for p in naming if not (p.startswith(VLLM_HOMES) or _in_engine_subpackage(p))}
    unexpected = sorted(outside - set(VLLM_ALLOWED))
    assert not unexpected, ("modules outside the engine subpackages, serving/ and config/ that "
                            f"name vLLM (say 'the engine', or move the fact to rollout/vllm/): "
                            f"{unexpected}")
    stale = sorted(set(VLLM_ALLOWED) - outside)
    assert not stale, f"no longer name vLLM: drop them from VLLM_ALLOWED: {stale}"
