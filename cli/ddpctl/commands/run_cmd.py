"""`ddpctl run`: run the job here, wired as in the cluster: local torchrun agents or containers."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from ddpctl.commands.options import spec_options
from ddpctl.commands.prelint import lint_before_run, no_lint_option
from ddpctl.errors import UsageError
from ddpctl.spec.sources import SpecInput


class Color(str, Enum):
    auto = "auto"
    always = "always"
    never = "never"


def run_command(
    spec_input: SpecInput,
    local: bool = typer.Option(
        False, "--local", help="Run every node as a torchrun agent on this machine (the default)."
    ),
    docker: bool = typer.Option(False, "--docker", help="Run every node as a container on a private Docker network."),
    run_dir: Path | None = typer.Option(
        None, "--run-dir", help="Where logs and checkpoints go (default ./ddp-runs/NAME).", file_okay=False
    ),
    mount: list[str] | None = typer.Option(
        None,
        "--mount",
        help="NAME=DIR: host directory for the spec's volume NAME (default RUN_DIR/NAME; 'checkpoints' always exists).",
        show_default=False,
    ),
    fresh: bool = typer.Option(
        False, "--fresh", help="Delete this job's earlier checkpoints first (the trainer resumes from them otherwise)."
    ),
    timeout: float | None = typer.Option(
        None, "--timeout", help="Stop the job after this many seconds (exit code 3).", min=1
    ),
    color: Color = typer.Option(
        Color.auto, "--color", help="Colour the rank prefixes: auto (on a terminal), always, never."
    ),
    engine: str = typer.Option(
        "docker", "--engine", help="With --docker: the container engine CLI (docker or podman)."
    ),
    spares: int = typer.Option(
        0,
        "--spares",
        min=0,
        help="With --recovery pod: node processes started ahead (torch imported) that take a lost node's place "
        "at once; a new one starts behind each.",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print each node's command and env (or each `docker run`); start nothing."
    ),
    no_lint: bool = no_lint_option(),
) -> int:
    """Run the job on this machine: CPU + gloo, every node and rank wired as in the cluster."""
    from ddpctl.commands.after_dash import refuse_ddpctl_flags_for_the_trainer
    from ddpctl.runners.machine_backends import DockerBackend, LocalBackend, RunOptions

    refuse_ddpctl_flags_for_the_trainer(spec_input.spec())
    lint_before_run(spec_input.spec(), lambda s: typer.echo(s, err=True), stop=False, skip=no_lint)

    if local and docker:
        raise UsageError("--local and --docker exclude each other: choose one")
    if docker and spec_input.spec().recovery == "pod":
        raise UsageError("--recovery pod: run --docker restarts the whole group; use it with --local")
    options = RunOptions(
        run_dir=run_dir,
        mounts=tuple(mount or ()),
        fresh=fresh,
        timeout=timeout,
        color=None if color is Color.auto else color is Color.always,
        engine=engine,
        spares=spares,
    )
    backend = DockerBackend(options) if docker else LocalBackend(options)
    say = lambda s: typer.echo(s, err=True)  # noqa: E731 - the one place both streams are named
    if dry_run:
        backend.dry_run(spec_input, typer.echo, say)
        return 0
    return backend.run(spec_input, typer.echo, say)


def register(app: typer.Typer) -> None:
    app.command("run")(spec_options(run_command))  # wrapped here: only the command run pays for it
