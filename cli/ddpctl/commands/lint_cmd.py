"""`ddpctl lint`: check the user's training script against the DDP recipe. Reads it, never runs it."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from ddpctl.lint.fix import Fixed


class LintFormat(str, Enum):
    text = "text"
    json = "json"


def lint_command(
    paths: list[Path] | None = typer.Argument(
        None,
        help="Python files or folders (default: the job's --script or -m module found here, else this folder's).",
        show_default=False,
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        "-f",
        help="Spec file naming the job's script (default ./ddp.yaml when present).",
        dir_okay=False,
    ),
    output: LintFormat = typer.Option(
        LintFormat.text, "--output", "-o", help="text (file:line:col RULE message; fix) or json."
    ),
    fix: bool = typer.Option(
        False, "--fix", help="Rewrite the mechanical findings (device, local rank, backend) and print the diff."
    ),
    torchfix: bool = typer.Option(
        True,
        "--torchfix/--no-torchfix",
        help="Add TorchFix's findings (torch.load without weights_only, deprecated APIs).",
    ),
) -> int:
    """Check your training script against the DDP recipe; exit 1 on an error (docs/lint-rules.md)."""
    from ddpctl.lint.api import JobContext, default_files, job_context, lint_sources, read
    from ddpctl.lint.files import expand
    from ddpctl.lint.findings import LintResult

    cwd = Path.cwd()
    notes: list[str] = []
    context = JobContext()
    if paths:
        files = expand(paths)
    else:
        from ddpctl.spec.sources import SpecInput

        spec = SpecInput(flags={}, config=config).spec()
        files, notes = default_files(spec, cwd)
        context = job_context(spec, cwd)  # the job's PYTHONPATH and layout
    linted = (
        lint_sources(
            read(files, cwd),
            files,
            torchfix,
            cwd=cwd,
            roots=context.roots,
            layout=context.layout,
            module_entry=context.module_entry,
        )
        if files
        else None
    )
    fixed: list[Fixed] = []
    if linted is not None and fix:
        fixed, linted = linted.fix(torchfix)
    result = linted.result if linted is not None else LintResult()
    result.notes[:0] = notes if files else [*notes, "nothing to lint"]
    changed = [f for f in fixed if f.changed]
    if output is LintFormat.json:
        import json

        data = result.to_dict()
        if fix:
            data["fixed"] = [
                {"path": f.src.display, "rules": [x.rule for x in f.fixed], "diff": f.diff()} for f in changed
            ]
        typer.echo(json.dumps(data, indent=2))
        return result.exit_code
    for f in changed:
        typer.echo(f.diff(), nl=False)
    if fix:
        count = sum(len(f.fixed) for f in changed)
        typer.echo(f"ddpctl lint: fixed {count} finding(s) in {len(changed)} file(s)", err=True)
    for finding in result.findings:
        typer.echo(finding.text())
    for note in result.notes:
        typer.echo(f"ddpctl lint: note: {note}", err=True)
    if result.linted:
        typer.echo(f"ddpctl lint: {result.summary()}", err=True)
    return result.exit_code


def register(app: typer.Typer) -> None:
    app.command("lint")(lint_command)
