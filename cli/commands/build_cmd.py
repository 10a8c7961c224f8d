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
        "image, else ddpctl-trainer).",
    ),
    base_image: str | None = typer.Option(
        None,
        "--base-image",
        help="BASE_IMAGE build arg: the image with Python and torch to build on (default: the Dockerfile's GPU "
        "image; ddpctl-base:cpu from scripts/make-base-image.sh for CPU).",
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
) -> None:
    """Build the trainer image from the Dockerfile; the tag is a hash of what goes into it."""
    from ddpctl.image import build

    if print_tag and (push or load_kind):
        raise UsageError("--print-tag builds nothing: drop --push/--load-kind, or --print-tag")
    plan = build.plan_build(
        builder=builder,
        dockerfile=file,
        context=context,
        repo=repo or _default_repo(config),
        build_args=build.parse_build_args(build_arg or []),
        base_image=base_image,
        latest=latest,
    )
    if print_tag:
        typer.echo(plan.tag)
        return

    def echo(line: str) -> None:
        typer.echo(f"[build] {line}", err=True)

    typer.echo(f"ddpctl: building {plan.tag} with {plan.builder} ({plan.files} files in the context)", err=True)
    tag = build.build_and_publish(plan, push_tags=push, kind_cluster=load_kind, quiet=quiet, echo=echo)
    done = ["built " + ", ".join(plan.tags)]
    if push:
        done.append("pushed")
    if load_kind:
        done.append(f"loaded into kind cluster {load_kind}")
    typer.echo(f"ddpctl: {'; '.join(done)}; use it with --image {tag}", err=True)
    typer.echo(tag)


def _default_repo(config: Path | None) -> str:
    """The repository of the spec's image (DDPCTL_IMAGE, ddp.yaml or --config's), so `ddpctl run
    --docker` and `submit` find the :latest tag without --image."""
    from ddpctl.image.build import DEFAULT_REPO, repo_of
    from ddpctl.spec.sources import load_spec

    try:
        image = load_spec({}, config).image
    except UsageError:
        if config is not None:
            raise  # a file given by name must be right
        return DEFAULT_REPO
    return repo_of(image) or DEFAULT_REPO


def register(app: typer.Typer) -> None:
    app.command("build")(build_command)
