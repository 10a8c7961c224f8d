"""`ddpctl list`: the jobs ddpctl made (found by label: all four kinds), or the runs in ./ddp-runs."""

from __future__ import annotations

import typer

from ddpctl.backend import Where
from ddpctl.backend.view import ListFormat
from ddpctl.cluster.flags import context_option, kubeconfig_option, namespace_option, request_timeout_option
from ddpctl.commands.where import on_option


def list_command(
    namespace: str | None = namespace_option(),
    all_namespaces: bool = typer.Option(False, "--all-namespaces", "-A", help="List jobs in every namespace."),
    output: ListFormat = typer.Option(
        ListFormat.table, "--output", "-o", help="table, wide, yaml, json (a v1 List) or name."
    ),
    on: Where | None = on_option(),
    kubeconfig: str | None = kubeconfig_option(),
    context: str | None = context_option(),
    request_timeout: str | None = request_timeout_option(),
) -> None:
    """List the jobs submitted with ddpctl (Job, PyTorchJob, JobSet, TrainJob), or the local runs (--on local)."""
    from ddpctl.backend.view import list_text
    from ddpctl.cluster.config import ClusterOptions
    from ddpctl.commands.where import backends, list_from, spec_choices

    say = lambda s: typer.echo(s, err=True)  # noqa: E731 - the one place both streams are named
    candidates = backends(on, ClusterOptions(kubeconfig, context, namespace, request_timeout), spec_choices())
    found = list_from(candidates, all_namespaces, say)
    typer.echo(
        list_text(
            found.jobs, output, all_namespaces=all_namespaces, empty=f"No ddpctl jobs found in {found.looked_in}."
        )
    )


def register(app: typer.Typer) -> None:
    app.command("list")(list_command)
