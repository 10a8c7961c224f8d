"""`ddpctl delete NAME`: every object of the job, with foreground propagation."""

from __future__ import annotations

import typer
from ddpctl.cluster.flags import (
    context_option,
    kubeconfig_option,
    namespace_option,
    request_timeout_option,
    timeout_option,
)


def delete_command(
    names: list[str] | None = typer.Argument(
        None, help="Job name(s) (default: the name in ./ddp.yaml).", show_default=False
    ),
    namespace: str | None = namespace_option(),
    ignore_not_found: bool = typer.Option(False, "--ignore-not-found", help="No error when the job does not exist."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until the objects and their pods are gone."),
    timeout: str | None = timeout_option(),
    kubeconfig: str | None = kubeconfig_option(),
    context: str | None = context_option(),
    request_timeout: str | None = request_timeout_option(),
) -> None:
    """Delete a job: its workload, Service and (by foreground propagation) its pods."""
    from ddpctl.cluster.config import ClusterOptions
    from ddpctl.cluster.operate import delete

    delete(
        list(names or []),
        options=ClusterOptions(kubeconfig, context, namespace, request_timeout),
        ignore_not_found=ignore_not_found,
        wait=wait,
        timeout=timeout,
        out=typer.echo,
    )


def register(app: typer.Typer) -> None:
    app.command("delete")(delete_command)
