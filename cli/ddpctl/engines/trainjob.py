"""Kubeflow Trainer v2: TrainJob (trainer.kubeflow.org/v1alpha1) on the `torch-distributed` runtime (target `trainjob`).

Contract (Kubeflow Trainer documentation, in our words):
- A TrainJob names a (Cluster)TrainingRuntime; `torch-distributed` runs a JobSet whose one
  replicatedJob is `node`, so pods are `<trainjob>-node-0-<index>` with the subdomain `<trainjob>`.
  https://www.kubeflow.org/docs/components/trainer/operator-guides/runtime/
- `plan.spec.trainer` gives image, command, args, env, numNodes, numProcPerNode (one value for every
  node) and resourcesPerNode; pod fields the trainer has no place for go in a runtime patch.
- The runtime injects only PET_*: PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (the completion
  index), PET_MASTER_ADDR = `<trainjob>-node-0-0.<trainjob>`, PET_MASTER_PORT = 29500.
  https://www.kubeflow.org/docs/components/trainer/user-guides/pytorch/
- No elastic policy, and the runtime decides image pull policy, restart policy, retries and TTL.

Node groups: refused beyond one group -- Trainer v2 has a single numProcPerNode for all nodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpctl.engines.base import Engine, NodeCount, WorkloadKind
from ddpctl.errors import SpecError
from ddpctl.plan import NEVER, RetryRule
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.plan import Layout, Node
    from ddpctl.spec.model import NodeGroup

RUNTIME_PORT = 29500
REPLICATED_JOB = "node"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


class TrainJobEngine(Engine):
    target = "trainjob"
    title = "Kubeflow Trainer v2 TrainJob (torch-distributed runtime)"
    workload = WorkloadKind(
        "TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs", "Kubeflow Trainer v2", ("Complete",), ("Failed",)
    )
    container_name = "node"
    kueue_framework = "trainer.kubeflow.org/trainjob"
    left_to_engine = ("imagePullPolicy", "restartPolicy", "backoffLimit", "ttlSecondsAfterFinished")
    supports_elastic = False
    runtime = "torch-distributed"  # the ClusterTrainingRuntime it names in plan.spec.runtimeRef
    pod_recovery_refused = (
        "the runtime's JobSet template sets its child Jobs' failure limits and a TrainJob cannot override them; "
        "replacing one pod alone would take a ClusterTrainingRuntime of its own, with per-index limits and a "
        "coordinator"
    )
    # Trainer v2.3 reconciles a TrainJob that the foreground finalizer holds and creates its JobSet
    # again, so a foreground delete can take minutes; with the TrainJob gone nothing re-creates it
    delete_propagation = "Background"
    node_count = NodeCount(("spec", "trainer", "numNodes"))
    pods_labelled = (
        JOBSET_NAME  # its pods come from the runtime's template: they carry the JobSet's (= TrainJob's) name
    )

    def restart_limit(self, plan: Layout) -> int:
        """Restarts are the training runtime's to decide; a local run does not guess them."""
        return 0

    def retry_rule(self, plan: Layout) -> RetryRule:
        return NEVER

    def failure_handling(self, plan: Layout) -> str:
        return (
            f"decided by the {self.runtime} runtime, not per TrainJob: the JobSet it makes carries the runtime's "
            "failurePolicy and podFailurePolicy (the upstream runtime sets neither, nor a backoffLimit: Kubernetes' "
            "default of 6 replaces failed pods one at a time, which a static rendezvous cannot admit, then the "
            "job fails); a platform team can add the rules ddpctl renders for target jobset to the runtime"
        )

    def preflight_failure(self, plan: Layout) -> str:
        return f"the {self.runtime} runtime decides, as for any failed pod (the upstream runtime sets no retry rule)"

    def straggler_failure(self, plan: Layout) -> str:
        return (
            f"the {self.runtime} runtime decides, as for any failed pod: the upstream runtime has no rule on exit "
            f"codes, so its Job replaces failed pods (Kubernetes' default backoffLimit of 6) rather than end at once "
            f"on {protocol.EXIT_STRAGGLER}; a platform team can add the FailJob rule ddpctl renders for target jobset "
            f"(exit {', '.join(map(str, protocol.FAILS_THE_JOB))}) to the runtime"
        )

    def check(self, plan: Layout) -> None:
        other = "or use target job, jobset or pytorchjob"
        if plan.spec.elastic:
            raise SpecError(
                "nodes",
                "the trainjob target has no elastic policy (Trainer v2 runs a fixed node count)",
                "give a fixed count, or use target job, jobset or pytorchjob",
            )
        if len(plan.spec.node_groups) > 1:
            raise SpecError(
                "nodeGroups",
                "the trainjob target cannot run node groups: Trainer v2 has a single numProcPerNode for all nodes",
                "use target job, jobset or pytorchjob",
            )
        if plan.spec.priority_class_name:
            raise SpecError(
                "priorityClassName",
                "the trainjob target cannot set it (TrainJob has no such field)",
                f"set it in the training runtime, {other}",
            )
        if plan.spec.env_from_secrets:
            raise SpecError(
                "envFromSecrets",
                "the trainjob target cannot load whole Secrets (TrainJob's trainer has no envFrom)",
                f"list the variables in secretEnv, {other}",
            )

    def replicated_job_name(self, plan: Layout, group: NodeGroup) -> str:
        return REPLICATED_JOB

    def pod_hostname(self, plan: Layout, node: Node) -> str:
        return f"{plan.spec.name}-{REPLICATED_JOB}-0-{node.index}"

    def dns_names(self, plan: Layout, node: Node) -> tuple[str, ...]:
        host = self.pod_hostname(plan, node)
        return (host, f"{host}.{plan.spec.name}")

    def master_port(self, plan: Layout) -> int:
        return RUNTIME_PORT  # the torch runtime always uses it

    def node_rank_source(self, plan: Layout) -> str:
        return "the Trainer v2 torch runtime (PET_NODE_RANK from the completion index)"

    def torchrun_env(self, plan: Layout, group: NodeGroup) -> dict[str, str]:
        env: dict[str, str] = {}
        if plan.rdzv_mode == "c10d":
            env["PET_RDZV_CONF"] = (
                f"join_timeout={plan.spec.rendezvous.join_timeout},last_call_timeout={plan.spec.rendezvous.last_call_timeout}"
            )
        env["PET_MAX_RESTARTS"] = str(plan.spec.rendezvous.max_restarts)
        return env

    def injected_env(self, plan: Layout, node: Node) -> dict[str, str]:
        return {
            "PET_NNODES": str(plan.spec.nodes),
            "PET_NPROC_PER_NODE": str(node.nproc),
            "PET_NODE_RANK": str(node.index),
            "PET_MASTER_ADDR": self.rank0_host(plan),
            "PET_MASTER_PORT": str(self.master_port(plan)),
        }


ENGINE = TrainJobEngine()
