"""`ddpctl logs NAME`: every rank's logs, prefixed [rank N]; -f follows across restarts."""

from __future__ import annotations

from typing import Optional

import typer

from ddpctl.kube.flags import context_option, kubeconfig_option, namespace_option


def logs_command(
    name: Optional[str] = typer.Argument(None, help="Job name (default: the name in ./ddp.yaml).", show_default=False),
    follow: bool = typer.Option(False, "--follow", "-f", help="Stream new lines from every rank until the job finishes."),
    rank: Optional[int] = typer.Option(None, "--rank", help="Only this node rank (0 = rank 0's pod).", show_default=False),
    previous: bool = typer.Option(False, "--previous", "-p", help="The previous (crashed) container instance's logs."),
    tail: Optional[int] = typer.Option(None, "--tail", help="Only the last N lines of each rank.", show_default=False),
    timestamps: bool = typer.Option(False, "--timestamps", help="Prefix each line with its time."),
    prefix: Optional[bool] = typer.Option(None, "--prefix/--no-prefix", help="Prefix lines with [rank N] (default: unless --rank).", show_default=False),
    namespace: Optional[str] = namespace_option(),
    kubeconfig: Optional[str] = kubeconfig_option(),
    context: Optional[str] = context_option(),
) -> None:
    """Print the logs of every rank of a job (or one, with --rank)."""
    from ddpctl.kube.operate import logs

    logs(name, kubeconfig=kubeconfig, context=context, namespace=namespace, follow=follow, rank=rank, previous=previous,
         tail=tail, timestamps=timestamps, prefix=prefix, out=typer.echo, say=lambda s: typer.echo(s, err=True))


def register(app: typer.Typer) -> None:
    app.command("logs")(logs_command)
