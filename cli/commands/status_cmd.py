"""`ddpctl status NAME`: the job's state, its pods by node rank and why a node fails or waits."""

from __future__ import annotations

import typer
from ddpctl.cluster.flags import (
    Format,
    context_option,
    kubeconfig_option,
    namespace_option,
    request_timeout_option,
    timeout_option,
)


def status_command(
    name: str | None = typer.Argument(None, help="Job name (default: the name in ./ddp.yaml).", show_default=False),
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
    """Show a job's state: one pod per node (NODE: the node rank, the pod's index), restarts, why nodes fail or wait.

    A job run here with `ddpctl run --local` (./ddp-runs/NAME) is shown when no cluster has it."""
    from ddpctl.cluster.config import ClusterOptions
    from ddpctl.cluster.operate import status
    from ddpctl.errors import ClusterError
    from ddpctl.runners.local import find_local_run, job_name, local_status, read_run_record

    name = job_name(name)
    local = find_local_run(name)
    try:
        status(
            name,
            options=ClusterOptions(kubeconfig, context, namespace, request_timeout),
            output=output,
            wait=wait,
            timeout=timeout,
            out=typer.echo,
            say=lambda s: typer.echo(s, err=True),
        )
    except ClusterError:
        if local is None:
            raise
        if output is not None:
            import json

            import yaml

            record = read_run_record(local)
            typer.echo(json.dumps(record, indent=2) if output.value == "json" else yaml.safe_dump(record).rstrip())
        else:
            for line in local_status(local):
                typer.echo(line)
        if wait:
            typer.echo("ddpctl: --wait: a local run ends with its ddpctl run command; not waiting", err=True)


def register(app: typer.Typer) -> None:
    app.command("status")(status_command)
