"""Kubeflow Training Operator v1: PyTorchJob (kubeflow.org/v1) (target `pytorchjob`).

Contract (Training Operator documentation and its env setup, in our words):
- `plan.spec.pytorchReplicaSpecs` has a `Master` (exactly 1 replica) and `Worker` replicas, each with
  its own pod template; the training container must be named `pytorch`. Pods, and one Service per
  pod, are named `<job>-master-0` and `<job>-worker-<i>`, so a pod's DNS name is its hostname.
  https://www.kubeflow.org/docs/components/trainer/legacy-v1/user-guides/pytorch/
- The operator injects, after the template's own env (a later duplicate wins, so a template
  cannot override them): MASTER_ADDR = PET_MASTER_ADDR = `<job>-master-0`, MASTER_PORT =
  PET_MASTER_PORT = the container port named `pytorchjob-port`, RANK = PET_NODE_RANK = the node
  index (master 0, worker i -> i+1), PET_NNODES, PET_NPROC_PER_NODE = the job-wide
  `plan.spec.nprocPerNode`, WORLD_SIZE = replicas x nprocPerNode, PYTHONUNBUFFERED=1.
  https://github.com/kubeflow/training-operator/blob/master/pkg/controller.v1/pytorch/envvar.go
- Elastic jobs (`elasticPolicy`) have Workers only and get PET_RDZV_ENDPOINT = `<job>-worker-0:<port>`,
  PET_RDZV_BACKEND, PET_NNODES = MIN:MAX and PET_MAX_RESTARTS instead of MASTER_*/RANK/WORLD_SIZE.
- Per-replica `restartPolicy`: Never, OnFailure (the kubelet restarts the container in place),
  or ExitCode: the pod gets restartPolicy Never and the operator recreates a failed pod when its
  exit code is retryable (130, 137, 143, and 138, which Kubeflow reserves for a user's
  "retryable" error), else fails the job (kubeflow/common pkg/util/train IsRetryableExitCode).
  `runPolicy.backoffLimit` bounds OnFailure restarts (container restart counts) but not ExitCode
  ones, which recreate pods (kubeflow/trainer#2045): only activeDeadlineSeconds bounds those.

Failures: with ddpctl's launcher in the pods (the ddpctl trainer) the default is ExitCode: a
preempted node (143, after a checkpoint; its peers stop at the same step with 143), a killed one
(137) and a node that lost its peer (138) are recreated; a usage error (2), a crash (1), a stall
(200) and a straggler under --stragglers fail (202) fail the job. Each failed pod is recreated, and
every pod fails when one does, so the whole group meets again.

Node groups: the two templates are the two shapes it can express: Master = the first group when
that group is one node, Worker = the second group. As PET_NPROC_PER_NODE comes from the job-wide
nprocPerNode (injected last), each template's process count goes on torchrun's command line
(`--nproc-per-node`, which beats the env); torchrun sums the nodes' process counts into
WORLD_SIZE for the workers, whatever the operator's WORLD_SIZE says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpctl.engines.base import RESUBMIT, Engine, NodeCount, WorkloadKind
from ddpctl.errors import SpecError
from ddpctl.plan import NEVER, RetryRule
from ddpctl.spec import kueue
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.plan import Layout, Node
    from ddpctl.spec.model import NodeGroup

REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"


class PyTorchJobEngine(Engine):
    target = "pytorchjob"
    title = "Kubeflow PyTorchJob (training operator v1)"
    pod_recovery_refused = (
        "the training operator recreates a failed pod by its own restart rules and gives every pod torchrun's "
        "job-wide settings (PET_NNODES, MASTER_ADDR) itself, which a pod that runs its node alone cannot take "
        "(not built yet)"
    )
    workload = WorkloadKind(
        "PyTorchJob",
        "kubeflow.org",
        "v1",
        "pytorchjobs",
        "the Kubeflow Training Operator v1",
        ("Succeeded",),
        ("Failed",),
    )
    container_name = "pytorch"
    kueue_framework = "kubeflow.org/pytorchjob"
    suspend_field = ("spec", "runPolicy", "suspend")
    node_count = NodeCount(("spec", "pytorchReplicaSpecs"), ((("replicas",),),), keys=("Master", "Worker"))
    index_label = REPLICA_INDEX
    role_label = REPLICA_TYPE  # master, else worker
    lead_replica = ("spec", "pytorchReplicaSpecs", "Master")  # master 0, worker i -> i+1 (i without a Master)
    kueue_note = (
        "Kueue deprecates its PyTorchJob integration and leaves it off by default from v0.19: the cluster's Kueue "
        "must list kubeflow.org/pytorchjob in integrations.frameworks (else the job runs unqueued); "
        "--target trainjob is Kueue's path for new jobs"
    )
    port_name = "pytorchjob-port"
    replica_types = ("master", "worker")

    def pod_restart_policy(self, plan: Layout) -> str:
        """ExitCode where the launcher's exit codes say what a restart can cure, else Never."""
        return plan.spec.restart_policy or ("ExitCode" if plan.uses_launcher else "Never")

    def added_container_hint(self, container: str) -> str | None:
        if container != "init-pytorch":
            return None
        return (
            "init-pytorch is the init container the training operator adds to every worker, and its built-in "
            "one sets no securityContext; give the operator a template that does "
            "(--pytorch-init-container-template-file, see docs/engines.md, PyTorchJob and Pod Security), "
            "or use --target jobset or job"
        )

    def check_restart_policy(self, plan: Layout) -> None:
        """Every policy is the operator's to apply."""

    def restart_limit(self, plan: Layout) -> int:
        """The operator restarts failed replicas under restartPolicy OnFailure and ExitCode (the
        latter without a limit but activeDeadlineSeconds: a local run stops at backoffLimit)."""
        return plan.spec.backoff_limit if self.pod_restart_policy(plan) in ("OnFailure", "ExitCode") else 0

    def retry_rule(self, plan: Layout) -> RetryRule:
        policy = self.pod_restart_policy(plan)
        if policy == "ExitCode":
            return RetryRule(only=frozenset(protocol.KUBEFLOW_RETRYABLE))
        return RetryRule() if policy == "OnFailure" else NEVER

    def failure_handling(self, plan: Layout) -> str:
        policy, limit = self.pod_restart_policy(plan), f"runPolicy.backoffLimit {plan.spec.backoff_limit}"
        if policy == "ExitCode":
            bound = (
                f"activeDeadlineSeconds {plan.spec.active_deadline_seconds} bounds them"
                if plan.spec.active_deadline_seconds
                else "set activeDeadlineSeconds (--deadline) to bound them"
            )
            return (
                "restartPolicy ExitCode: the operator recreates a pod that was preempted (143, checkpoint written), "
                "killed (137) or lost a peer (138); a usage error (2), a crash (1), a stall (200), a failed "
                f"preflight (201) or a straggler under --stragglers fail ({protocol.EXIT_STRAGGLER}) fails the job. "
                "The operator does not count these restarts against runPolicy.backoffLimit (kubeflow/trainer#2045): "
                f"{bound} (run --local stops after backoffLimit {plan.spec.backoff_limit})"
            )
        if policy == "OnFailure":
            return (
                f"restartPolicy OnFailure: the kubelet restarts a failed container in place (any code), up to {limit}"
            )
        return "restartPolicy Never: a failed pod fails the job (set restartPolicy OnFailure to retry)"

    def preflight_failure(self, plan: Layout) -> str:
        if self.pod_restart_policy(plan) == "ExitCode":
            retried = ", ".join(map(str, protocol.KUBEFLOW_RETRYABLE))
            return (
                f"the job fails: restartPolicy ExitCode recreates pods only for {retried} (Kubeflow's rule); "
                "submit again with --avoid-node NAME"
            )
        return super().preflight_failure(plan)

    def straggler_failure(self, plan: Layout) -> str:
        if plan.uses_launcher and self.pod_restart_policy(plan) == "ExitCode":
            retried = ", ".join(map(str, protocol.KUBEFLOW_RETRYABLE))
            return (
                f"the job fails at once: restartPolicy ExitCode recreates pods only for {retried} "
                f"(Kubeflow's rule), and {protocol.EXIT_STRAGGLER} is permanent; {RESUBMIT}"
            )
        return super().straggler_failure(plan)

    def can(self, feature: str) -> bool:
        return feature != "groups"  # only some group shapes: see check()

    def check(self, plan: Layout) -> None:
        super().check(plan)
        groups = plan.spec.node_groups
        if len(groups) > 2 or (len(groups) == 2 and groups[0].nodes != 1):
            raise SpecError(
                "nodeGroups",
                "the pytorchjob target has two templates, Master (1 node) and Worker: it runs one group, "
                "or a first group of 1 node and a second group",
                "use target job or jobset for this layout",
            )
        for i, group in enumerate(plan.spec.groups):
            if plan.spec.topology_of(group).slice_level:
                raise SpecError(
                    f"nodeGroups[{i}].topology.sliceLevel" if group.topology is not None else "topology.sliceLevel",
                    "a PyTorchJob's Master (1 pod) and Worker are two Kueue PodSets, which slices cannot span",
                    "use target job, jobset or trainjob for slices, or drop sliceLevel and sliceSize",
                )

    def podset_group(self, plan: Layout) -> str | None:
        """Kueue places Master and Worker as one (podset-group-name) when both ask for the same
        required or preferred level: else rank 0 could land in another rack than the workers."""
        specs = self.replica_specs(plan)
        if len(specs) != 2:
            return None
        first, second = (plan.spec.topology_of(g) for _, _, g in specs)
        return plan.spec.name if first == second and first.level else None

    def replica_specs(self, plan: Layout) -> list[tuple[str, int, NodeGroup]]:
        """(replica type, replicas, the group whose pods it makes), Master first."""
        groups = plan.spec.groups
        if plan.spec.elastic:
            return [("Worker", plan.replicas, groups[0])]
        if len(groups) == 2:
            return [("Master", 1, groups[0]), ("Worker", groups[1].nodes, groups[1])]
        out = [("Master", 1, groups[0])]
        if plan.replicas > 1:
            out.append(("Worker", plan.replicas - 1, groups[0]))
        return out

    def template_values(self, plan: Layout, group_views: dict[str, dict[str, Any]]) -> dict[str, Any]:
        podset_group = self.podset_group(plan)
        pods = []
        for _, _, group in self.replica_specs(plan):
            pod = group_views[group.name]
            if podset_group:
                grouped = {**pod["pod_annotations"], kueue.PODSET_GROUP_NAME: podset_group}
                pod = {**pod, "pod_annotations": dict(sorted(grouped.items()))}
            pods.append(pod)
        return {
            "replica_specs": [
                {"type": rtype, "replicas": count, "pod": pod}
                for (rtype, count, _), pod in zip(self.replica_specs(plan), pods)
            ],
            "nproc_text": str(self.nproc_per_node_field(plan)),  # nprocPerNode is a string
        }

    def pod_hostname(self, plan: Layout, node: Node) -> str:
        if plan.spec.elastic:
            return f"{plan.spec.name}-worker-{node.rank}"
        return f"{plan.spec.name}-master-0" if node.rank == 0 else f"{plan.spec.name}-worker-{node.rank - 1}"

    def dns_names(self, plan: Layout, node: Node) -> tuple[str, ...]:
        return (self.pod_hostname(plan, node),)  # one Service per replica, named like the pod

    def node_rank_source(self, plan: Layout) -> str:
        if plan.rdzv_mode == "c10d":
            return "the c10d rendezvous, in the order nodes join"
        return "the training operator (PET_NODE_RANK: master 0, worker i -> i+1)"

    def torchrun_env(self, plan: Layout, group: NodeGroup) -> dict[str, str]:
        # The operator sets the rest, and PET_MAX_RESTARTS itself for elastic jobs.
        return {} if plan.spec.elastic else {"PET_MAX_RESTARTS": str(plan.spec.rendezvous.max_restarts)}

    def entrypoint(self, plan: Layout, group: NodeGroup) -> tuple[str, ...]:
        entry = plan.entrypoint
        if not plan.spec.node_groups:
            return entry
        for launcher in (plan.launcher, ("torchrun",)):  # a user command may be torchrun too
            if entry[: len(launcher)] == launcher:
                return (*launcher, "--nproc-per-node", str(group.nproc), *entry[len(launcher) :])
        return entry

    def nproc_per_node_field(self, plan: Layout) -> int:
        """`plan.spec.nprocPerNode`: the first group's count (per-template counts are on the command line)."""
        return plan.spec.groups[0].nproc

    def injected_env(self, plan: Layout, node: Node) -> dict[str, str]:
        nproc = self.nproc_per_node_field(plan)
        env = {"PYTHONUNBUFFERED": "1", "PET_NPROC_PER_NODE": str(nproc)}
        if plan.spec.elastic:
            env.update(PET_RDZV_BACKEND="c10d", PET_RDZV_ENDPOINT=self.rdzv_endpoint(plan), PET_NNODES=plan.nnodes)
            return env
        port, rank, master = str(self.master_port(plan)), str(node.rank), self.rank0_host(plan)
        env.update(
            MASTER_ADDR=master,
            PET_MASTER_ADDR=master,
            MASTER_PORT=port,
            PET_MASTER_PORT=port,
            WORLD_SIZE=str(plan.replicas * nproc),
            RANK=rank,
            PET_NODE_RANK=rank,
            PET_NNODES=str(plan.spec.nodes),
        )
        return env


ENGINE = PyTorchJobEngine()
