"""No module imports its own package back while that package imports it.

import-linter's `acyclic_siblings` contract (pyproject.toml) finds cycles between the modules and
subpackages of one package; an import of a package's own `__init__` from inside it (to reach what
the `__init__` assembles, as `engines/base.py` once did for the engine list) is not between
siblings, so it is checked here, on import-linter's own graph (grimp), TYPE_CHECKING imports
included."""

from __future__ import annotations

import grimp
import pytest

PACKAGES = ("ddpctl", "ddpctl_trainer", "testcluster", "tools")


def imports_back(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """(module, ancestor package) where the module imports the package and the package's
    `__init__` leads back to the module."""
    found = []
    for module in sorted(graph.modules):
        parts = module.split(".")
        for i in range(1, len(parts)):
            package = ".".join(parts[:i])
            if graph.direct_import_exists(importer=module, imported=package) and graph.chain_exists(
                importer=package, imported=module
            ):
                found.append((module, package))
    return found


def test_an_import_of_the_own_package_back_is_found() -> None:
    graph = grimp.ImportGraph()
    for m in ("p", "p.engines", "p.engines.base", "p.engines.job"):
        graph.add_module(m)
    graph.add_import(importer="p.engines", imported="p.engines.job")
    graph.add_import(importer="p.engines.job", imported="p.engines.base")
    graph.add_import(importer="p.engines.base", imported="p.engines")  # the list of engines, from below
    graph.add_import(importer="p.engines.job", imported="p")  # p does not import it: no cycle
    assert imports_back(graph) == [("p.engines.base", "p.engines")]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_its_package_back(package: str) -> None:
    graph = grimp.build_graph(package, exclude_type_checking_imports=False, cache_dir=None)
    assert imports_back(graph) == []
