"""Modules stay small enough to read, and each sizeable one has tests of its own name: no module of
cli/, trainer/, testcluster/ or tools/ over 600 lines, and every one of 150 lines or more has a
tests/**/test_<name>.py that imports it (or its package, which re-exports it), or drives the
command it implements through the in-process `cli` fixture."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import REPO

ROOTS = {"cli": "", "trainer": "", "testcluster": "testcluster.", "tools": "tools."}
MAX_LINES, NEEDS_TESTS = 600, 150


def _modules() -> dict[str, Path]:
    """Every module's dotted name and file (cli/ and trainer/ hold packages named as their folders)."""
    found: dict[str, Path] = {}
    for root in ROOTS:
        base = REPO / root
        for path in base.rglob("*.py"):
            if "__pycache__" in path.parts or path.name in ("__init__.py", "__main__.py"):
                continue
            parts = path.relative_to(REPO if root in ("testcluster", "tools") else base).with_suffix("").parts
            found[".".join(parts)] = path
    return found


def test_no_module_is_over_the_limit() -> None:
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these modules (over {MAX_LINES} lines): {long}"


def test_each_sizeable_module_has_a_test_file_of_its_name_that_imports_it() -> None:
    tests = list((REPO / "tests").rglob("test_*.py"))
    missing = []
    for name, path in _modules().items():
        if len(path.read_text().splitlines()) < NEEDS_TESTS:
            continue
        package, _, leaf = name.rpartition(".")
        uses = re.compile(
            rf"(import {re.escape(name)}\b|from {re.escape(name)} import|from {re.escape(package)} import|\bcli\()"
        )
        if not any(t.name == f"test_{leaf}.py" and uses.search(t.read_text()) for t in tests):
            missing.append(name)
    assert missing == [], f"give these modules a tests/**/test_<name>.py that imports them: {missing}"
