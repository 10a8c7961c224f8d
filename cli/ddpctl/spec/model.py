"""JobSpec: a DDP training job as the user asked for it, declared key by key.

Each key is one field: its type, default, doc and single-field rule (`metadata=doc(text, rule)`,
spec/fields). From that declaration come the key's check, its JSON Schema (the chart's
values.schema.json), its camelCase form (spec/serial), its DDPCTL_* variable (spec/sources) and its
flag's help (commands/options). A frozen `JobSpec` is checked when made: every key by its rule, then
the rules that span keys (spec/rules), each error naming the key and the fix. Whether its target
can run it, and what it derives with its engine, is the `Plan`'s (`engine.plan(spec)`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from ddpctl.records import record
from ddpctl.spec import rules, serial
from ddpctl.spec.fields import (
    Affinity,
    CheckpointURL,
    DnsLabel,
    DnsSubdomain,
    EnvValue,
    Int,
    LabelKey,
    LabelValue,
    ListOf,
    MapOf,
    Matches,
    NodeCount,
    OneOf,
    Part,
    Quantity,
    Text,
    Tolerations,
    check_fields,
    doc,
    flag,
    freeze,
)
from ddpctl.spec.names import IMAGE, MODULE
from ddpctl.spec.parts import (
    ENV_KEY,
    SECRET_NAME,
    NodeGroup,
    Preflight,
    Rendezvous,
    Resources,
    SecretKeyRef,
    Stragglers,
    Topology,
    Volume,
    Workspace,
)
from ddpctl.spec.schema import (
    BACKENDS,
    DEFAULT_BACKOFF_LIMIT,
    DEFAULT_GRACE_PERIOD,
    DEFAULT_IMAGE,
    FABRICS,
    GRACE_MARGIN,
    MIN_GRACE_PERIOD,
    POD_SECURITY,
    PULL_POLICIES,
    RECOVERY_MODES,
    RESTART_POLICIES,
    TARGETS,
    TRAINER_MODULE,
)
from ddpctl_trainer import protocol

__all__ = [
    "JobSpec",
    "NodeGroup",
    "Preflight",
    "Rendezvous",
    "Resources",
    "SecretKeyRef",
    "Stragglers",
    "Topology",
    "Volume",
]


@record
class JobSpec:
    """One DDP training job, as the user asked for it. Frozen: derive, never mutate."""

    name: str = field(
        default="ddp-train",
        metadata=doc(
            "Job name (a DNS-1035 label: lowercase letters, digits, '-', starting with a letter). Objects, pods and "
            "Services are named after it, NOT after the Helm release, so the objects equal `ddpctl render`'s. Pod "
            "names derived from it must stay within 63 characters.",
            DnsLabel(rfc1035=True),
            flag("--name", panel="Job"),
        ),
    )
    namespace: str = field(
        default="default",
        metadata=doc(
            "Namespace of every object. Usually set it equal to the release namespace (`helm install -n NS`, "
            "Argo CD `destination.namespace`, Flux `targetNamespace`).",
            DnsLabel(),
            flag("--namespace", "-n", panel="Job"),
        ),
    )
    target: str = field(
        default="job",
        metadata=doc(
            "Engine: job (Indexed Job + headless Service, no operator needed), pytorchjob (Kubeflow Training "
            "Operator v1), jobset (JobSet controller) or trainjob (Kubeflow Trainer v2).",
            OneOf(TARGETS),
            flag("--target", "-t", panel="Job", note="`submit` also takes auto, its default."),
        ),
    )
    image: str = field(
        default=DEFAULT_IMAGE,
        metadata=doc(
            "Trainer image (`ddpctl build` makes one).",
            Matches(
                IMAGE,
                "{value!r} is not an image reference",
                "use a reference like 'registry.example.com/team/trainer:1.0'",
            ),
            flag("--image", panel="Image and entrypoint"),
        ),
    )
    image_pull_policy: str = field(
        default="IfNotPresent",
        metadata=doc(
            "Always, IfNotPresent or Never.",
            OneOf(PULL_POLICIES),
            flag("--image-pull-policy", panel="Image and entrypoint"),
        ),
    )
    image_pull_secrets: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            "Names of Secrets used to pull the image.",
            ListOf(SECRET_NAME),
            flag("--image-pull-secret", panel="Image and entrypoint"),
        ),
    )
    # What each node runs: torchrun of a module (default: the ddpctl trainer) or a script,
    # or a full command that replaces torchrun (rules.entrypoint: exactly one of them).
    module: str | None = field(
        default=TRAINER_MODULE,
        metadata=doc(
            "Python module torchrun runs on every node (default: the ddpctl trainer). The container runs "
            "`torchrun -m <module>`; set it to null when you give script or command.",
            Matches(MODULE, "{value!r} is not a Python module path", "use a dotted name like 'mypkg.train'"),
            flag("--module", "-m", panel="Image and entrypoint"),
        ),
    )
    script: str | None = field(
        default=None,
        metadata=doc(
            "Or a script inside the image that torchrun runs in place of a module: `torchrun <script>`. "
            "Set module: null with it.",
            Text(nonempty=True, control=False),
            flag("--script", panel="Image and entrypoint"),
        ),
    )
    command: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            "Or a full container command that replaces torchrun. A list such as [python, train.py]; set "
            "module: null with it.",
            ListOf(Text(), first=Text(nonempty=True)),
            flag("--command", panel="Image and entrypoint", kind="shell"),
        ),
    )
    args: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            'Arguments after the module/script/command, e.g. [--epochs, "10"] (strings). With the ddpctl trainer, '
            "volumes named `data` and `checkpoints` add --data-dir/--checkpoint-dir.",
            ListOf(Text()),
        ),
    )
    # Layout: `nodes` fixed, or elastic between min_nodes and max_nodes.
    nodes: int = field(
        default=2,
        metadata=doc(
            'Nodes (pods): a number N, or "MIN:MAX" (a string) for an elastic job with c10d rendezvous.',
            NodeCount(),
            flag("--nodes", panel="Layout"),
        ),
    )
    min_nodes: int | None = None  # set from nodes "MIN:MAX"; not a key of its own
    max_nodes: int | None = None
    gpus_per_node: int = field(
        default=0,
        metadata=doc(
            "GPUs per node; 0 runs on CPU with gloo. GPUs add a toleration for resources.gpuResource.",
            Int(0),
            flag("--gpus", panel="Layout"),
        ),
    )
    procs_per_node: int | None = field(
        default=None,
        metadata=doc(
            "Processes per node, by default one per GPU (2 on CPU). At most gpusPerNode when GPUs are used.",
            Int(1),
            flag("--procs", panel="Layout"),
        ),
    )
    # Heterogeneous layouts: groups of nodes, each of one shape (empty: the uniform layout above
    # is the one group). With groups, nodes/gpusPerNode are derived from them.
    node_groups: tuple[NodeGroup, ...] = field(
        default=(),
        metadata=doc(
            "Node groups of different shapes (`ddpctl --layout 4+3` makes them): a list of {name, nodes, "
            "gpusPerNode, procsPerNode, nodeSelector, tolerations, resources, gpuResource, topology}. Empty: the "
            "uniform nodes/gpusPerNode/procsPerNode layout above, which non-empty groups replace. "
            "Not with target trainjob.",
            ListOf(Part(NodeGroup, fix="write it as {name, nodes, gpusPerNode}")),
            flag(
                "--layout",
                panel="Layout",
                kind="layout",
                help="Nodes of different sizes: processes per node joined by '+', e.g. 4+3 or 2x8+1x4 "
                "(one GPU each, or CPU processes with --gpus 0); replaces --nodes/--procs.",
            ),
        ),
    )
    backend: str = field(
        default="auto",
        metadata=doc(
            "Process-group backend: auto (nccl with GPUs, gloo without), nccl or gloo.",
            OneOf(BACKENDS),
            flag("--backend", panel="Layout"),
        ),
    )
    rendezvous: Rendezvous = field(default_factory=Rendezvous, metadata=doc("How ranks find rank 0.", Part(Rendezvous)))
    resources: Resources = field(default_factory=Resources, metadata=doc("Per-pod resources.", Part(Resources)))
    shm_size: str = field(
        default="2Gi",
        metadata=doc(
            "Size of the memory-backed /dev/shm emptyDir (DataLoader workers need more than 64M).",
            Quantity(),
            flag("--shm-size", panel="Resources"),
        ),
    )
    env: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "Environment variables of every pod. A map NAME: value (strings); yours win over ddpctl's wiring. An "
            "object store's secrets (AWS_SECRET_ACCESS_KEY, ...) go in secretEnv instead.",
            MapOf(
                ENV_KEY,
                EnvValue(),
                reserved=dict.fromkeys(  # the value is not repeated: it is a secret
                    protocol.OBJECT_STORE_SECRET_ENV,
                    (
                        "would put a secret in plain text into every pod's manifest",
                        "keep it in a Secret and reference it: secretEnv {key}: {{secret: NAME, key: KEY}}",
                    ),
                ),
            ),
            flag("--env", "-e", panel="Environment and volumes"),
        ),
    )
    env_from_secrets: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            "Secrets whose keys all become env variables (referenced, never inlined).",
            ListOf(SECRET_NAME),
            flag("--env-from-secret", panel="Environment and volumes"),
        ),
    )
    secret_env: Mapping[str, SecretKeyRef] = field(
        default_factory=dict,
        metadata=doc(
            "Env variables read from Secrets. A map VAR: {secret: NAME, key: KEY}.",
            MapOf(
                ENV_KEY,
                Part(SecretKeyRef, problem="must name a secret and a key", fix="write it as {secret: NAME, key: KEY}"),
            ),
            flag("--secret-env", panel="Environment and volumes", kind="secretEnv"),
        ),
    )
    volumes: Mapping[str, Volume] = field(
        default_factory=dict,
        metadata=doc(
            "PersistentVolumeClaims to mount in every pod. A map NAME: {claimName, mountPath, readOnly (default "
            "false)}; `data` and `checkpoints` are passed to the ddpctl trainer. The name `dshm` is reserved.",
            MapOf(
                DnsLabel(),
                Part(
                    Volume,
                    problem="must give claimName and mountPath",
                    fix="write it as {claimName: PVC, mountPath: /path}",
                ),
                reserved={"dshm": ("the name 'dshm' is reserved for /dev/shm", "choose another volume name")},
            ),
            flag("--volume", "-v", panel="Environment and volumes", kind="volumes"),
        ),
    )
    checkpoints: str | None = field(
        default=None,
        metadata=doc(
            "Where the ddpctl trainer keeps its checkpoints when not on a volume: an object store URL, "
            "s3://BUCKET/PREFIX (gs:// and az:// alike). Each checkpoint is published whole, under a prefix of "
            "its own, then named by a `latest` object. Credentials come from secretEnv or envFromSecrets "
            "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), or from the pods' workload identity (IRSA, GKE) with no "
            "Secret; env AWS_ENDPOINT_URL names an S3-compatible server. The image needs the trainer's object store "
            "client (ddpctl build --build-arg OBJECT_STORE=1). null: the `checkpoints` volume, else the pod's own "
            "file system.",
            CheckpointURL(),
            flag("--checkpoints", panel="Environment and volumes"),
        ),
    )
    workspace: Workspace = field(
        default_factory=Workspace,
        metadata=doc(
            "Your own code, shipped to the pods without a rebuild: {dir, exclude, include, store}. The folder "
            "travels as an immutable Secret in the job's namespace (up to 1 MiB compressed), else to an object "
            "store, and is unpacked at /workspace, the working directory, before torchrun starts. Not in the Helm "
            "chart: for GitOps, build the code into the image (ddpctl build). Empty: nothing shipped.",
            Part(Workspace, null_is_empty=True),
        ),
    )
    node_selector: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "Node labels the pods need.",
            MapOf(LabelKey(), LabelValue(), strings=True),
            flag("--node-selector", panel="Placement"),
        ),
    )
    tolerations: tuple[Mapping[str, Any], ...] = field(
        default=(),
        metadata=doc(
            "Taints the pods tolerate. A list of {key, operator, value, effect, tolerationSeconds}.",
            Tolerations(),
            flag("--toleration", panel="Placement", kind="tolerations"),
        ),
    )
    affinity: Mapping[str, Any] = field(
        default_factory=dict,
        metadata=doc("Pod affinity: a map with nodeAffinity, podAffinity and/or podAntiAffinity.", Affinity()),
    )
    priority_class_name: str | None = field(
        default=None,
        metadata=doc(
            "PriorityClass of the pods (not available with target trainjob); null: none.",
            DnsSubdomain(),
            flag("--priority-class", panel="Placement"),
        ),
    )
    service_account_name: str | None = field(
        default=None,
        metadata=doc(
            "ServiceAccount of the pods; null: the namespace's default.",
            DnsSubdomain(),
            flag("--service-account", panel="Security"),
        ),
    )
    labels: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "Labels on every object and pod. ddpctl's app.kubernetes.io/* labels win on a clash.",
            MapOf(LabelKey(), LabelValue()),
            flag("--label", "-l", panel="Job"),
        ),
    )
    annotations: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "Annotations on every object and pod.", MapOf(LabelKey(), Text()), flag("--annotation", panel="Job")
        ),
    )
    queue: str | None = field(
        default=None,
        metadata=doc(
            "Kueue LocalQueue (adds the kueue.x-k8s.io/queue-name label); null: none.",
            LabelValue(empty_fix="name a Kueue LocalQueue or leave queue unset"),
            flag("--queue", panel="Placement"),
        ),
    )
    workload_priority_class: str | None = field(
        default=None,
        metadata=doc(
            "Kueue WorkloadPriorityClass (adds the kueue.x-k8s.io/priority-class label; not the pods' "
            "priorityClassName); null: none.",
            LabelValue(empty_fix="name a Kueue WorkloadPriorityClass or leave it unset"),
            flag("--workload-priority-class", panel="Placement"),
        ),
    )
    topology: Topology = field(
        default_factory=Topology,
        metadata=doc(
            "Kueue Topology Aware Scheduling: where each node group's pods may land (one of required, "
            "preferred, unconstrained; optional slices). Empty: no request.",
            Part(Topology, null_is_empty=True),
            flag(
                "--topology",
                panel="Placement",
                kind="topology",
                help="Kueue topology request of every group's pods: required:LEVEL (one domain), preferred:LEVEL or "
                "unconstrained; LEVEL is a node label of the cluster's Kueue Topology.",
            ),
            flag(
                "--topology-slice",
                panel="Placement",
                kind="topologySlice",
                help="LEVEL:SIZE: place the pods in slices of SIZE, each in one domain of LEVEL (SIZE divides the "
                "nodes).",
            ),
        ),
    )
    restart_policy: str | None = field(
        default=None,
        metadata=doc(
            "Pod restart policy: Never, OnFailure, or ExitCode (pytorchjob); null: the target's "
            "(Never plus failure rules; ExitCode on pytorchjob running the ddpctl trainer).",
            OneOf(RESTART_POLICIES),
            flag("--restart-policy", panel="Lifecycle"),
        ),
    )
    backoff_limit: int = field(
        default=DEFAULT_BACKOFF_LIMIT,
        metadata=doc(
            "Restarts after failures before the job is marked failed (preemptions do not count); with recovery: "
            "pod, per pod (backoffLimitPerIndex: how often one pod is replaced alone before the job fails).",
            Int(0),
            flag("--backoff-limit", panel="Lifecycle"),
        ),
    )
    recovery: str = field(
        default="gang",
        metadata=doc(
            "What a failed pod costs. gang (default): every pod restarts and training resumes from the last "
            "checkpoint. pod (targets job and jobset, run --local; the built-in trainer, DDP on gloo): the failed pod "
            "alone is replaced, up to backoffLimit times per pod, and the others keep their state and hand it over "
            "(a coordinator pod holds the store they meet in). auto: pod where the target and layout allow it, else "
            "gang (render --explain says which and why; run --docker: gang).",
            OneOf(RECOVERY_MODES),
            flag("--recovery", panel="Lifecycle"),
        ),
    )
    ttl_seconds_after_finished: int | None = field(
        default=86400,
        metadata=doc(
            "Seconds a finished job is kept before cleanup; null: forever.", Int(0), flag("--ttl", panel="Lifecycle")
        ),
    )
    active_deadline_seconds: int | None = field(
        default=None,
        metadata=doc(
            "Seconds before a running job is stopped; null: no limit.", Int(1), flag("--deadline", panel="Lifecycle")
        ),
    )
    grace_period: int = field(
        default=DEFAULT_GRACE_PERIOD,
        metadata=doc(
            "Seconds from a pod's SIGTERM (preemption, drain, delete) to its SIGKILL: the pods' "
            "terminationGracePeriodSeconds. The ddpctl trainer uses it to finish its step and write a checkpoint; "
            f"torchrun waits up to {GRACE_MARGIN} s less for its workers (TORCH_ELASTIC_SHUTDOWN_TIMEOUT), so it "
            "reports before the kubelet kills the pod.",
            Int(MIN_GRACE_PERIOD),
            flag("--grace-period", panel="Lifecycle"),
        ),
    )
    collective_timeout: int | None = field(
        default=None,
        metadata=doc(
            "Seconds a rank of the ddpctl trainer waits in one collective (its process-group timeout, "
            "DDP_TRAINER_TIMEOUT_S) before failing, so the group stops and restarts when a peer died "
            "mid-collective; null: the trainer's default (600). Keep it above the longest checkpoint write "
            "(ranks wait in a barrier meanwhile) and the stall watchdog's timeout.",
            Int(1),
            flag("--collective-timeout", panel="Lifecycle"),
        ),
    )
    pod_security: str = field(
        default="restricted",
        metadata=doc(
            "Pod Security profile the pods meet: restricted (default), baseline, or privileged (what a fast fabric's "
            "IPC_LOCK needs; the namespace must allow it).",
            OneOf(POD_SECURITY),
            flag("--pod-security", panel="Security"),
        ),
    )
    # The trainer's stall watchdog (DDP_TRAINER_STALL_TIMEOUT); None: the trainer's default (300).
    stall_timeout: int | None = field(
        default=None,
        metadata=doc(
            "Seconds without progress on any rank before the trainer stops a hung job and names the rank "
            "(exit code 200); 0: off, null: the trainer's 300.",
            Int(0),
            flag("--stall-timeout", panel="Lifecycle"),
        ),
    )
    # The network and the checks before the first step (docs/preflight.md).
    fabric: str = field(
        default="socket",
        metadata=doc(
            "Network fabric NCCL's traffic crosses: socket (TCP, the default), infiniband, roce or efa. Each but "
            "socket adds its device (resources.fabricResource), NCCL's and libfabric's env and the IPC_LOCK "
            'capability, which needs podSecurity privileged; the preflight fails a job whose NCCL fell back to '
            "sockets.",
            OneOf(FABRICS),
            flag("--fabric", panel="Resources"),
        ),
    )
    avoid_nodes: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            "Kubernetes nodes the pods must not run on (a required node anti-affinity on their names), e.g. the "
            "one a preflight finding named.",
            ListOf(DnsSubdomain()),
            flag("--avoid-node", panel="Placement"),
        ),
    )
    preflight: Preflight = field(
        default_factory=Preflight,
        metadata=doc(
            "The preflight checks before the first step: mode (off, warn, fail), tolerance and floors.",
            Part(Preflight, null_is_empty=True),
        ),
    )
    # Stragglers during training (the trainer's --stragglers flags; docs/failures.md).
    stragglers: Stragglers = field(
        default_factory=Stragglers,
        metadata=doc(
            "Straggler detection during training: mode (off, warn, fail), tolerance, every (steps a window) "
            "and windows.",
            Part(Stragglers, null_is_empty=True),
        ),
    )

    def __post_init__(self) -> None:
        freeze(self)  # lists become tuples, maps read-only and sorted: equal specs render byte-identically
        check_fields(self)
        if self.node_groups:
            rules.node_groups(self)
            # The totals the rest of ddpctl reads (backend choice, notes); per-node values come from the groups.
            object.__setattr__(self, "nodes", sum(g.nodes for g in self.node_groups))
            object.__setattr__(self, "gpus_per_node", max(g.gpus_per_node for g in self.node_groups))
            object.__setattr__(self, "procs_per_node", None)
        rules.check(self)

    # ---------------------------------------------------------------- reading the fields
    # What the fields say, read once for the rules; what a spec derives with its engine
    # (names, env, world size) is the Plan's (ddpctl.plan, made by engine.plan(spec)).

    @property
    def elastic(self) -> bool:
        return self.min_nodes is not None

    @functools.cached_property
    def groups(self) -> tuple[NodeGroup, ...]:
        """The node groups: the spec's, or the uniform layout as the one group `node` (of the
        elastic maximum of pods when elastic)."""
        if self.node_groups:
            return self.node_groups
        pods = self.max_nodes if self.max_nodes is not None else self.nodes
        return (NodeGroup("node", pods, self.gpus_per_node, self.procs_per_node),)

    def topology_of(self, group: NodeGroup) -> Topology:
        """The group's own topology request, else the spec's."""
        return group.topology if group.topology is not None else self.topology

    @property
    def uses_trainer(self) -> bool:
        """Whether the pods run the ddpctl trainer (the default module)."""
        return self.module == TRAINER_MODULE

    # ---------------------------------------------------------------- the camelCase form

    def replace(self, **changes: Any) -> JobSpec:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """Build from the camelCase form of ddp.yaml / Helm values; unknown keys are errors."""
        return cls(**serial.spec_kwargs(cls, data))

    def to_dict(self) -> dict[str, Any]:
        """The camelCase form, round-trippable through `from_dict` (what `init` and Helm values use)."""
        return serial.spec_dict(self)
