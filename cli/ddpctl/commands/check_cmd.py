"""`ddpctl check`: the preflight checks as a job of their own, with the job's layout, engine and
placement (`ddpctl.spec.checkjob`): rank 0's report names a slow node, rank or link, or NCCL on
sockets where the job asked for a fast fabric. `--local` runs it here as `run --local` does;
otherwise it is submitted as `submit --follow` does, and deleted when it ends."""

from __future__ import annotations

from pathlib import Path

import typer

from ddpctl.cluster.flags import context_option, kubeconfig_option, request_timeout_option
from ddpctl.commands.options import spec_options
from ddpctl.spec.sources import SpecInput


def check_command(
    spec_input: SpecInput,
    local: bool = typer.Option(
        False, "--local", help="Run the check here, every node a torchrun agent (as run --local); else in the cluster."
    ),
    run_dir: Path | None = typer.Option(
        None, "--run-dir", help="With --local: where its logs go (default ./ddp-runs/NAME-check).", file_okay=False
    ),
    keep: bool = typer.Option(
        False, "--keep", help="Leave the check's job in the cluster when it ends (its pods' logs stay readable)."
    ),
    kubeconfig: str | None = kubeconfig_option(),
    context: str | None = context_option(),
    request_timeout: str | None = request_timeout_option(),
    timeout: str | None = typer.Option(
        None,
        "--timeout",
        help="Give up after this long (90s, 30m, 1h30m) and exit 3; the check's job is deleted all the same.",
        show_default=False,
    ),
) -> int:
    """Check every node before training: the preflight as a job of its own, in the job's layout and placement.

    The job <name>-check runs the trainer's checks alone (GEMM, all-reduce, on GPUs the host-to-device
    copy and NCCL's transport) and rank 0 prints the report; exit 0 when it passed (or --preflight warn)."""
    from ddpctl.commands.after_dash import refuse_ddpctl_flags_for_the_trainer
    from ddpctl.errors import UsageError
    from ddpctl.spec.checkjob import check_job

    if spec_input.flags.get("args"):
        raise UsageError(
            "ddpctl check runs no training, so it takes no trainer arguments after --; set the checks with "
            "--preflight, --preflight-tolerance and the spec's preflight floors"
        )
    refuse_ddpctl_flags_for_the_trainer(spec_input.spec())
    checks = spec_input.deriving(check_job)  # the same reading of ddp.yaml and the environment
    if local:
        if keep or kubeconfig or context:
            used = "--keep" if keep else "--kubeconfig" if kubeconfig else "--context"
            raise UsageError(f"{used} is for a check in the cluster; drop it, or drop --local")
        return _local(checks, run_dir, timeout)
    if run_dir is not None:
        raise UsageError("--run-dir is for a check run here; add --local, or drop --run-dir")
    return _cluster(checks, keep, kubeconfig, context, request_timeout, timeout)


def _echo_err(text: str) -> None:
    typer.echo(text, err=True)


def _local(checks: SpecInput, run_dir: Path | None, timeout: str | None) -> int:
    """As `run --local`: every node a torchrun agent here; the run's record and logs in its run dir."""
    from ddpctl.cluster.flags import parse_duration
    from ddpctl.runners.machine_backends import LocalBackend, RunOptions

    backend = LocalBackend(RunOptions(run_dir=run_dir, timeout=parse_duration(timeout)))
    return backend.run(checks, typer.echo, _echo_err)


def _cluster(
    checks: SpecInput,
    keep: bool,
    kubeconfig: str | None,
    context: str | None,
    request_timeout: str | None,
    timeout: str | None,
) -> int:
    """As `submit --follow` (an earlier check of the name replaced), then the check's job deleted."""
    from ddpctl.cluster.config import ClusterOptions
    from ddpctl.cluster.flags import SubmitOptions
    from ddpctl.cluster.kube_backend import ClusterBackend
    from ddpctl.cluster.pods import FailedJob
    from ddpctl.errors import DdpctlError, RuntimeFailure

    echo_err = _echo_err

    submit = SubmitOptions(replace=True, wait=True, follow=True, timeout=timeout)
    backend = ClusterBackend(ClusterOptions(kubeconfig, context, None, request_timeout), submit)
    name = checks.spec(target="job").name  # the name does not depend on the target
    try:
        return backend.run(checks, typer.echo, echo_err)
    except FailedJob as exc:
        if keep:
            raise
        raise RuntimeFailure(
            f"{exc.what} (its report is above; the check's job is deleted: --keep leaves it)"
        ) from None
    finally:
        if not keep:
            namespace = checks.chosen().get("namespace")  # where submit put it: the spec's, else the context's
            cleanup = ClusterBackend(ClusterOptions(kubeconfig, context, namespace, request_timeout))
            try:
                cleanup.delete([name], ignore_not_found=True, wait=False, timeout=None, out=echo_err)
            except DdpctlError as exc:
                echo_err(f"ddpctl: warning: could not delete the check's job {name}: {exc}; `ddpctl delete {name}`")


def register(app: typer.Typer) -> None:
    app.command("check")(spec_options(check_command))  # wrapped here: only the command run pays for it
