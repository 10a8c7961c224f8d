"""Every module of cli/ddpctl/lint/ of 150 lines or more has a test file of its own name that imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import ddpctl.lint

HERE = Path(__file__).parent
PACKAGE = Path(ddpctl.lint.__file__).parent


def _imported(test: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(test.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "ddpctl.lint":
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ddpctl.lint."):
            names.add((node.module or "").rsplit(".", 1)[1])
        elif isinstance(node, ast.Import):
            names.update(a.name.rsplit(".", 1)[1] for a in node.names if a.name.startswith("ddpctl.lint."))
    return names


def test_each_big_module_has_a_test_file_of_its_name_that_imports_it() -> None:
    big = [p.stem for p in sorted(PACKAGE.glob("*.py")) if len(p.read_text().splitlines()) >= 150]
    assert big, PACKAGE
    missing = [
        stem
        for stem in big
        if not (HERE / f"test_{stem}.py").is_file() or stem not in _imported(HERE / f"test_{stem}.py")
    ]
    assert missing == []
