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
- `failurePolicy.maxRestarts` recreates every child Job (the whole group restarts together) when
  one fails; `failurePolicy.rules` (first match wins) match the failed child Job's reason and
  message: `FailJobSet`, or `RestartJobSetAndIgnoreMaxRestarts` for a restart that does not count.
  A child Job failed by its podFailurePolicy has reason `PodFailurePolicy` and a message ending
  `matching FailJob rule at index N` (Kubernetes' Job controller).
  https://jobset.sigs.k8s.io/docs/concepts/#failure-policy

Failures: each child Job (backoffLimit 0) fails at the first failed pod, with a FailJob rule for a
usage error (exit 2) and a straggler under --stragglers fail (202), and one for preemption
(DisruptionTarget, or exit 143: every rank stopped after a peer's SIGTERM); the JobSet fails at once
on the first and restarts without counting on the second. Anything else (a crash, a lost peer:
138, a stall: 200) restarts the JobSet up to maxRestarts. A lost peer is counted on purpose: which
pod of a child Job fails first is a race, and the root cause (an OOM kill, say) must not hide
behind its peers' 138 forever.

Pod recovery (`recovery: pod`): a replicatedJob `coordinator` (one pod, `<jobset>-coordinator-0-0`,
named by the JobSet's Service) holds the store the trainers meet in; each trainer child Job has
per-index limits (`backoffLimitPerIndex`, `maxFailedIndexes: 0`) and ignores a disruption, so a
lost pod is recreated alone inside its child Job and the JobSet's failure policy never fires for
it; the JobSet itself restarts nothing (`maxRestarts: 0`): a pod that used its limit, or a usage
error, fails it. The coordinator ends when the training has, so the success policy (All) holds.

Node groups: one replicatedJob per group (named after the group, replicas 1, completions = the
group's nodes); node rank = group offset + completion index (`NODE_RANK_LAUNCHER`). Without
groups the one replicatedJob is `node`, as Trainer v2's torch runtime names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpctl.engines.base import COORDINATOR, RESUBMIT, IndexedEngine, NodeCount, WorkloadKind
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.plan import Layout, Node
    from ddpctl.spec.model import NodeGroup

REPLICATED_JOB = "node"


class JobSetEngine(IndexedEngine):
    target = "jobset"
    title = "JobSet (jobset.x-k8s.io)"
    workload = WorkloadKind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", ("Completed",), ("Failed",))
    container_name = "trainer"
    kueue_framework = "jobset.x-k8s.io/jobset"
    # FailJob, so that the JobSet's rules can tell a preemption from a usage error by the rule's
    # index; a lost peer (138) is left to the default (counted): see the module docstring.
    on_disruption = "FailJob"
    peer_stop_codes = (protocol.EXIT_PREEMPTED,)
    # replicas x completions (else parallelism) of each replicatedJob
    node_count = NodeCount(
        ("spec", "replicatedJobs"),
        ((("replicas",),), (("template", "spec", "completions"), ("template", "spec", "parallelism"))),
        skip=(COORDINATOR,),
    )

    pod_recovery_refused = None

    def coordinator_name(self, plan: Layout) -> str:
        return f"{plan.spec.name}-{COORDINATOR}-0-0"  # the pod's hostname: <jobset>-<replicatedJob>-0-0

    def coordinator_host(self, plan: Layout) -> str:
        return f"{self.coordinator_name(plan)}.{plan.service_name}"

    def failure_policy(self, plan: Layout) -> dict[str, Any]:
        """The JobSet's failurePolicy: maxRestarts, plus rules where the child Jobs have them."""
        if plan.recovery == "pod":  # a lost pod is replaced inside its child Job: a failed child ends the set
            return {"maxRestarts": 0}
        policy: dict[str, Any] = {"maxRestarts": plan.spec.backoff_limit}
        child = self.pod_failure_policy(plan)
        if child is None:
            return policy
        usage = [str(i) for i, rule in enumerate(child["rules"]) if _is_usage_rule(rule)]
        preempted = [str(i) for i, rule in enumerate(child["rules"]) if not _is_usage_rule(rule)]
        # the FailJob rule on a usage error takes a straggler's 202 too where the launcher runs
        stragglers = any(protocol.EXIT_STRAGGLER in _codes(rule) for rule in child["rules"])

        def at_index(indexes: list[str]) -> list[str]:
            return [f"matching FailJob rule at index ({'|'.join(indexes)})$"]

        # The usage-error rule comes first: a JobSet older than v0.10 drops onJobFailureMessagePatterns
        # (it has no such field), and then the first rule takes every PodFailurePolicy failure. Failing
        # a preempted JobSet is safe there; restarting a usage error for free would never end.
        rules: list[dict[str, Any]] = []
        if usage:
            rules.append(
                {
                    "name": "UsageErrorOrStraggler" if stragglers else "UsageError",
                    "action": "FailJobSet",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                    "onJobFailureMessagePatterns": at_index(usage),
                }
            )
        rules.append(
            {
                "name": "Preempted",
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": at_index(preempted),
            }
        )
        policy["rules"] = rules
        return policy

    def template_values(self, plan: Layout, group_views: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return {
            "pod_failure_policy": self.pod_failure_policy(plan),
            "failure_policy": self.failure_policy(plan),
            "per_index": plan.recovery == "pod",
            "coordinator_rjob": COORDINATOR,
        }

    def failure_handling(self, plan: Layout) -> str:
        limit = f"failurePolicy.maxRestarts {plan.spec.backoff_limit}"
        if plan.recovery == "pod":
            return (
                f"a usage error (exit 2) or a straggler under --stragglers fail ({protocol.EXIT_STRAGGLER}) fails the "
                "JobSet at once; any other failed pod is replaced alone inside its child Job, keeping its index, "
                f"while the others run on and hand it their state (backoffLimitPerIndex {plan.spec.backoff_limit}; "
                "maxFailedIndexes 0 and failurePolicy.maxRestarts 0: the JobSet fails once a pod has failed that "
                "often); a preempted or evicted pod (DisruptionTarget) is replaced without counting"
            )
        if not self.failure_rules_apply(plan):
            return (
                f"restartPolicy {self.pod_restart_policy(plan)}: containers restart in place; a failed child Job "
                f"restarts the whole set, up to {limit}"
            )
        usage = (
            f"a usage error (exit 2) or a straggler under --stragglers fail ({protocol.EXIT_STRAGGLER}) fails the "
            "JobSet at once; "
            if plan.uses_launcher
            else "a workspace that cannot be unpacked (exit 2) fails the JobSet at once; "
            if plan.ships_workspace
            else ""
        )
        stopped = " and the peers that stopped with it (143)" if plan.uses_launcher else ""
        return (
            f"{usage}a preempted or evicted pod (DisruptionTarget){stopped} restart the whole set without counting; "
            f"any other failure restarts the whole set, up to {limit}, and it resumes from the last checkpoint"
        )

    def preflight_failure(self, plan: Layout) -> str:
        return (
            f"the whole JobSet restarts, up to failurePolicy.maxRestarts {plan.spec.backoff_limit}; its new pods "
            "may land on other nodes (--avoid-node keeps them off the one named)"
        )

    def straggler_failure(self, plan: Layout) -> str:
        if not (plan.uses_launcher and self.failure_rules_apply(plan)):
            return super().straggler_failure(plan)
        return (
            f"the child Job fails by its FailJob rule on {protocol.EXIT_STRAGGLER}, and the JobSet fails at once "
            "(no restart, whatever failurePolicy.maxRestarts is left); " + RESUBMIT
        )

    def replicated_job_name(self, plan: Layout, group: NodeGroup) -> str:
        return group.name if plan.spec.node_groups else REPLICATED_JOB

    def pod_hostname(self, plan: Layout, node: Node) -> str:
        return f"{plan.spec.name}-{self.replicated_job_name(plan, node.group)}-0-{node.index}"

    def dns_names(self, plan: Layout, node: Node) -> tuple[str, ...]:
        host = self.pod_hostname(plan, node)
        return (host, f"{host}.{plan.spec.name}")


def _codes(rule: dict[str, Any]) -> list[int]:
    return list((rule.get("onExitCodes") or {}).get("values", []))


def _is_usage_rule(rule: dict[str, Any]) -> bool:
    """The child Jobs' FailJob rule on the codes that fail the job at once (a usage error, and a
    straggler where the launcher runs): one rule, so its index stays what the JobSet rule matches."""
    return protocol.EXIT_USAGE in _codes(rule)


ENGINE = JobSetEngine()
