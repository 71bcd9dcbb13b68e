"""lagd's import graph, read statically from the source, has no cycle; and every top-level
module of lagd/ is an entry point or a package.

An edge A -> B means A imports B anywhere: at module level, inside a function, or under
`if TYPE_CHECKING:`. An import deferred into a function or hidden from the interpreter
still makes each module need the other: it hides a cycle, it does not break it (both
cycles issue 52 names were hidden so). Importing `lagd.x.y` also loads the package `lagd.x`
first, so that is an edge too, except to A's own packages (already loading when A runs).
`from lagd.x import y` is an edge to the module `lagd.x.y` where that is a module, to
`lagd.x` otherwise.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "lagd"


def module_names(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, wherever it sits."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the package loading it loads directly."""
    modules = module_names(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        targets: set[str] = set()
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            base = node.module or ""
            if node.level:
                package = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in modules else base)
        own = set(_ancestors(name)) | {name}
        for target in targets:
            for loaded in [*_ancestors(target), target]:
                if loaded in modules and loaded not in own:
                    graph[name].add(loaded)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path A -> ... -> A) through each strongly connected part of `graph`
    that has one (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    parts: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1 or node in graph[node]:
                    parts.append(sorted(part))
    return [_cycle_in(graph, set(part), part[0]) for part in parts]


def _cycle_in(graph: dict[str, set[str]], part: set[str], start: str) -> list[str]:
    """A shortest path start -> ... -> start inside one strongly connected part (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & part):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is on no cycle of its part")


def test_graph_sees_imports() -> None:
    """The graph is read: a module known to import others has those edges (a graph with no
    edges has no cycle either, and would pass the test below for nothing)."""
    graph = import_graph()
    assert "lagd.cli" in graph and "lagd.daemon" in graph["lagd.cli"] | {
        m for dep in graph["lagd.cli"] for m in graph.get(dep, ())
    }
    assert sum(len(edges) for edges in graph.values()) > 100


def test_cycle_is_found(tmp_path: Path) -> None:
    """The check finds a cycle where there is one: through a package's __init__, and through
    imports deferred into a function or made only for the type checker."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.c import C\n")
    (pkg / "sub" / "b.py").write_text("X = 1\n")
    (pkg / "sub" / "c.py").write_text("from . import b\ndef f():\n    from pkg.a import X\nC = 1\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.e import E\n")
    (pkg / "e.py").write_text("import pkg.d\nE = 1\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"}
    assert graph["pkg.sub.c"] == {"pkg.sub.b", "pkg.a"}  # its own package pkg.sub is loading already
    assert cycles(graph) == [["pkg.a", "pkg.sub", "pkg.sub.c", "pkg.a"], ["pkg.d", "pkg.e", "pkg.d"]]
    (pkg / "sub" / "c.py").write_text("from . import b\nC = 1\n")
    (pkg / "e.py").write_text("E = 1\n")
    assert cycles(import_graph(pkg)) == []


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, (
        "import cycles in lagd (break each by moving what both sides share into a module of its own):\n"
        + ("\n".join(" -> ".join(cycle) for cycle in found))
    )


# lagd's entry points: `python -m lagd`, the `lagd` command (pyproject's [project.scripts]), and
# the subcommands that are a module each: `lagd run` (daemon), `lagd demo`, `lagd replay`.
ENTRY_POINTS = {"lagd.__main__", "lagd.cli", "lagd.daemon", "lagd.demo", "lagd.replay"}


def test_every_top_level_module_is_an_entry_point_or_a_package() -> None:
    """Everything else lives in a package named for its job (runtime, core, evaluate, ...)."""
    top = {path.stem for path in ROOT.glob("*.py") if path.name != "__init__.py"}
    assert {f"lagd.{name}" for name in top} <= ENTRY_POINTS, (
        f"top-level modules of lagd/ that are no entry point: {sorted(top - {e[5:] for e in ENTRY_POINTS})}: "
        "move each into the package of its job (lagd/runtime/, lagd/core/, ...)"
    )
    graph = import_graph()
    assert "lagd.cli" in graph["lagd.__main__"]
    assert ENTRY_POINTS - {"lagd.__main__", "lagd.cli"} <= graph["lagd.cli"], (
        "a subcommand's module the CLI does not run"
    )
    pyproject = ROOT.parent.joinpath("pyproject.toml").read_text()
    assert 'lagd = "lagd.cli:main"' in pyproject
