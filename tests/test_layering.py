"""Layering of the product (docs/design.md, "Layering"): ``core`` never imports the app, the web stack or
the samples; the samples never import the app; and the imports of ``app``, ``core`` and
``sample_graphs`` form no cycle -- neither between modules (within a package or across them) nor
between the sub-packages of ``core``.

Every ``import`` statement counts, wherever it sits in a file: at module level, inside a function
or under ``if TYPE_CHECKING``.  A function-local import defers loading a module, not depending on
it, so it may not close a cycle either: shared helpers get a module of their own (``app.tables``,
``app.errors``) and imports go one way.  A package's ``__init__`` is a module of its own
(``core.schedule``); importing a submodule does not count as importing its parent package.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "core", "sample_graphs")  # the product; tests/, bench/ and examples/ stand outside it
FORBIDDEN = {"core": ("app", "dash", "dash_cytoscape", "plotly", "sample_graphs"), "sample_graphs": ("app",)}


def module_name(path: Path, root: Path = ROOT) -> str:
    """``core/schedule/base.py`` -> ``core.schedule.base``; ``core/ir/__init__.py`` -> ``core.ir``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def product_modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Every module of ``packages`` (folders under ``root``) by dotted name."""
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def core_modules() -> dict[str, Path]:
    """Every module of ``core`` by dotted name."""
    return product_modules(packages=("core",))


def imported_names(path: Path, name: str, known: set[str]) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in the file of module ``name``.

    Relative imports are resolved against the module's package; ``from P import x`` names the
    module ``P.x`` when that is a module of ``known``, else ``P`` itself."""
    for line, target, _ in imports_of(path, name, known):
        yield line, target


def imports_of(path: Path, name: str, known: set[str]) -> Iterator[tuple[int, str, bool]]:
    """:func:`imported_names` with, for each, whether the import sits inside a function (a lazy
    import) rather than at module level."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    lazy: set[int] = set()  # ids of import nodes inside a function body
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            lazy.update(id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, id(node) in lazy
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield node.lineno, sub if sub in known else base, id(node) in lazy


def owner(target: str, known: set[str]) -> str | None:
    """The module of ``known`` that an absolute import of ``target`` loads last (its longest known
    prefix), or None for a name outside the modules looked at."""
    parts = target.split(".")
    for k in range(len(parts), 0, -1):
        prefix = ".".join(parts[:k])
        if prefix in known:
            return prefix
    return None


def build_graph(modules: dict[str, Path], lazy: bool = True) -> dict[str, set[str]]:
    """Module -> the modules of ``modules`` it imports (self-imports left out); ``lazy``: count the
    imports inside functions too."""
    known = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for _, target, inside in imports_of(path, name, known):
            dep = owner(target, known)
            if dep is not None and dep != name and (lazy or not inside):
                graph[name].add(dep)
    return graph


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the core modules it imports (computed once, not to be modified)."""
    return build_graph(core_modules())


@functools.cache
def product_graph() -> dict[str, set[str]]:
    """Module -> the product modules it imports (computed once, not to be modified)."""
    return build_graph(product_modules())


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


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_layers_never_import_the_ones_above(package):
    modules = product_modules(packages=(package,))
    known = set(modules)
    bad = [f"{path.relative_to(ROOT)}:{line} imports {target}"
           for name, path in modules.items()
           for line, target in imported_names(path, name, known)
           if target.split(".")[0] in FORBIDDEN[package]]
    assert not bad, f"{package} must not import " + ", ".join(FORBIDDEN[package]) + ":\n" + "\n".join(bad)


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_of_a_package_import_no_cycle(package):
    graph = build_graph(product_modules(packages=(package,)))
    assert len(graph) > 1
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle between {package} modules: " + " -> ".join(cycle or [])


def test_the_product_imports_no_cycle_across_packages():
    graph = product_graph()
    assert set(PACKAGES) <= {m.split(".")[0] for m in graph}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between product modules: " + " -> ".join(cycle or [])


def test_core_packages_import_no_cycle():
    graph = package_graph(import_graph())
    assert {"core.ir", "core.analysis", "core.schedule", "core.codegen", "core.frontend"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between core packages: " + " -> ".join(cycle or [])


def test_a_function_local_import_that_closes_a_cycle_is_found(tmp_path):
    """``b`` imports ``a`` inside a function, ``a`` imports ``b`` at module level: Python loads both,
    and the check still calls it a cycle (counting module-level imports only would not)."""
    pkg = tmp_path / "demo"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n\nX = 1\n")
    (pkg / "b.py").write_text("def f():\n    from .a import X\n\n    return X\n")
    modules = product_modules(tmp_path, ("demo",))
    assert find_cycle(build_graph(modules)) == ["demo.a", "demo.b", "demo.a"]
    assert find_cycle(build_graph(modules, lazy=False)) is None


def test_the_cycle_finder_reports_a_closed_path():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"b"}}) == ["b", "c", "b"]
    assert package_graph({"core.x.a": {"core.y.b"}, "core.y.b": {"core.x.c"}, "core.x.c": set()}) == {
        "core.x": {"core.y"}, "core.y": {"core.x"}}
