"""`ddpctl lint` before a run: `run`, `render` and `submit` of a job whose script or module is in
the user's folder read it against the DDP recipe first (`ddpctl.lint`), print what it finds once,
and `submit` stops on an error (exit 2) unless `--no-lint`: a cluster should not pay for a
mistake a reading of the file finds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from ddpctl.errors import UsageError
from ddpctl.spec.model import JobSpec


def no_lint_option() -> Any:
    return typer.Option(
        False, "--no-lint", help="Do not check the job's own script against the DDP recipe first (ddpctl lint)."
    )


def lint_before_run(
    spec: JobSpec, say: Callable[[str], None], *, stop: bool, skip: bool, torchfix: bool = False
) -> str | None:
    """Lint the job's own code (nothing for the built-in trainer, which is not imported then) and
    print the findings; with `stop`, an error ends the command. Returns what `--explain` says of
    it: the summary, why nothing was linted, or that it was skipped."""
    if skip:
        return "not linted (--no-lint)"
    if spec.uses_trainer and not spec.command:
        return None  # the built-in trainer: ddpctl's own code, linted in its tests
    from ddpctl.lint import lint_job

    result = lint_job(spec, Path.cwd(), use_torchfix=torchfix)
    if not result.linted:
        return "; ".join(result.notes) or None
    for finding in result.findings:
        say(f"ddpctl: lint: {finding.text()}")
    errors = [f for f in result.findings if f.severity.value == "error"]
    if stop and errors:
        raise UsageError(
            f"lint: {errors[0].text()} ({result.summary()}); fix the script, or submit anyway with --no-lint"
        )
    cwd = Path.cwd()
    shown = ", ".join(str(p.relative_to(cwd)) if p.is_relative_to(cwd) else str(p) for p in result.files)
    return f"{shown}: {result.summary()} (ddpctl lint)"
