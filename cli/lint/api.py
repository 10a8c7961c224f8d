"""Lint files, a folder, or the job a spec describes: read, check, let TorchFix look, drop what is ignored.

lint_paths([Path("train.py")], cwd)   # `ddpctl lint train.py`
lint_job(spec, cwd)                    # the job's --script / -m module found in cwd (before run/submit)
lint_workspace(cwd)                    # the folder's Python files
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl.lint import checks, files, source, torchfix
from ddpctl.lint.findings import Finding, LintResult
from ddpctl.lint.index import Index

if TYPE_CHECKING:
    from ddpctl.lint.fix import Fixed
    from ddpctl.spec import JobSpec


def _spans(src: source.Source, idx: Index) -> dict[int, tuple[int, int]]:
    """Each line of a simple statement -> the statement's first and last line."""
    spans: dict[int, tuple[int, int]] = {}
    for stmt in idx.simple_statements:
        last = stmt.end_lineno or stmt.lineno
        for line in range(stmt.lineno, last + 1):
            spans.setdefault(line, (stmt.lineno, last))
    return spans


def unignored(src: source.Source, idx: Index, found: list[Finding]) -> list[Finding]:
    """Drop the findings an ignore comment names, on any line of the finding's statement."""
    if not src.ignores:
        return found
    spans = _spans(src, idx)
    kept = []
    for f in found:
        if f.rule == "DDP000":
            kept.append(f)
            continue
        first, last = spans.get(f.line, (f.line, f.line))
        node_last = getattr(f.node, "end_lineno", None) or f.line
        last = max(last, node_last)
        if not any(f.rule in ig.rules for line, ig in src.ignores.items() if first <= line <= last):
            kept.append(f)
    return kept


def _unchanged_utf8(src: source.Source) -> bool:
    """The file still holds what was read, in UTF-8 (what the fix writes back)."""
    try:
        return src.path.read_bytes() == src.text.encode("utf-8")
    except OSError:
        return False


class Linted:
    """Sources, their indexes and findings, kept for --fix."""

    def __init__(self, sources: list[source.Source], indexes: list[Index], result: LintResult) -> None:
        self.sources = sources
        self.indexes = indexes
        self.result = result

    def fix(self, use_torchfix: bool = True) -> tuple[list[Fixed], Linted]:
        """Rewrite the fixable findings in every file (atomically), and lint the files again."""
        from ddpctl.atomic import write_text_atomic
        from ddpctl.lint.fix import Fixed, fix

        done: list[Fixed] = []
        after: list[source.Source] = []
        for src, idx in zip(self.sources, self.indexes):
            fixed = fix(src, idx, [f for f in self.result.findings if f.path == src.display])
            if fixed.changed and not _unchanged_utf8(src):
                self.result.notes.append(f"{src.display}: not fixed (changed since it was read, or not UTF-8)")
                fixed = Fixed(src, src.text, skipped=fixed.fixed + fixed.skipped)
            done.append(fixed)
            if fixed.changed:
                write_text_atomic(src.path, fixed.text)
                after.append(source.parse(src.path, src.display, fixed.text))
            else:
                after.append(src)
        return done, lint_sources(after, self.result.files, use_torchfix)


def lint_sources(sources: list[source.Source], paths: list[Path], use_torchfix: bool = True) -> Linted:
    indexes = [Index(src.tree) for src in sources]
    facts = checks.projects([src.path for src in sources], indexes)
    result = LintResult(files=list(paths), torchfix=torchfix.version() if use_torchfix else None)
    for src, idx, project in zip(sources, indexes, facts):
        found = checks.check(src, idx, project)
        if use_torchfix:
            found.extend(torchfix.run(src, idx))
        result.findings.extend(unignored(src, idx, found))
    unique: dict[tuple[str, int, int, str], Finding] = {}
    for f in sorted(result.findings, key=lambda f: f.sort_key()):
        unique.setdefault(f.sort_key(), f)
    result.findings = list(unique.values())
    if use_torchfix and result.torchfix is None and any(f.rule.startswith("TOR") for f in result.findings):
        result.notes.append("TorchFix is not installed: only its TOR102 was checked (pip install 'ddpctl[lint]')")
    return Linted(sources, indexes, result)


def read(paths: Sequence[Path], cwd: Path) -> list[source.Source]:
    return [source.load(p, files.display(p, cwd)) for p in paths]


def lint_files(paths: Sequence[Path], cwd: Path, use_torchfix: bool = True) -> LintResult:
    """Lint these files (UsageError for one that cannot be read or parsed)."""
    return lint_sources(read(paths, cwd), list(paths), use_torchfix).result


def lint_paths(paths: Sequence[Path], cwd: Path, use_torchfix: bool = True) -> LintResult:
    """Files as given, folders as their Python files; a missing path is a UsageError."""
    found = files.expand(paths)
    if not found:
        return LintResult(notes=[f"no Python files in {', '.join(str(p) for p in paths)}"])
    return lint_files(found, cwd, use_torchfix)


def default_files(spec: JobSpec, cwd: Path) -> tuple[list[Path], list[str]]:
    """What `ddpctl lint` reads without paths: the job's own script or module, else the workspace."""
    found, notes = files.job_files(spec, cwd)
    if found:
        return found, notes
    workspace = files.python_files(cwd)
    return workspace, [*notes, f"linting the Python files of {cwd} instead"] if workspace else notes


def lint_workspace(cwd: Path, use_torchfix: bool = True) -> LintResult:
    found = files.python_files(cwd)
    if not found:
        return LintResult(notes=[f"no Python files in {cwd}"])
    return lint_files(found, cwd, use_torchfix)


def lint_job(spec: JobSpec, cwd: Path, use_torchfix: bool = True) -> LintResult:
    """The job's own code, for the commands that run it: its `--script` (or `-m` module, or the
    Python file its command names) found in `cwd`. `result.linted` is False, with a note, when
    there is none (the built-in trainer, a path only the image has)."""
    found, notes = files.job_files(spec, cwd)
    if not found:
        return LintResult(notes=notes)
    result = lint_files(found, cwd, use_torchfix)
    result.notes[:0] = notes
    return result
