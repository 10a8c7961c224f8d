"""Folders made from a table: `{"a/b.py": "text", "run.sh": Exec("..."), "ln": Link("a"), "empty/": None}`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Link:
    target: str  # as written in the link (relative to its folder, or absolute)


@dataclass(frozen=True)
class Exec:
    text: str  # an executable file's content


Tree = dict[str, "str | bytes | Link | Exec | None"]


def make_tree(root: Path, tree: Tree, order: list[str] | None = None) -> Path:
    """Create `tree` under `root` (in `order` when given: creation order must not matter)."""
    root.mkdir(parents=True, exist_ok=True)
    for path in order or list(tree):
        value = tree[path]
        target = root / path
        if value is None:
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(value, Link):
            os.symlink(value.target, target)
        elif isinstance(value, Exec):
            target.write_text(value.text)
            target.chmod(0o755)
        elif isinstance(value, bytes):
            target.write_bytes(value)
        else:
            target.write_text(value)
    return root
