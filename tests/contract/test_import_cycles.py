"""No module of ours imports itself back, through any chain, `if TYPE_CHECKING:` imports included.

import-linter's layers contracts catch an import that goes up a layer; a cycle between two modules
of one layer (or one folder) is invisible to them. A cycle makes the import order matter and the
layering a fiction, so each package's graph is searched for one (grimp: import-linter's own graph)."""

from __future__ import annotations

import grimp
import pytest

PACKAGES = ("ddpctl", "ddpctl_trainer", "testcluster", "tools")


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(d for d in graph.find_modules_directly_imported_by(m) if d in graph.modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
                found.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    return found


def test_the_search_finds_a_cycle_through_a_type_checking_import() -> None:
    graph = grimp.ImportGraph()
    for m in ("p", "p.model", "p.rules", "p.leaf"):
        graph.add_module(m)
    graph.add_import(importer="p.model", imported="p.rules")
    graph.add_import(importer="p.rules", imported="p.model")  # the checker's import back
    graph.add_import(importer="p.rules", imported="p.leaf")
    assert cycles(graph) == [["p.model", "p.rules"]]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package: str) -> None:
    graph = grimp.build_graph(package, exclude_type_checking_imports=False, cache_dir=None)
    assert cycles(graph) == []
