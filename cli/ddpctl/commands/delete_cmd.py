"""`ddpctl delete NAME`: every object of the job (foreground: its pods first), or a local run."""

from __future__ import annotations

import typer

from ddpctl.backend import Where
from ddpctl.cluster.flags import (
    context_option,
    kubeconfig_option,
    namespace_option,
    request_timeout_option,
    timeout_option,
)
from ddpctl.commands.where import on_option


def delete_command(
    names: list[str] | None = typer.Argument(
        None, help="Job name(s) (default: the name in ./ddp.yaml).", show_default=False
    ),
    on: Where | None = on_option(),
    namespace: str | None = namespace_option(),
    ignore_not_found: bool = typer.Option(False, "--ignore-not-found", help="No error when the job does not exist."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until the objects and their pods are gone."),
    timeout: str | None = timeout_option(),
    kubeconfig: str | None = kubeconfig_option(),
    context: str | None = context_option(),
    request_timeout: str | None = request_timeout_option(),
) -> None:
    """Delete a job: its workload, Service and (by foreground propagation) its pods; or a local run
    (stopped first when it still runs; its checkpoints stay)."""
    from ddpctl.cluster.config import ClusterOptions
    from ddpctl.cluster.flags import parse_duration
    from ddpctl.commands.where import ask, backends, job_name, spec_choices

    spec = spec_choices()
    chosen = list(names or []) or [job_name(None, spec)]
    seconds = parse_duration(timeout)
    say = lambda s: typer.echo(s, err=True)  # noqa: E731 - the one place both streams are named
    candidates = backends(on, ClusterOptions(kubeconfig, context, namespace, request_timeout), spec)
    ask(
        chosen[0],
        candidates,
        lambda b: b.delete(chosen, ignore_not_found=ignore_not_found, wait=wait, timeout=seconds, out=typer.echo),
        say,
    )


def register(app: typer.Typer) -> None:
    app.command("delete")(delete_command)
