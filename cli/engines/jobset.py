"""JobSet (jobset.x-k8s.io/v1alpha2): replicated Indexed Jobs and their headless Service (target `jobset`).

Contract (JobSet documentation, in our words):
- A JobSet runs, for each `replicatedJobs[]` entry, `replicas` child Indexed Jobs named
  `<jobset>-<replicatedJob>-<jobIndex>`; pod hostnames are `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`.
  https://jobset.sigs.k8s.io/docs/concepts/
- With `network.enableDNSHostnames` the controller makes a headless Service named `network.subdomain`
  (default: the JobSet's name), so pods resolve as `<hostname>.<subdomain>`;
  `publishNotReadyAddresses` gives them DNS before they are ready.
- Each child Job's pods carry their own completion index (annotation/label
  `batch.kubernetes.io/job-completion-index`, env JOB_COMPLETION_INDEX), starting at 0 per Job.
- Nothing is injected for torchrun: we set PET_* ourselves, as for the plain Indexed Job.
- `failurePolicy.maxRestarts` recreates every child Job (the whole group restarts together).

Node groups: one replicatedJob per group (named after the group, replicas 1, completions = the
group's nodes); node rank = group offset + completion index (`NODE_RANK_LAUNCHER`). Without
groups the one replicatedJob is `node`, as Trainer v2's torch runtime names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpctl.engines.base import IndexedEngine, WorkloadKind, _int

if TYPE_CHECKING:
    from ddpctl.spec import JobSpec, Node, NodeGroup

REPLICATED_JOB = "node"


class JobSetEngine(IndexedEngine):
    target = "jobset"
    title = "JobSet (jobset.x-k8s.io)"
    workload = WorkloadKind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", ("Completed",), ("Failed",))
    container_name = "trainer"
    restart_semantics = "a failed child Job restarts the whole set, up to failurePolicy.maxRestarts"

    def replicated_job_name(self, spec: JobSpec, group: NodeGroup) -> str:
        return group.name if spec.node_groups else REPLICATED_JOB

    def pod_hostname(self, spec: JobSpec, node: Node) -> str:
        return f"{spec.name}-{self.replicated_job_name(spec, node.group)}-0-{node.index}"

    def dns_names(self, spec: JobSpec, node: Node) -> tuple[str, ...]:
        host = self.pod_hostname(spec, node)
        return (host, f"{host}.{spec.name}")

    def expected_nodes(self, job: dict[str, Any]) -> int | None:
        total = 0
        for rj in (job.get("spec") or {}).get("replicatedJobs") or []:
            jspec = (rj.get("template") or {}).get("spec") or {}
            total += (_int(rj.get("replicas", 1)) or 0) * (
                _int(jspec.get("completions", jspec.get("parallelism", 1))) or 0
            )
        return total


ENGINE = JobSetEngine()
