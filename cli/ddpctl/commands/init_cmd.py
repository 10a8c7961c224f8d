"""`ddpctl init`: write a commented ddp.yaml, the spec to commit for GitOps."""

from __future__ import annotations

from pathlib import Path

import typer

from ddpctl.commands.options import spec_options
from ddpctl.errors import UsageError
from ddpctl.spec.sources import SpecInput


def init_command(
    spec_input: SpecInput,
    path: Path = typer.Option(Path("ddp.yaml"), "--path", help="Where to write the spec.", dir_okay=False),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
) -> None:
    """Write a commented ddp.yaml: the settings given here, and every other key's default commented out."""
    from ddpctl.atomic import write_text_atomic
    from ddpctl.manifests.specfile import commented_spec_yaml

    if path.exists() and not force:
        raise UsageError(f"--path: {path} already exists; pass --force to overwrite it")
    from ddpctl.engines import plan_for

    spec = spec_input.spec()
    plan_for(spec)  # a spec its target cannot run is refused before it is written
    write_text_atomic(path, commented_spec_yaml(spec, spec_input.chosen()))
    typer.echo(f"wrote {path}: edit it, then `ddpctl render` or `ddpctl run --local`", err=True)


def register(app: typer.Typer) -> None:
    app.command("init")(spec_options(init_command))  # wrapped here: only the command run pays for it
