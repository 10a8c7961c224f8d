"""`ddpctl status NAME`: the job's state, its nodes by node rank, why a node fails or waits, and
rank 0's progress, wherever the job runs (a cluster, ./ddp-runs)."""

from __future__ import annotations

import typer

from ddpctl.backend import Where
from ddpctl.cluster.flags import (
    Format,
    context_option,
    kubeconfig_option,
    namespace_option,
    request_timeout_option,
    timeout_option,
)
from ddpctl.commands.where import on_option


def status_command(
    name: str | None = typer.Argument(None, help="Job name (default: the name in ./ddp.yaml).", show_default=False),
    on: Where | None = on_option(),
    namespace: str | None = namespace_option(),
    kubeconfig: str | None = kubeconfig_option(),
    context: str | None = context_option(),
    request_timeout: str | None = request_timeout_option(),
    output: Format | None = typer.Option(None, "--output", "-o", help="yaml or json instead of the summary."),
    wait: bool = typer.Option(
        False, "--wait", "-w", help="Wait until the job finishes; exit 0 on success, 1 on failure."
    ),
    timeout: str | None = timeout_option(),
) -> None:
    """Show a job's state: one row per node (NODE: the node rank), restarts, why nodes fail or wait, rank 0's progress.

    A job run here with `ddpctl run` (./ddp-runs/NAME) is shown with --on local, or when no cluster has it."""
    from ddpctl.backend.view import machine, status_text
    from ddpctl.cluster.config import ClusterOptions
    from ddpctl.cluster.flags import parse_duration
    from ddpctl.commands.where import ask, backends, job_name, spec_choices

    spec = spec_choices()
    name = job_name(name, spec)
    say = lambda s: typer.echo(s, err=True)  # noqa: E731 - the one place both streams are named
    candidates = backends(on, ClusterOptions(kubeconfig, context, namespace, request_timeout), spec)
    if wait:
        seconds = parse_duration(timeout)
        ask(name, candidates, lambda b: b.wait(name, seconds, say), say)
        return
    status = ask(name, candidates, lambda b: b.status(name), say)
    if output is not None:
        typer.echo(machine(status.as_dict(), output is Format.json))
        return
    for line in status_text(status):
        typer.echo(line)


def register(app: typer.Typer) -> None:
    app.command("status")(status_command)
