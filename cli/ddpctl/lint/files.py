"""Which files a lint run reads: the paths given, the job's own script or module, or the workspace.

The workspace is the folder `ddpctl` runs in, the user's code: its Python files, without hidden
folders, virtual environments (a folder with `pyvenv.cfg`), caches, build output or ddpctl's own
`ddp-runs/`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl.errors import UsageError

if TYPE_CHECKING:
    from ddpctl.spec import JobSpec

SKIP_DIRS = frozenset(
    {"__pycache__", "node_modules", "site-packages", "build", "dist", "ddp-runs", "venv", "env", "htmlcov"}
)


def python_files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and d not in SKIP_DIRS
            and not d.endswith(".egg-info")
            and not (Path(root) / d / "pyvenv.cfg").exists()
        )
        found.extend(Path(root) / f for f in sorted(files) if f.endswith(".py"))
    return found


def expand(paths: Sequence[Path]) -> list[Path]:
    """Files as given, folders as their Python files; a path that does not exist is bad input."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out.extend(python_files(path))
        elif path.is_file():
            out.append(path)
        else:
            raise UsageError(f"{path}: no such file or folder; give Python files or folders to lint")
    seen: set[Path] = set()
    unique = []
    for path in out:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def display(path: Path, cwd: Path) -> str:
    """The path as a finding names it: relative to `cwd` when it is under it."""
    try:
        return str(path.resolve().relative_to(cwd.resolve()))
    except ValueError:
        return str(path)


def _in_folder(path_in_image: str, cwd: Path) -> Path | None:
    """The file in this folder for a script path as the pods see it: `train.py`, `src/train.py`, or
    an absolute path in the image without its first component (`/workspace/train.py` -> `train.py`);
    an absolute path that exists here is taken as it is."""
    path = Path(path_in_image)
    if not path.is_absolute():
        return cwd / path if (cwd / path).is_file() else None
    if path.is_file():
        return path
    parts = path.parts[2:]  # ('/', 'workspace', ...)
    if parts and (cwd.joinpath(*parts)).is_file():
        return cwd.joinpath(*parts)
    return None


def folder_in(path_in_image: str, cwd: Path) -> Path | None:
    """The folder here for a PYTHONPATH entry as the pods see it (as `_in_folder` does for a file)."""
    path = Path(path_in_image)
    if not path.is_absolute():
        return cwd / path if (cwd / path).is_dir() else None
    parts = path.parts[2:]
    here = cwd.joinpath(*parts) if parts else cwd
    if here.is_dir():
        return here
    return path if path.is_dir() else None


def module_file(module: str, cwd: Path) -> Path | None:
    """`pkg.train` under this folder (or its src/): pkg/train.py, or pkg/train/__main__.py."""
    parts = module.split(".")
    for base in (cwd, cwd / "src"):
        for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__main__.py")):
            if candidate.is_file():
                return candidate
    return None


def job_files(spec: JobSpec, cwd: Path) -> tuple[list[Path], list[str]]:
    """The user's file the job runs, found in `cwd`, and notes on what was not linted and why."""
    if spec.script:
        found = _in_folder(spec.script, cwd)
        if found:
            return [found], []
        return [], [f"script {spec.script} is not in {cwd} (it may exist only in the image): not linted"]
    if spec.module:
        if spec.uses_trainer:
            return [], ["the job runs ddpctl's built-in trainer: no script of yours to lint"]
        found = module_file(spec.module, cwd)
        if found:
            return [found], []
        return [], [f"module {spec.module} is not under {cwd} (installed in the image?): not linted"]
    command = list(spec.command or [])
    for i, word in enumerate(command):
        if word == "-m" and i + 1 < len(command):
            found = module_file(command[i + 1], cwd)
            if found:
                return [found], []
        elif word.endswith(".py"):
            found = _in_folder(word, cwd)
            if found:
                return [found], []
    return [], ["the job's command names no Python file in this folder: not linted"]
