"""`ddpctl build`: build the trainer image with docker, podman or buildah, tagged by content hash."""

from __future__ import annotations

from pathlib import Path

import typer

from ddpctl.errors import UsageError


def build_command(
    builder: str = typer.Option("auto", "--builder", help="docker, podman, buildah, or auto (the first one found)."),
    repo: str | None = typer.Option(
        None,
        "--repo",
        help="Image repository; the tag is the content hash (default: the repository of DDPCTL_IMAGE / ddp.yaml's "
        "image, else the folder's name; ddpctl-trainer only in ddpctl's own source, which builds the trainer).",
    ),
    base_image: str | None = typer.Option(
        None,
        "--base-image",
        help="BASE_IMAGE build arg: the image with Python and torch to build on (default: the Dockerfile's GPU "
        "image; ddpctl-base:cpu from scripts/make-base-image.sh for CPU; in a project: ddpctl-trainer:latest).",
    ),
    build_arg: list[str] | None = typer.Option(
        None, "--build-arg", help="KEY=VALUE build arg (repeatable).", show_default=False
    ),
    file: Path | None = typer.Option(
        None, "--file", "-f", help="Dockerfile (default CONTEXT/Dockerfile).", dir_okay=False
    ),
    context: Path | None = typer.Option(
        None, "--context", help="Build context (default: the current directory).", file_okay=False
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        help="Spec file (default ./ddp.yaml when present): its image names the default --repo. (-f is the "
        "Dockerfile here, as in docker.)",
        dir_okay=False,
    ),
    latest: bool = typer.Option(True, "--latest/--no-latest", help="Also tag REPO:latest (the spec's default image)."),
    push: bool = typer.Option(False, "--push", help="Push the tags to their registry after building."),
    load_kind: str | None = typer.Option(
        None, "--load-kind", metavar="CLUSTER", help="Load the image into the nodes of this kind cluster."
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="Hide the builder's output (its tail is still shown on failure)."
    ),
    print_tag: bool = typer.Option(False, "--print-tag", help="Only compute and print the tag (nothing is built)."),
    write_dockerfile: bool = typer.Option(
        False,
        "--write-dockerfile",
        help="In a project without a Dockerfile: write the one ddpctl would build with (and a .dockerignore), "
        "to own it; nothing is built.",
    ),
) -> None:
    """Build the image: from ./Dockerfile (or --file), or, in a project without one, your code on the trainer image.

    In a project folder without a Dockerfile, the code (chosen as --workspace chooses it: .gitignore,
    .dockerignore, likely secrets left out) goes on the trainer image (or --base-image), with the
    dependencies of requirements.txt and pyproject.toml in a layer before it, at /workspace: the working
    directory and first on PYTHONPATH. The tag (ws-<code>-<rest>) says which code it carries."""
    from ddpctl.image import build
    from ddpctl.image.project import plan_image, write_owned_dockerfile

    if print_tag and (push or load_kind):
        raise UsageError("--print-tag builds nothing: drop --push/--load-kind, or --print-tag")
    if write_dockerfile:
        for written in write_owned_dockerfile((context or Path.cwd()).resolve(), base_image):
            typer.echo(f"wrote {written}", err=True)
        return
    with plan_image(
        builder=builder,
        dockerfile=file,
        context=context,
        repo=repo,
        spec_repo=_spec_repo(config),
        build_args=build.parse_build_args(build_arg or []),
        base_image=base_image,
        latest=latest,
    ) as (plan, packed):
        if packed is not None:
            typer.echo(f"ddpctl: {packed.summary()}", err=True)
        if print_tag:
            typer.echo(plan.tag)
            return

        def echo(line: str) -> None:
            typer.echo(f"[build] {line}", err=True)

        what = "the project's code on the trainer image" if packed is not None else f"{plan.files} files in the context"
        typer.echo(f"ddpctl: building {plan.tag} with {plan.builder} ({what})", err=True)
        tag = build.build_and_publish(plan, push_tags=push, kind_cluster=load_kind, quiet=quiet, echo=echo)
    done = ["built " + ", ".join(plan.tags)]
    if push:
        done.append("pushed")
    if load_kind:
        done.append(f"loaded into kind cluster {load_kind}")
    typer.echo(f"ddpctl: {'; '.join(done)}; use it with --image {tag}", err=True)
    typer.echo(tag)


def _spec_repo(config: Path | None) -> str:
    """The repository of the spec's image (DDPCTL_IMAGE, ddp.yaml or --config's), so `ddpctl run
    --docker` and `submit` find the :latest tag without --image; "" without a spec file."""
    from ddpctl.image.build import repo_of
    from ddpctl.spec.sources import load_spec

    try:
        image = load_spec({}, config).image
    except UsageError:
        if config is not None:
            raise  # a file given by name must be right
        return ""
    return repo_of(image)


def register(app: typer.Typer) -> None:
    app.command("build")(build_command)
