"""The interface every engine implements, and what the engines that we wire ourselves share.

An engine is everything ddpctl knows about one way of running a multi-node job on Kubernetes: the
objects it creates and their names, the pods' hostnames and DNS names, where rank 0 listens, the
env its controller injects into the training container, how a pod learns its node rank, what it
can run (elastic layouts, node groups). Render, explain, `run --local`, `run --docker` and the
cluster commands read the `Plan` the engine makes (`engine.plan(spec)`); none of them branches on
the target. Reading live objects (`status`, `logs`, `delete`) is the cluster package's
(ddpctl.cluster.workloads), which asks an engine only for static facts: the labels its pods carry
and where its object keeps its node count. Each engine module's docstring states its contract,
with the upstream documentation it comes from.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from ddpctl.errors import SpecError
from ddpctl.plan import Layout, Node, Plan, RetryRule
from ddpctl.spec.schema import TARGETS
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.spec.model import JobSpec, NodeGroup

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
MANAGED_BY = "app.kubernetes.io/managed-by=ddpctl"
INSTANCE = "app.kubernetes.io/instance"
NODE_RANK_OFFSET = protocol.NODE_RANK_OFFSET_ENV

# With node groups, each group is its own Indexed Job whose completion index starts at 0, and the
# downward API cannot add the group's offset. This launcher does, without a shell (restricted pods,
# images without sh): PET_NODE_RANK = PET_NODE_RANK_OFFSET + JOB_COMPLETION_INDEX (the Job
# controller sets JOB_COMPLETION_INDEX in every Indexed Job pod), then it is torchrun itself
# (`torch.distributed.run.main`, which parses the rest of the command line as torchrun does).
NODE_RANK_LAUNCHER = (
    "import os, sys; "
    "os.environ['PET_NODE_RANK'] = str(int(os.environ['PET_NODE_RANK_OFFSET']) "
    "+ int(os.environ['JOB_COMPLETION_INDEX'])); "
    "sys.argv[0] = 'torchrun'; "
    "from torch.distributed.run import main; "
    "main()"
)
LAUNCHER_PYTHON = protocol.LAUNCHER_PYTHON
COORDINATOR = "coordinator"  # pod recovery: the name (suffix) of the coordinator's workload
RESUBMIT = (
    "submit again with --avoid-node NODE (the Kubernetes node rank 0's straggler line names) to keep the pods off it"
)


class WorkloadKind(NamedTuple):
    """The API kind of an engine's top-level workload, and the conditions that end it. (A
    NamedTuple, not a frozen dataclass: every start-up defines it, and a dataclass takes ~0.7 ms
    longer.)"""

    kind: str
    group: str
    version: str
    plural: str
    installed_by: str  # for messages: what the cluster needs installed
    success: tuple[str, ...]
    failure: tuple[str, ...]


class NodeCount(NamedTuple):
    """Where a live workload object says how many node pods it asks for (a static fact the
    cluster package reads objects by): the number at `path`; with `factors`, the sum over the
    items at `path` (a list, or a mapping's `keys` that it has) of the product of each item's
    factors, each the first of its paths that is set (none set: 1), but for the items named in `skip`."""

    path: tuple[str, ...]
    factors: tuple[tuple[tuple[str, ...], ...], ...] = ()
    keys: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()  # items of the list by `name` that run no node (a coordinator)


#: every engine class by its target, as each module defines one: what `alternatives` names (this
#: module cannot import the package that lists the engines, which imports it)
KNOWN: dict[str, type[Engine]] = {}


class Engine(ABC):
    """One target. Subclasses set the class attributes and implement the abstract methods."""

    target: ClassVar[str]
    title: ClassVar[str]  # for `render --explain`
    workload: ClassVar[WorkloadKind]
    container_name: ClassVar[str]  # the training container's name in the pod
    kueue_framework: ClassVar[str]  # the name of Kueue's integration for this kind (integrations.frameworks)
    suspend_field: ClassVar[tuple[str, ...]] = ("spec", "suspend")  # where Kueue suspends the object
    kueue_note: ClassVar[str | None] = None  # what a Kueue user must know of this engine (--explain)
    port_name: ClassVar[str] = "rendezvous"
    left_to_engine: ClassVar[tuple[str, ...]] = ()  # spec settings the engine's runtime decides
    supports_elastic: ClassVar[bool] = True
    builtin: ClassVar[bool] = False  # served by every cluster (no CRD to install)
    # how `delete` asks the garbage collector to remove the workload's dependents: Foreground keeps
    # the object until its pods are gone; Background removes it at once (then delete waits on pods)
    delete_propagation: ClassVar[str] = "Foreground"
    runtime: ClassVar[str | None] = None  # a cluster-scoped runtime object it needs as well
    replica_types: ClassVar[tuple[str, ...]] = ("node",)  # pod roles, rank 0's first (status lines)
    # How the cluster package reads live objects of this kind (ddpctl.cluster.workloads):
    node_count: ClassVar[NodeCount]  # how many node pods a workload object asks for
    index_label: ClassVar[str] = COMPLETION_INDEX  # a pod's index (label, else annotation)
    role_label: ClassVar[str | None] = None  # a pod's replica type; None: every pod is replica_types[0]
    # the replica spec of the workload that holds rank 0 alone; the other roles' indexes count after it
    lead_replica: ClassVar[tuple[str, ...] | None] = None
    pods_labelled: ClassVar[str | None] = None  # the label naming the workload on its pods, when not ours
    # why `recovery: pod` cannot run on this target (None: it can; the layout may still refuse)
    pod_recovery_refused: ClassVar[str | None] = "its controller replaces pods by rules of its own (not built yet)"

    def added_container_hint(self, container: str) -> str | None:
        """The fix when Pod Security refuses `container`, which the engine's controller (not ddpctl)
        adds to the job's pods; None when the controller adds no container of that name."""
        return None

    def podset_group(self, plan: Layout) -> str | None:
        """The Kueue podset-group-name that makes two of the job's PodSets one placement unit."""
        return None

    @property
    def template(self) -> str:
        """The Jinja2 template under templates/ that lays out this engine's objects."""
        return f"{self.target}.yaml.j2"

    def plan(self, spec: JobSpec) -> Plan:
        """The spec's Plan on this engine, once the engine has checked that it can run the spec
        (settings it cannot express are refused, never dropped) and that every name it derives fits."""
        layout = self.layout(spec)
        self.check(layout)
        self.check_recovery(layout)
        plan = self.unchecked_plan(layout)
        plan.check_names()
        return plan

    def layout(self, spec: JobSpec) -> Layout:
        """The spec's Layout with its `recovery` resolved: auto is pod where nothing blocks it here."""
        first = Layout(spec)
        if spec.recovery != "auto":
            return first
        return Layout(spec, recovery="gang" if self.pod_recovery_blocked(first) else "pod")

    def pod_recovery_blocked(self, plan: Layout) -> str | None:
        """Why a lost pod of this layout cannot be replaced alone on this target (None: it can)."""
        return self.pod_recovery_refused or plan.pod_recovery_problem

    def unchecked_plan(self, layout: Layout) -> Plan:
        """Everything this engine derives from `layout`, computed once into a Plan (no check)."""
        nodes = layout.nodes
        groups = tuple(
            layout.group_plan(
                group,
                workload_name=self.workload_name(layout, group),
                replicated_job=self.replicated_job_name(layout, group),
                command=self.entrypoint(layout, group),
                wiring=self.torchrun_env(layout, group),
            )
            for group in layout.spec.groups
        )
        return Plan(
            layout.spec,
            recovery=layout.recovery,
            target=self.target,
            rank0_host=self.rank0_host(layout),
            master_port=self.master_port(layout),
            node_rank_from_index=self.node_rank_from_index(layout),
            node_rank_source=self.node_rank_source(layout),
            pod_hostnames=tuple(self.pod_hostname(layout, n) for n in nodes),
            dns_names=tuple(self.dns_names(layout, n) for n in nodes),
            # names differ only by index within a group: each group's first and last node are enough
            longest_generated_name=max(
                (
                    *(self.pod_hostname(layout, n) for n in layout.edge_nodes()),
                    *((self.coordinator_name(layout),) if layout.recovery == "pod" else ()),
                ),
                key=len,
            ),
            groups=groups,
            injected_env=tuple(self.injected_env(layout, n) for n in nodes),
            pod_restart_policy=self.pod_restart_policy(layout),
            coordinator=self.coordinator(layout),
            coordinator_name=self.coordinator_name(layout) if layout.recovery == "pod" else None,
            failure_handling=self.failure_handling(layout),
            restart_limit=self.restart_limit(layout),
            retry=self.retry_rule(layout),
        )

    # ------------------------------------------------------------ what it can run

    def check(self, plan: Layout) -> None:
        """Refuse, with a field error, what this engine cannot express (never drop it silently)."""
        self.check_restart_policy(plan)
        if plan.spec.elastic and not self.supports_elastic:
            raise SpecError(
                "nodes",
                f"the {self.target} target has no elastic policy",
                f"give a fixed count, or use target {self.alternatives('elastic')}",
            )

    def check_recovery(self, plan: Layout) -> None:
        """Refuse `recovery: pod` where this target or the layout cannot replace a lost pod alone, and
        `stragglers.mode` replace where recovery resolved to gang."""
        if plan.spec.recovery == "pod":
            if self.pod_recovery_refused:
                raise SpecError(
                    "recovery",
                    f"pod on the {self.target} target: {self.pod_recovery_refused}",
                    f"use target {' or '.join(t for t in TARGETS if t in KNOWN and not KNOWN[t].pod_recovery_refused)}"
                    ", or leave recovery at gang (whole-group restarts)",
                )
            if plan.pod_recovery_problem:
                raise SpecError(
                    "recovery", f"pod: {plan.pod_recovery_problem}", "leave recovery at gang (whole-group restarts)"
                )
        if plan.spec.stragglers.mode == "replace" and plan.recovery != "pod":
            raise SpecError(
                "stragglers.mode",
                "replace needs recovery: pod, which this target or layout cannot run (render --explain says why)",
                "use --stragglers fail and resubmit with --avoid-node NODE",
            )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "target" in cls.__dict__:
            KNOWN[cls.target] = cls

    @staticmethod
    def alternatives(feature: str) -> str:
        able = [t for t in TARGETS if t in KNOWN and KNOWN[t]().can(feature)]
        return ", ".join(able[:-1]) + f" or {able[-1]}" if len(able) > 1 else able[0]

    def can(self, feature: str) -> bool:
        """`elastic` or `groups` (any node-group layout)."""
        return self.supports_elastic if feature == "elastic" else True

    def restart_limit(self, plan: Layout) -> int:
        """How many times this engine restarts the whole group after a node fails (`run --local`
        plays the same rule). Plain Jobs and JobSets retry up to backoffLimit."""
        return plan.spec.backoff_limit

    def retry_rule(self, plan: Layout) -> RetryRule:
        """Which exit codes of a node are restarted (with its group) under the rendered rules:
        every failure but what fails the job at once (`protocol.FAILS_THE_JOB`: a usage error, a
        straggler under --stragglers fail); under restartPolicy OnFailure the kubelet restarts
        every failed container, those too."""
        if self.pod_restart_policy(plan) == "OnFailure":
            return RetryRule()
        return RetryRule(but=protocol.FAILS_THE_JOB)

    def pod_restart_policy(self, plan: Layout) -> str:
        """The pods' restartPolicy: the spec's, else Never (a Job's podFailurePolicy needs it)."""
        return plan.spec.restart_policy or "Never"

    @abstractmethod
    def failure_handling(self, plan: Layout) -> str:
        """What the rendered objects do when a pod fails or is preempted, in words (`--explain`)."""

    def preflight_failure(self, plan: Layout) -> str:
        """What this engine does with pods that exit EXIT_PREFLIGHT (every rank does, under
        --preflight fail with a finding), in words (`--explain`): by its retry rule."""
        if self.retry_rule(plan).retries(protocol.EXIT_PREFLIGHT):
            return f"a failed attempt like a crash: the whole group restarts, up to {self.restart_limit(plan)} times"
        return f"the job fails: {self.pod_restart_policy(plan)} does not retry exit {protocol.EXIT_PREFLIGHT}"

    def straggler_failure(self, plan: Layout) -> str:
        """What this engine does with pods that exit EXIT_STRAGGLER (every rank does, after the
        same step, under --stragglers fail with a node named), in words (`--explain`)."""
        code = protocol.EXIT_STRAGGLER
        if not plan.uses_launcher:
            return (
                f"plain torchrun exits 1 for it, not {code}, so it is handled as any failed pod: "
                f"{self.failure_handling(plan)}"
            )
        if self.pod_restart_policy(plan) == "OnFailure":
            return (
                f"restartPolicy OnFailure: the kubelet restarts the containers in place (any code, {code} too), up "
                f"to {self.restart_limit(plan)} times, on the same nodes, so the straggler is likely named again; "
                "leave restartPolicy unset to end the job at once"
            )
        if self.retry_rule(plan).retries(code):
            return f"a failed attempt like a crash: the whole group restarts, up to {self.restart_limit(plan)} times"
        return f"the job fails at once; {RESUBMIT}"

    def check_restart_policy(self, plan: Layout) -> None:
        if plan.spec.restart_policy == "ExitCode":
            raise SpecError(
                "restartPolicy",
                f"ExitCode is the PyTorchJob operator's policy; the {self.target} target's pods take Never "
                "or OnFailure",
                "leave restartPolicy unset (failure rules are rendered for you), or use target pytorchjob",
            )

    # ------------------------------------------------------------ names

    def workload_name(self, plan: Layout, group: NodeGroup) -> str:
        """The name of the object that runs `group`'s pods (one object for all of them by default)."""
        return plan.spec.name

    def replicated_job_name(self, plan: Layout, group: NodeGroup) -> str | None:
        """The JobSet replicatedJob that runs `group` (JobSet-based engines only)."""
        return None

    def subdomain(self, plan: Layout) -> str | None:
        """The pods' `spec.subdomain`, where we set it in the pod template."""
        return None

    def template_values(self, plan: Layout, group_views: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Extra values this engine's template needs, from the per-group views (by group name)."""
        return {}

    @abstractmethod
    def pod_hostname(self, plan: Layout, node: Node) -> str:
        """The hostname the engine gives `node`'s pod."""

    @abstractmethod
    def dns_names(self, plan: Layout, node: Node) -> tuple[str, ...]:
        """The names other pods reach `node`'s pod by; the last is the one ddpctl wires."""

    def master_port(self, plan: Layout) -> int:
        return plan.spec.rendezvous.port

    def rank0_host(self, plan: Layout) -> str:
        """The name rank 0's pod is wired by: MASTER_ADDR / the rendezvous host."""
        return self.dns_names(plan, plan.first_node)[-1]

    def rdzv_endpoint(self, plan: Layout) -> str:
        return f"{self.rank0_host(plan)}:{self.master_port(plan)}"

    def coordinator_name(self, plan: Layout) -> str:
        """The name of the coordinator's workload (pod recovery)."""
        raise NotImplementedError(self.target)

    def coordinator_host(self, plan: Layout) -> str:
        """The DNS name of the coordinator's pod (pod recovery)."""
        raise NotImplementedError(self.target)

    def coordinator(self, plan: Layout) -> str | None:
        """HOST:PORT of the store a pod-recovery job meets in (the coordinator's pod); None: gang."""
        if plan.recovery != "pod":
            return None
        return f"{self.coordinator_host(plan)}:{protocol.COORDINATOR_PORT}"

    # ------------------------------------------------------------ wiring

    @abstractmethod
    def node_rank_source(self, plan: Layout) -> str:
        """Where a pod learns its node rank, in words."""

    def node_rank_from_index(self, plan: Layout) -> bool:
        """Do we (not an operator) give PET_NODE_RANK from the completion index (downward API)?"""
        return False

    @abstractmethod
    def torchrun_env(self, plan: Layout, group: NodeGroup) -> dict[str, str]:
        """The PET_* env we put in `group`'s pods (what the engine does not inject itself)."""

    def entrypoint(self, plan: Layout, group: NodeGroup) -> tuple[str, ...]:
        """The container command of `group`'s pods."""
        return plan.entrypoint

    @abstractmethod
    def injected_env(self, plan: Layout, node: Node) -> dict[str, str]:
        """What the engine's controller adds to the container env of `node`'s pod (so local runs
        and containers get exactly the pod's env); the later entry wins, as in the pod."""


class IndexedEngine(Engine):
    """Engines whose pods come from Indexed Jobs that we wire ourselves (job, jobset): torchrun's
    settings are PET_* env in the pod; the node rank is the completion index (downward API), plus
    the group's offset through NODE_RANK_LAUNCHER when there are node groups."""

    def check(self, plan: Layout) -> None:
        super().check(plan)
        if plan.spec.recovery == "pod" and not self.failure_rules_apply(plan):
            raise SpecError(
                "restartPolicy",
                f"{plan.spec.restart_policy} restarts a failed container in place, outside the per-pod limits and "
                "failure rules of recovery: pod",
                "leave restartPolicy unset (Never)",
            )
        if plan.spec.recovery == "pod" and any(g.name == COORDINATOR for g in plan.spec.node_groups):
            raise SpecError(
                "nodeGroups",
                f"a group named {COORDINATOR!r} would share its workload's name with the coordinator of recovery: pod",
                "rename the group",
            )
        if plan.spec.node_groups and plan.rdzv_mode != "static":
            raise SpecError(
                "rendezvous.mode",
                "node groups need static rendezvous "
                "(c10d numbers nodes in the order they join, so rank 0 could be anywhere)",
                "leave rendezvous.mode at auto or static",
            )

    def pod_recovery_blocked(self, plan: Layout) -> str | None:
        if not self.failure_rules_apply(plan):
            return f"{plan.spec.restart_policy} restarts a failed container in place, outside per-pod limits"
        if any(g.name == COORDINATOR for g in plan.spec.node_groups):
            return f"a node group is named {COORDINATOR!r}, the coordinator's name"
        return super().pod_recovery_blocked(plan)

    def node_rank_from_index(self, plan: Layout) -> bool:
        return plan.rdzv_mode == "static" and plan.recovery != "pod"

    def exit_code_rule(self, action: str, codes: tuple[int, ...]) -> dict[str, Any]:
        """A podFailurePolicy rule on the training container's exit code (values sorted, as the API wants)."""
        return {
            "action": action,
            "onExitCodes": {"containerName": self.container_name, "operator": "In", "values": sorted(codes)},
        }

    @staticmethod
    def disruption_rule(action: str) -> dict[str, Any]:
        """A podFailurePolicy rule for a pod the cluster took away (preemption, eviction, node drain or loss)."""
        return {"action": action, "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}

    def failure_rules_apply(self, plan: Layout) -> bool:
        """podFailurePolicy needs restartPolicy Never (OnFailure restarts containers in place instead)."""
        return self.pod_restart_policy(plan) == "Never"

    # What the podFailurePolicy does with a pod the cluster took away (DisruptionTarget), and which
    # exit codes of pods stopped by a peer's fate it handles the same way (see each engine).
    on_disruption: ClassVar[str]
    peer_stop_codes: ClassVar[tuple[int, ...]]

    def pod_failure_policy(self, plan: Layout) -> dict[str, Any] | None:
        """The (child) Job's podFailurePolicy: a usage error and a straggler (`protocol.FAILS_THE_JOB`)
        fail it at once, a disruption and its knock-on stops get `on_disruption` (exit-code rules
        only where the pods run ddpctl's launcher)."""
        if not self.failure_rules_apply(plan):
            return None
        # pod recovery: a pod the cluster took away is replaced alone, never the whole group
        on_disruption = "Ignore" if plan.recovery == "pod" else self.on_disruption
        rules = [self.disruption_rule(on_disruption)]
        if plan.uses_launcher:  # exit 2: bad input; 202: a straggler under --stragglers fail
            rules.insert(0, self.exit_code_rule("FailJob", protocol.FAILS_THE_JOB))
        elif plan.ships_workspace:  # exit 2: a workspace that cannot be unpacked (plain torchrun exits 1 for the rest)
            rules.insert(0, self.exit_code_rule("FailJob", (protocol.EXIT_USAGE,)))
        if plan.uses_launcher:
            # pod recovery: a survivor does not stop for a lost peer (138); only the whole job's stop does (143)
            peer = (protocol.EXIT_PREEMPTED,) if plan.recovery == "pod" else self.peer_stop_codes
            rules.append(self.exit_code_rule(on_disruption, peer))
        return {"rules": rules}

    def node_rank_source(self, plan: Layout) -> str:
        if plan.recovery == "pod":
            return (
                "the pod's completion index plus its group's first node rank (DDP_NODE_RANK, added by "
                f"python3 -m {protocol.LAUNCHER_MODULE}; each pod's torchrun runs its node alone)"
            )
        if plan.rdzv_mode == "c10d":
            return "the c10d rendezvous, in the order nodes join"
        if plan.spec.node_groups:
            # the built-in trainer's pods run ddpctl_trainer.launch, which adds it; others a python3 -c launcher
            adder = f"python3 -m {protocol.LAUNCHER_MODULE}" if plan.uses_launcher else "a python3 -c launcher"
            return (
                "the pod's completion index plus its group's first node rank "
                f"(PET_NODE_RANK = {NODE_RANK_OFFSET} + JOB_COMPLETION_INDEX, added by {adder})"
            )
        return "the pod's job-completion-index annotation (PET_NODE_RANK via the downward API)"

    def torchrun_env(self, plan: Layout, group: NodeGroup) -> dict[str, str]:
        coordinator = self.coordinator(plan)
        if coordinator is not None:
            return plan.recovery_env(group, coordinator)
        env: dict[str, str] = {"PET_NNODES": plan.nnodes, "PET_NPROC_PER_NODE": str(group.nproc)}
        if plan.rdzv_mode == "static":
            env["PET_MASTER_ADDR"] = self.rank0_host(plan)
            env["PET_MASTER_PORT"] = str(self.master_port(plan))
            if plan.spec.node_groups:
                env[NODE_RANK_OFFSET] = str(plan.group_offset(group))
        else:
            env["PET_RDZV_BACKEND"] = "c10d"
            env["PET_RDZV_ENDPOINT"] = self.rdzv_endpoint(plan)
            env["PET_RDZV_ID"] = plan.spec.name
            rdzv = plan.spec.rendezvous
            env["PET_RDZV_CONF"] = f"join_timeout={rdzv.join_timeout},last_call_timeout={rdzv.last_call_timeout}"
        env["PET_MAX_RESTARTS"] = str(plan.spec.rendezvous.max_restarts)
        return env

    def entrypoint(self, plan: Layout, group: NodeGroup) -> tuple[str, ...]:
        entry = plan.entrypoint
        if plan.spec.node_groups and entry[0] == "torchrun":
            return (LAUNCHER_PYTHON, "-c", NODE_RANK_LAUNCHER, *entry[1:])
        return entry

    def injected_env(self, plan: Layout, node: Node) -> dict[str, str]:
        env = {"JOB_COMPLETION_INDEX": str(node.index)}
        if self.node_rank_from_index(plan) and not plan.spec.node_groups:
            env["PET_NODE_RANK"] = str(node.index)  # the downward API field, resolved
        return env
