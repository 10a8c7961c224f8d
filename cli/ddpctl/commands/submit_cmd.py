"""`ddpctl submit`: apply the job to a cluster (server-side apply), optionally wait or follow it."""

from __future__ import annotations

import typer

from ddpctl.cluster.flags import (
    DryRun,
    Format,
    context_option,
    kubeconfig_option,
    rank_option,
    request_timeout_option,
    timeout_option,
)
from ddpctl.commands.options import spec_options
from ddpctl.commands.prelint import lint_before_run, no_lint_option
from ddpctl.spec.sources import SpecInput


def submit_command(
    spec_input: SpecInput,
    kubeconfig: str | None = kubeconfig_option(),
    context: str | None = context_option(),
    request_timeout: str | None = request_timeout_option(),
    dry_run: DryRun = typer.Option(
        DryRun.none,
        "--dry-run",
        help="client: print the objects, no cluster; server: the API server validates them, nothing is stored.",
    ),
    output: Format | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Print the objects (as the server answered) as yaml or json instead of one line each.",
    ),
    build: bool = typer.Option(
        False, "--build", help="Build and push the image first (as `ddpctl build`), then submit with it."
    ),
    replace: bool = typer.Option(
        False, "--replace", help="Delete an existing job of this name (and wait until it is gone), then create it."
    ),
    wait: bool = typer.Option(
        False,
        "--wait",
        "-w",
        help="Wait until the job finishes, with a live status line; exit 0 on success, 1 on failure.",
    ),
    follow: bool = typer.Option(
        False,
        "--follow",
        help="Like --wait, and stream every node's logs, each line prefixed \\[node N] (N: the node rank, "
        "the pod's index).",
    ),
    rank: int | None = rank_option("With --follow: "),
    timeout: str | None = timeout_option(),
    no_lint: bool = no_lint_option(),
) -> None:
    """Submit the job to a cluster (--target auto picks the engine the cluster has)."""
    from ddpctl.cluster.config import ClusterOptions
    from ddpctl.cluster.flags import SubmitOptions
    from ddpctl.cluster.kube_backend import ClusterBackend
    from ddpctl.commands.after_dash import refuse_ddpctl_flags_for_the_trainer

    spec = spec_input.spec(target="job")  # the args and the code do not depend on the target
    refuse_ddpctl_flags_for_the_trainer(spec)
    lint_before_run(spec, lambda s: typer.echo(s, err=True), stop=True, skip=no_lint, torchfix=True)

    backend = ClusterBackend(
        ClusterOptions(kubeconfig, context, None, request_timeout),
        SubmitOptions(dry_run, output, build, replace, wait, follow, rank, timeout),
    )
    say = lambda s: typer.echo(s, err=True)  # noqa: E731 - the one place both streams are named
    if dry_run is not DryRun.none:
        backend.dry_run(spec_input, typer.echo, say)
    else:
        backend.run(spec_input, typer.echo, say)


def register(app: typer.Typer) -> None:
    app.command("submit")(spec_options(submit_command))  # wrapped here: only the command run pays for it
