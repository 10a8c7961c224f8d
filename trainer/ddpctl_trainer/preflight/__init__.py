"""Preflight checks: is every node of this job as fast as its peers, before the first step?

Measured on every rank, gathered and judged identically on every rank, reported by rank 0: a GEMM
(GFLOP/s on CPU, bf16 TFLOP/s on GPU), the all-reduce's bus bandwidth over the whole job and, with
3 nodes or more, over pairs of nodes (to tell a slow node from a slow link), on GPU the
host-to-device copy and the transport NCCL chose against the fabric the job asked for. A node,
rank or link below ``tolerance x`` the median, or below a floor, is named with its node rank, pod
and Kubernetes node (docs/preflight.md).

* Inside the trainer (after the process group is up, before the first step):
  ``run_and_report(ctx, device, backend, config)``; with NCCL, call ``nccl.prepare_capture()``
  before the process group exists, so NCCL writes the lines the transport check reads.
* Standalone: ``python -m ddpctl_trainer.preflight [flags]`` under torchrun or the launcher.

This module imports no torch: ``config`` (the flags) is torch-free; ``run_checks`` imports the
measuring code when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import TrainerError
from ..protocol import EXIT_PREFLIGHT
from .config import PreflightConfig, add_flags, from_values
from .report import Report

if TYPE_CHECKING:
    import torch

    from ..dist import DistContext


class PreflightFailed(TrainerError):
    """``--preflight fail`` and a finding: the job stops before its first step."""

    exit_code = EXIT_PREFLIGHT


def run_checks(ctx: DistContext, device: torch.device, backend: str, config: PreflightConfig) -> Report:
    """Measure, gather and judge; every rank of the job calls it, and gets the same report."""
    from .checks import run_checks as run

    return run(ctx, device, backend, config)


def run_and_report(ctx: DistContext, device: torch.device, backend: str, config: PreflightConfig) -> Report:
    """``run_checks``, then rank 0 prints the report (and writes its JSON when asked); raises
    ``PreflightFailed`` (exit ``EXIT_PREFLIGHT``) on every rank when it failed, once rank 0's report
    is out: torchrun stops a node's other workers at the first exit, and rank 0, which has the most
    to write, would otherwise be stopped before its report by a peer that left first."""
    from ..dist import barrier

    report = run_checks(ctx, device, backend, config)
    if ctx.is_main:
        report.print(ctx.rank)
        if config.json_path:
            report.write_json(config.json_path)
    if report.failed:
        barrier()
        raise PreflightFailed(failure_message(report))
    return report


def failure_message(report: Report) -> str:
    """The error line of a failed preflight: the first finding, and how many more."""
    first = report.findings[0].text
    more = f" (and {len(report.findings) - 1} more finding(s))" if len(report.findings) > 1 else ""
    return f"preflight failed: {first}{more}; the report is in rank 0's log"


__all__ = [
    "PreflightConfig",
    "PreflightFailed",
    "Report",
    "add_flags",
    "failure_message",
    "from_values",
    "run_and_report",
    "run_checks",
]
