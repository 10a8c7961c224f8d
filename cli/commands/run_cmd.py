"""`ddpctl run`: run the job here, wired as in the cluster: local torchrun agents or containers."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer
from ddpctl.commands.options import spec_options
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
) -> int:
    """Run the job on this machine: CPU + gloo, every node and rank wired as in the cluster."""
    if local and docker:
        raise UsageError("--local and --docker exclude each other: choose one")
    spec = spec_input.spec()
    mounts_given = list(mount or [])
    use_color = None if color is Color.auto else color is Color.always
    if docker:
        from ddpctl.runners.docker import plan_docker, run_docker

        dplan = plan_docker(spec, engine=engine, run_dir=run_dir, mounts=mounts_given, fresh=fresh)
        return run_docker(dplan, color=use_color, timeout=timeout)

    from ddpctl.runners.local import clean_run_dir, parse_mounts, plan_local, port_asked_for, run_local

    asked = port_asked_for(spec_input.flags, spec_input.config)
    plan = plan_local(spec, run_dir=run_dir, port_explicit=asked, mounts=parse_mounts(mounts_given))
    if fresh:
        clean_run_dir(plan)
    return run_local(plan, color=use_color, timeout=timeout)


def register(app: typer.Typer) -> None:
    app.command("run")(spec_options(run_command))  # wrapped here: only the command run pays for it
