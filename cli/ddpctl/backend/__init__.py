"""Where a job runs: one `Backend` interface, implemented for a Kubernetes cluster
(`ddpctl.cluster.kube_backend`), local processes and Docker containers (`ddpctl.runners.machine_backends`).

A command picks a backend (`ddpctl.commands.where`) and calls it: start a job, show what a start
would do, and find a job again by name to show its status and logs, list or delete it. Every
backend answers `status` with the same `JobStatus`, which one view prints (`ddpctl.backend.view`),
so a job says the same things wherever it runs, rank 0's progress included.
"""

from ddpctl.backend.base import Backend, JobStatus, JobSummary, Listing, LogOptions, NodeRow, Where

__all__ = ["Backend", "JobStatus", "JobSummary", "Listing", "LogOptions", "NodeRow", "Where"]
