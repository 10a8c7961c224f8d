"""Plain Kubernetes: a headless Service plus Indexed Job(s) running torchrun (target `job`).

Contract (Kubernetes documentation, in our words):
- An Indexed Job (`completionMode: Indexed`) gives each pod a completion index 0..completions-1,
  as the annotation and label `batch.kubernetes.io/job-completion-index` and the env variable
  `JOB_COMPLETION_INDEX`; its pod hostname is `<job>-<index>`.
  https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode
- With `plan.spec.subdomain: <svc>` and a headless Service of that name (`clusterIP: None`) selecting
  the pods, a pod resolves as `<hostname>.<svc>`; `publishNotReadyAddresses` makes the name exist
  before the pod is ready, so workers can reach rank 0 while it starts.
  https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/#pod-s-hostname-and-subdomain-fields
- Nothing is injected for torchrun: we set every PET_* variable ourselves (torchrun reads
  `PET_<OPTION>` as the default of each option), and PET_NODE_RANK from the completion index
  through the downward API. https://pytorch.org/docs/stable/elastic/run.html
- `podReplacementPolicy: Failed` keeps two pods of one index from running at once; `backoffLimit`
  counts failed pods; `podFailurePolicy` (restartPolicy Never only) decides per failed pod, first
  matching rule wins: FailJob ends the Job at once, Ignore replaces the pod without counting it,
  a pod with condition DisruptionTarget was preempted, evicted or lost with its node.
  https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy

Failures: a usage error (exit 2) and a straggler under --stragglers fail (202) fail the Job; a
preempted pod, and the peers that stopped with it (exit 143) or lost it (exit 138), are replaced
without counting; any other failed pod counts. A failed pod's peers fail too (their collectives
break at once, or the stall watchdog ends them), so every index is recreated and the whole group
meets again at a fresh rendezvous (a lone replacement could not join a static rendezvous whose
other members still run).

Pod recovery (`recovery: pod`): each pod's torchrun runs its node alone (`--standalone`) and the
trainer forms the global group through a coordinator, a Job of one pod of its own (`<job>-coordinator`,
hostname and subdomain so that the headless Service names it) that outlives any trainer pod.
`backoffLimitPerIndex` (the spec's backoffLimit) replaces a failed pod alone, keeping its index,
while the others run on; `maxFailedIndexes: 0` fails the Job once one index has used its limit.
The podFailurePolicy keeps its FailJob rule and ignores disruptions and the whole job's
preemption (143: every pod stopped after the same step).

Node groups: one headless Service for all of them and one Indexed Job per group, named
`<job>-<group>` (pods `<job>-<group>-<index>`); a pod's node rank is its group's offset (the nodes
of the groups before it) plus its completion index, computed by `NODE_RANK_LAUNCHER`; each group's
PET_NPROC_PER_NODE and GPU limit is its own process count. Rank 0 is the first group's pod 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpctl.engines.base import COORDINATOR, RESUBMIT, IndexedEngine, NodeCount, WorkloadKind
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.plan import Layout, Node
    from ddpctl.spec.model import NodeGroup


class JobEngine(IndexedEngine):
    target = "job"
    title = "Indexed Job + headless Service (no operator needed)"
    workload = WorkloadKind("Job", "batch", "v1", "jobs", "Kubernetes (batch/v1)", ("Complete",), ("Failed",))
    container_name = "trainer"
    kueue_framework = "batch/job"
    builtin = True
    on_disruption = "Ignore"  # replaced without counting; only the pod with the cause counts
    peer_stop_codes = protocol.CAUSED_BY_A_PEER
    node_count = NodeCount(("spec", "completions"))  # with node groups, one Job per group: PET_NNODES
    pod_recovery_refused = None

    def coordinator_name(self, plan: Layout) -> str:
        return f"{plan.spec.name}-{COORDINATOR}"

    def coordinator_host(self, plan: Layout) -> str:
        return f"{self.coordinator_name(plan)}.{plan.service_name}"

    def template_values(self, plan: Layout, group_views: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return {"pod_failure_policy": self.pod_failure_policy(plan), "per_index": plan.recovery == "pod"}

    def failure_handling(self, plan: Layout) -> str:
        limit = f"backoffLimit {plan.spec.backoff_limit}"
        if plan.recovery == "pod":
            return (
                f"a usage error (exit 2) or a straggler under --stragglers fail ({protocol.EXIT_STRAGGLER}) fails the "
                "Job at once; any other failed pod is replaced alone, keeping its index, while the others run on and "
                f"hand it their state (backoffLimitPerIndex {plan.spec.backoff_limit}; maxFailedIndexes 0: the Job "
                "fails once a pod has failed that often); a preempted or evicted pod (DisruptionTarget) is replaced "
                "without counting"
            )
        if not self.failure_rules_apply(plan):
            return (
                f"restartPolicy {self.pod_restart_policy(plan)}: the kubelet restarts a failed container in place "
                f"(any exit code, usage errors too), counted against {limit}; no podFailurePolicy "
                "(Kubernetes allows it only with restartPolicy Never)"
            )
        if not plan.uses_launcher:
            unpack = (
                "a workspace that cannot be unpacked (exit 2) fails the Job at once; " if plan.ships_workspace else ""
            )
            return (
                f"{unpack}a preempted or evicted pod (DisruptionTarget) is replaced without counting; any other "
                f"failed pod counts against {limit} (plain torchrun exits 1 for every failure, so a usage error is "
                "retried too)"
            )
        return (
            f"a usage error (exit 2) or a straggler under --stragglers fail ({protocol.EXIT_STRAGGLER}) fails the Job "
            "at once; a preempted or evicted pod (DisruptionTarget) and the "
            "peers that stopped with it (143) or lost it (138) are replaced without counting; any other failed pod "
            f"counts against {limit} (failed pods, not restarts: a stall fails every pod). A pod's failure fails "
            "its peers, so every pod is recreated and the whole group resumes from the last checkpoint"
        )

    def preflight_failure(self, plan: Layout) -> str:
        if not self.failure_rules_apply(plan):
            return super().preflight_failure(plan)
        return (
            f"every pod fails, and each counts against backoffLimit {plan.spec.backoff_limit}; the Job recreates "
            "them, and new pods may land on other nodes (--avoid-node keeps them off the one named)"
        )

    def straggler_failure(self, plan: Layout) -> str:
        if not (plan.uses_launcher and self.failure_rules_apply(plan)):
            return super().straggler_failure(plan)
        return (
            f"the Job fails at once by its podFailurePolicy's FailJob rule on {protocol.EXIT_STRAGGLER} (no retry, "
            f"whatever backoffLimit is left); {RESUBMIT}"
        )

    def workload_name(self, plan: Layout, group: NodeGroup) -> str:
        return f"{plan.spec.name}-{group.name}" if plan.spec.node_groups else plan.spec.name

    def pod_hostname(self, plan: Layout, node: Node) -> str:
        return f"{self.workload_name(plan, node.group)}-{node.index}"

    def dns_names(self, plan: Layout, node: Node) -> tuple[str, ...]:
        host = self.pod_hostname(plan, node)
        return (host, f"{host}.{plan.service_name}")

    def subdomain(self, plan: Layout) -> str:
        """The pods' `spec.subdomain`: the headless Service's name."""
        return plan.service_name


ENGINE = JobEngine()
