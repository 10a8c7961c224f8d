"""`ddpctl logs NAME`: every node's (pod's) logs, prefixed [node N]; -f follows across restarts."""

from __future__ import annotations

import typer
from ddpctl.cluster.flags import (
    context_option,
    kubeconfig_option,
    namespace_option,
    rank_option,
    request_timeout_option,
)


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
    namespace: str | None = namespace_option(),
    kubeconfig: str | None = kubeconfig_option(),
    context: str | None = context_option(),
    request_timeout: str | None = request_timeout_option(),
) -> None:
    """Print the logs of every node (pod) of a job, or of one node with --rank.

    A job run here with `ddpctl run --local` (./ddp-runs/NAME) is read from its files when no
    cluster has it."""
    from ddpctl.cluster.config import ClusterOptions
    from ddpctl.cluster.operate import logs
    from ddpctl.errors import ClusterError, UsageError
    from ddpctl.runners.local import find_local_run, job_name, local_logs

    name = job_name(name)
    local = find_local_run(name)
    try:
        logs(
            name,
            options=ClusterOptions(kubeconfig, context, namespace, request_timeout),
            follow=follow,
            rank=rank,
            previous=previous,
            tail=tail,
            timestamps=timestamps,
            prefix=prefix,
            out=typer.echo,
            say=lambda s: typer.echo(s, err=True),
        )
    except ClusterError:
        if local is None:
            raise
        if rank is not None and rank < 0:
            raise UsageError(f"--rank: {rank} is negative; node ranks count from 0") from None
        for line in local_logs(local, node=rank, tail=tail, previous=previous, prefix=prefix):
            typer.echo(line)
        if follow:
            typer.echo(
                f"ddpctl: --follow: a local run's live output is its `ddpctl run`'s; its files are in {local}/logs",
                err=True,
            )


def register(app: typer.Typer) -> None:
    app.command("logs")(logs_command)
