"""Lint files, a folder, or the job a spec describes: read, check, let TorchFix look, drop what is ignored.

lint_paths([Path("train.py")], cwd)   # `ddpctl lint train.py`
lint_job(spec, cwd)                    # the job's --script / -m module found in cwd (before run/submit)
lint_workspace(cwd)                    # the folder's Python files
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl.errors import RuntimeFailure
from ddpctl.lint import checks, files, program, source, torchfix
from ddpctl.lint.facts import Project
from ddpctl.lint.findings import Finding, LintResult
from ddpctl.lint.index import Index
from ddpctl.lint.program import UNKNOWN_LAYOUT, Layout
from ddpctl.records import record

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


def _stage(path: Path, text: str) -> Path:
    """`text` in a temp file next to `path`, with `path`'s mode, flushed to disk: ready to rename."""
    mode = path.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def write_all(changes: Sequence[tuple[source.Source, str]]) -> str | None:
    """Write every file's new text, or none: each text is compiled (`compile`, which also refuses what
    parses but cannot run, such as `break` outside a loop), then staged in a temp file in the file's
    own folder; only when every one is staged, and every file still holds what was read, are they
    renamed over the files. On a failure the temps are removed and nothing is written (a rename that
    fails half-way puts back the files already renamed). Returns why nothing was written, or None."""
    from ddpctl.atomic import write_text_atomic

    for src, text in changes:
        try:
            compile(text, str(src.path), "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            raise RuntimeFailure(
                f"internal error: the fixed {src.display} would not compile ({exc}); nothing written"
            ) from None
    staged: list[tuple[source.Source, Path]] = []
    renamed: list[source.Source] = []
    current = changes[0][0] if changes else None
    try:
        for current, text in changes:
            staged.append((current, _stage(current.path, text)))
        for src, _ in staged:
            if not _unchanged_utf8(src):
                return f"{src.display} changed while it was being fixed"
        for current, tmp in staged:
            os.replace(tmp, current.path)
            renamed.append(current)
    except OSError as exc:
        failed = f"could not write {current.display if current else '?'} ({exc.strerror or exc})"
        undone = []
        for src in renamed:
            try:
                write_text_atomic(src.path, src.text)
            except OSError:
                undone.append(src.display)
        return failed + (f", and could not put back {', '.join(undone)}" if undone else "")
    finally:
        for _, tmp in staged:
            tmp.unlink(missing_ok=True)
    return None


class Linted:
    """Sources, their indexes and findings, kept for --fix, and how they were read (to read them again)."""

    def __init__(
        self, sources: list[source.Source], indexes: list[Index], result: LintResult, again: Callable[..., Linted]
    ) -> None:
        self.sources = sources
        self.indexes = indexes
        self.result = result
        self._again = again

    def fix(self, use_torchfix: bool = True) -> tuple[list[Fixed], Linted]:
        """Rewrite the fixable findings in every file of the program, all or nothing: each file's text
        is fixed in memory and the program linted again (a fix can uncover another: a script that no
        longer needs CUDA then shows its hard-coded nccl), until none of the fixed rules is left; only
        then, and when every file is as it was read, is anything written (`write_all`)."""
        from ddpctl.lint.fix import FIXED_RULES, Fixed, fix

        for src in self.sources:
            mine = [f for f in self.result.findings if f.path == src.display and f.rule in FIXED_RULES]
            if mine and not _unchanged_utf8(src):
                self.result.notes.append(f"{src.display}: not fixed (changed since it was read, or not UTF-8)")
                return [Fixed(s, s.text) for s in self.sources], self
        original = {s.path: s for s in self.sources}
        fixed_of: dict[Path, list[Finding]] = {}
        current: Linted = self
        for _ in range(3):
            after: dict[Path, source.Source] = {}
            changed = False
            for src, idx in zip(current.sources, current.indexes):
                done = fix(src, idx, [f for f in current.result.findings if f.path == src.display])
                if done.skipped:
                    return self._refuse(done.skipped[0], use_torchfix)
                fixed_of.setdefault(src.path, []).extend(done.fixed)
                after[src.path] = source.parse(src.path, src.display, done.text) if done.changed else src
                changed = changed or done.changed
            current = self._again(after, use_torchfix)
            if not changed or not any(f.rule in FIXED_RULES for f in current.result.findings):
                break
        left = [f for f in current.result.findings if f.rule in FIXED_RULES]
        if left:
            return self._refuse(left[0], use_torchfix)
        results = []
        changes = []
        for src in current.sources:
            before = original.get(src.path, src)
            results.append(Fixed(before, src.text, fixed=fixed_of.get(src.path, [])))
            if src.text != before.text:
                changes.append((before, src.text))
        failed = write_all(changes)
        if failed:
            self.result.notes.append(f"not fixed: {failed}; nothing was written")
            return [Fixed(s, s.text) for s in self.sources], self
        return results, current

    def _refuse(self, first: Finding, use_torchfix: bool) -> tuple[list[Fixed], Linted]:
        from ddpctl.lint.fix import Fixed

        self.result.notes.append(
            f"not fixed: {first.path}:{first.line} {first.rule} cannot be rewritten with the rest of its flow; "
            "nothing was written"
        )
        return [Fixed(s, s.text) for s in self.sources], self


