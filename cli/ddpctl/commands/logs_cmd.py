"""`ddpctl logs NAME`: every node's logs, prefixed [node N]; -f follows them (across restarts),
wherever the job runs (a cluster, ./ddp-runs)."""

from __future__ import annotations

import typer

from ddpctl.backend import Where
from ddpctl.cluster.flags import (
    context_option,
    kubeconfig_option,
    namespace_option,
    rank_option,
    request_timeout_option,
)
from ddpctl.commands.where import on_option


def logs_command(
    name: str | None = typer.Argument(None, help="Job name (default: the name in ./ddp.yaml).", show_default=False),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Stream new lines from every node until the job finishes."
    ),
    rank: int | None = rank_option(),
    previous: bool = typer.Option(False, "--previous", "-p", help="The previous (crashed) container instance's logs."),
    tail: int | None = typer.Option(None, "--tail", help="Only the last N lines of each node.", show_default=False),
    timestamps: bool = typer.Option(False, "--timestamps", help="Prefix each line with its time."),
    prefix: bool | None = typer.Option(
        None, "--prefix/--no-prefix", help="Prefix lines with \\[node N] (default: unless --rank).", show_default=False
    ),
    on: Where | None = on_option(),
    namespace: str | None = namespace_option(),
    kubeconfig: str | None = kubeconfig_option(),
    context: str | None = context_option(),
    request_timeout: str | None = request_timeout_option(),
) -> None:
    """Print the logs of every node of a job, or of one node with --rank.

    A job run here with `ddpctl run` (./ddp-runs/NAME) is read from its files with --on local, or
    when no cluster has it."""
    from ddpctl.backend import LogOptions
    from ddpctl.cluster.config import ClusterOptions
    from ddpctl.commands.where import ask, backends, job_name, spec_choices
    from ddpctl.errors import UsageError

    if rank is not None and rank < 0:
        raise UsageError(f"--rank: {rank} is negative; node ranks count from 0")
    if follow and previous:
        raise UsageError("--previous cannot be combined with --follow; drop one of them")
    spec = spec_choices()
    name = job_name(name, spec)
    options = LogOptions(follow, rank, previous, tail, timestamps, prefix)
    say = lambda s: typer.echo(s, err=True)  # noqa: E731 - the one place both streams are named
    candidates = backends(on, ClusterOptions(kubeconfig, context, namespace, request_timeout), spec)
    ask(name, candidates, lambda b: b.logs(name, options, typer.echo, say), say)


def register(app: typer.Typer) -> None:
    app.command("logs")(logs_command)
