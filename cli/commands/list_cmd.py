"""`ddpctl list`: the jobs ddpctl made (found by label), all four kinds, as a table."""

from __future__ import annotations

import typer
from ddpctl.cluster.flags import ListFormat, context_option, kubeconfig_option, namespace_option, request_timeout_option


def list_command(
    namespace: str | None = namespace_option(),
    all_namespaces: bool = typer.Option(False, "--all-namespaces", "-A", help="List jobs in every namespace."),
    output: ListFormat = typer.Option(
        ListFormat.table, "--output", "-o", help="table, wide, yaml, json (a v1 List) or name."
    ),
    kubeconfig: str | None = kubeconfig_option(),
    context: str | None = context_option(),
    request_timeout: str | None = request_timeout_option(),
) -> None:
    """List the jobs submitted with ddpctl (Job, PyTorchJob, JobSet, TrainJob)."""
    from ddpctl.cluster.config import ClusterOptions
    from ddpctl.cluster.operate import list_jobs

    list_jobs(
        options=ClusterOptions(kubeconfig, context, namespace, request_timeout),
        all_namespaces=all_namespaces,
        output=output,
        out=typer.echo,
    )


def register(app: typer.Typer) -> None:
    app.command("list")(list_command)
