"""Layering of ``core`` (DESIGN.md, "Layout"): the library never imports the app, the web stack or
the samples, and its imports form no cycle -- neither between modules nor between sub-packages.

Every ``import`` statement counts, wherever it sits in a file: at module level, inside a function
(a deferred import is still a dependency) or under ``if TYPE_CHECKING``.  A package's
``__init__`` is a module of its own (``core.schedule``); importing a submodule does not count as
importing its parent package.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core"
FORBIDDEN = ("app", "dash", "dash_cytoscape", "plotly", "sample_graphs")


def module_name(path: Path) -> str:
    """``core/schedule/base.py`` -> ``core.schedule.base``; ``core/ir/__init__.py`` -> ``core.ir``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def core_modules() -> dict[str, Path]:
    """Every module of ``core`` by dotted name."""
    return {module_name(p): p for p in sorted(CORE.rglob("*.py"))}


def imported_names(path: Path, name: str, known: set[str]) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in the file of module ``name``.

    Relative imports are resolved against the module's package; ``from P import x`` names the
    module ``P.x`` when that is a module of ``known``, else ``P`` itself."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield node.lineno, sub if sub in known else base


def owner(target: str, known: set[str]) -> str | None:
    """The module of ``known`` that an absolute import of ``target`` loads last (its longest known
    prefix), or None for a name outside ``core``."""
    parts = target.split(".")
    for k in range(len(parts), 0, -1):
        prefix = ".".join(parts[:k])
        if prefix in known:
            return prefix
    return None


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the core modules it imports (self-imports left out; computed once, not to be
    modified)."""
    modules = core_modules()
    known = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for _, target in imported_names(path, name, known):
            dep = owner(target, known)
            if dep is not None and dep != name:
                graph[name].add(dep)
    return graph


def layer(module: str) -> str:
    """The sub-package a module belongs to (``core.schedule.base`` -> ``core.schedule``), or the
    module itself for a top-level module (``core.simulate``)."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for src, deps in graph.items():
        out.setdefault(layer(src), set())
        for dep in deps:
            if layer(dep) != layer(src):
                out[layer(src)].add(layer(dep))
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a closed path ``[a, b, ..., a]`` (None if it is acyclic);
    deterministic: nodes and edges are visited in sorted order."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished
    for start in sorted(graph):
        if start in state:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_core_never_imports_the_app_the_web_stack_or_the_samples():
    modules = core_modules()
    known = set(modules)
    bad = [f"{path.relative_to(ROOT)}:{line} imports {target}"
           for name, path in modules.items()
           for line, target in imported_names(path, name, known)
           if target.split(".")[0] in FORBIDDEN]
    assert not bad, "core must not import " + ", ".join(FORBIDDEN) + ":\n" + "\n".join(bad)


def test_core_modules_import_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle between core modules: " + " -> ".join(cycle or [])


def test_core_packages_import_no_cycle():
    graph = package_graph(import_graph())
    assert {"core.ir", "core.analysis", "core.schedule", "core.codegen", "core.frontend"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between core packages: " + " -> ".join(cycle or [])


def test_the_cycle_finder_reports_a_closed_path():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"b"}}) == ["b", "c", "b"]
    assert package_graph({"core.x.a": {"core.y.b"}, "core.y.b": {"core.x.c"}, "core.x.c": set()}) == {
        "core.x": {"core.y"}, "core.y": {"core.x"}}