def lint_sources(
    sources: list[source.Source],
    paths: list[Path],
    use_torchfix: bool = True,
    *,
    cwd: Path | None = None,
    roots: Sequence[Path] = (),
    layout: Layout = UNKNOWN_LAYOUT,
    module_entry: bool = False,
) -> Linted:
    """Lint the programs of these entry files: each with every local module it imports (program.py)."""
    here = cwd or Path.cwd()
    entries = [src.path for src in sources]

    def run(read: dict[Path, source.Source], torchfix_on: bool) -> Linted:
        programs = program.load(entries, here, roots, module_entry, read)
        return _check(programs, paths, torchfix_on, layout, run)

    return run({src.path: src for src in sources}, use_torchfix)


def _check(
    programs: list[program.Program],
    paths: list[Path],
    use_torchfix: bool,
    layout: Layout,
    again: Callable[..., Linted],
) -> Linted:
    modules = [m for p in programs for m in p.modules]
    given = {p.resolve() for p in paths}
    files = list(paths) + [m.src.path for m in modules if m.src.path.resolve() not in given]
    result = LintResult(files=files, torchfix=torchfix.version() if use_torchfix else None)
    for prog in programs:
        result.notes.extend(prog.notes)
        project = Project.of(prog, layout)
        for module in prog.modules:
            src, idx = module.src, module.idx
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
    return Linted([m.src for m in modules], [m.idx for m in modules], result, again)


def read(paths: Sequence[Path], cwd: Path) -> list[source.Source]:
    return [source.load(p, files.display(p, cwd)) for p in paths]


def lint_files(
    paths: Sequence[Path], cwd: Path, use_torchfix: bool = True, context: JobContext | None = None
) -> LintResult:
    """Lint these files and the local modules they import (UsageError for one that cannot be read or
    parsed, in any of them)."""
    ctx = context or JobContext()
    return lint_sources(
        read(paths, cwd),
        list(paths),
        use_torchfix,
        cwd=cwd,
        roots=ctx.roots,
        layout=ctx.layout,
        module_entry=ctx.module_entry,
    ).result


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
    result = lint_files(found, cwd, use_torchfix, job_context(spec, cwd))
    result.notes[:0] = notes
    return result


@record
class JobContext:
    """What the job's spec says about how its script runs: the extra import roots (its PYTHONPATH),
    its layout, and whether it runs as `-m` (imports then start from the working folder)."""

    roots: tuple[Path, ...] = ()
    layout: Layout = UNKNOWN_LAYOUT
    module_entry: bool = False


def job_context(spec: JobSpec, cwd: Path) -> JobContext:
    roots = []
    for entry in (spec.env.get("PYTHONPATH") or "").split(":"):
        if entry:
            found = files.folder_in(entry, cwd)
            if found is not None:
                roots.append(found)
    groups = spec.groups
    procs = max((g.procs_per_node or g.gpus_per_node or 2) for g in groups) if groups else None
    nodes = spec.max_nodes if spec.max_nodes is not None else spec.nodes
    command = list(spec.command or [])
    module = bool(spec.module) or ("-m" in command and not spec.script)
    return JobContext(tuple(roots), Layout(nodes, procs), module and not spec.script)
