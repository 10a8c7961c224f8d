"""JobSpec: a DDP training job as the user asked for it, and its checks.

A frozen `JobSpec` holds what the user said: it is checked on construction, each error naming the
field and the fix. Whether its target can run it, and every value it derives with its engine (world
size, the nodes in rank order, names, the rank-0 address, each pod's env), is the `Plan`'s
(`ddpctl.plan`, made by `engine.plan(spec)`).

The serialised form (``ddp.yaml``, Helm values) uses camelCase keys; `JobSpec.from_dict` and
`JobSpec.to_dict` convert between the two.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddpctl.errors import SpecError
from ddpctl.spec import kueue
from ddpctl.spec.checks import (
    check_json_like,
    check_node_selector,
    check_plain_string,
    check_quantity,
    check_tolerations,
    one_of,
    positive_int,
    require,
    yaml_spelling,
)
from ddpctl.spec.names import (
    CONTROL_CHARS,
    DNS1035_LABEL,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    ENV_NAME,
    IMAGE,
    LABEL_VALUE,
    MAX_DNS_LABEL,
    MODULE,
    RESOURCE_NAME,
    SECRET_KEY,
    check_dns_label,
    check_dns_subdomain,
    check_label_key,
    check_label_value,
)
from ddpctl.spec.schema import (
    AFFINITY_KINDS,
    BACKENDS,
    CHECKPOINT_URL_PATTERN,
    CONTROL_CLASS,
    DEFAULT_BACKOFF_LIMIT,
    DEFAULT_GRACE_PERIOD,
    DEFAULT_IMAGE,
    GRACE_MARGIN,
    LABEL_KEY_PATTERN,
    MAX_NODES,
    MIN_GRACE_PERIOD,
    NO_NUL,
    POD_SECURITY,
    PULL_POLICIES,
    QUANTITY_PATTERN,
    RDZV_MODES,
    RESTART_POLICIES,
    SECRET_NAME,
    SHM_MOUNT,
    TARGETS,
    TOLERATION,
    TRAINER_COLLECTIVE_TIMEOUT,
    TRAINER_MODULE,
    TRAINER_STALL_TIMEOUT,
    bounded,
    doc,
    no_chars,
    string_map,
)
from ddpctl.spec.serial import camel, env_value, key_fix, parse_nodes, plain, snake, sub_dataclass
from ddpctl_trainer import protocol

# --------------------------------------------------------------------------------------------
# The spec's parts.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Volume:
    """A PersistentVolumeClaim mounted into every pod (data sets, checkpoints)."""

    claim_name: str = field(
        metadata=doc("PersistentVolumeClaim name.", maxLength=253, pattern=DNS1123_SUBDOMAIN.pattern)
    )
    mount_path: str = field(
        metadata=doc(
            f"Absolute mount path (not {SHM_MOUNT}, which shmSize manages).",
            pattern=f"^/[^:{CONTROL_CLASS}]*$",
            **{"not": {"pattern": f"^{SHM_MOUNT}/*$"}},
        )
    )
    read_only: bool = field(default=False, metadata=doc("Mount read-only."))


@dataclass(frozen=True)
class SecretKeyRef:
    """An env var whose value lives in a Secret: referenced, never inlined."""

    secret: str = field(metadata=doc("Secret name.", **SECRET_NAME))
    key: str = field(metadata=doc("Key in the Secret.", pattern=SECRET_KEY.pattern))


@dataclass(frozen=True)
class Rendezvous:
    """How ranks find rank 0: static master address/port, or c10d (required for elastic jobs)."""

    mode: str = field(
        default="auto",
        metadata=doc("auto (static for a fixed node count, c10d for elastic), static or c10d.", enum=RDZV_MODES),
    )
    port: int = field(
        default=29500,
        metadata=doc("TCP port of rank 0's store (the trainjob runtime always uses 29500).", minimum=1, maximum=65535),
    )
    join_timeout: int = field(default=600, metadata=doc("c10d rendezvous join timeout, seconds.", minimum=1))
    last_call_timeout: int = field(default=30, metadata=doc("c10d rendezvous last-call timeout, seconds.", minimum=1))
    max_restarts: int = field(
        default=0, metadata=doc("torchrun --max-restarts (worker group restarts inside a pod).", minimum=0)
    )


@dataclass(frozen=True)
class Resources:
    """Per-pod requests (cpu, memory) and GPU limits; GPUs are counted in `JobSpec.gpus_per_node`."""

    cpu: str | None = field(
        default=None,
        metadata=doc('CPU request (a quantity such as "8" or "500m"); null: none.', pattern=QUANTITY_PATTERN),
    )
    memory: str | None = field(
        default=None,
        metadata=doc('Memory request and limit (a quantity such as "64Gi"); null: none.', pattern=QUANTITY_PATTERN),
    )
    gpu_resource: str = field(
        default="nvidia.com/gpu",
        metadata=doc("Extended resource that counts GPUs (limit = gpusPerNode).", pattern=RESOURCE_NAME.pattern),
    )


@dataclass(frozen=True)
class Topology:
    """Where Kueue's Topology Aware Scheduling may place a group's pods: all in one domain of a
    topology level (`required`), in as few as it can (`preferred`), anywhere (`unconstrained`), and
    optionally in slices of `sliceSize` pods that each fit one domain of `sliceLevel`. A level is
    the node label a Kueue Topology names, such as `cloud.provider.com/topology-rack`."""

    required: str | None = field(
        default=None,
        metadata=doc(
            "Node label of the level whose one domain must hold all the group's pods (Kueue "
            "podset-required-topology); null: none.",
            minLength=1,
            pattern=LABEL_KEY_PATTERN,
        ),
    )
    preferred: str | None = field(
        default=None,
        metadata=doc(
            "Node label of the level Kueue tries first, going up a level when the pods do not fit "
            "(podset-preferred-topology); null: none.",
            minLength=1,
            pattern=LABEL_KEY_PATTERN,
        ),
    )
    unconstrained: bool = field(
        default=False,
        metadata=doc("Any nodes with room, counted by Kueue's topology cache (podset-unconstrained-topology)."),
    )
    slice_level: str | None = field(
        default=None,
        metadata=doc(
            "Node label of the level one slice of sliceSize pods must fit (podset-slice-required-topology); "
            "null: no slices.",
            minLength=1,
            pattern=LABEL_KEY_PATTERN,
        ),
    )
    slice_size: int | None = field(
        default=None,
        metadata=doc("Pods per slice; must divide the group's node count; null: no slices.", minimum=1),
    )

    @property
    def mode(self) -> str | None:
        """required, preferred or unconstrained (None: no topology request)."""
        if self.required:
            return "required"
        if self.preferred:
            return "preferred"
        return "unconstrained" if self.unconstrained else None

    @property
    def level(self) -> str | None:
        return self.required or self.preferred

    def __bool__(self) -> bool:
        return self.mode is not None or self.slice_level is not None

    def describe(self) -> str:
        """`required: all pods in one <level>`, with slices: `..., in slices of 2 pods per <level>`."""
        text = {
            "required": f"required: all pods in one {self.level} domain",
            "preferred": f"preferred: as few {self.preferred} domains as fit",
            "unconstrained": "unconstrained: any nodes with room",
            None: "no level",
        }[self.mode]
        if self.slice_level:
            text += f", in slices of {self.slice_size} pods, each in one {self.slice_level} domain"
        return text

    def annotations(self) -> dict[str, str]:
        """The PodSet annotations Kueue reads (on the pod template of each group)."""
        out: dict[str, str] = {}
        if self.required:
            out[kueue.REQUIRED_TOPOLOGY] = self.required
        elif self.preferred:
            out[kueue.PREFERRED_TOPOLOGY] = self.preferred
        elif self.unconstrained:
            out[kueue.UNCONSTRAINED_TOPOLOGY] = "true"
        if self.slice_level and self.slice_size:
            out[kueue.SLICE_REQUIRED_TOPOLOGY] = self.slice_level
            out[kueue.SLICE_SIZE] = str(self.slice_size)
        return out

    def check(self, where: str, pods: int | None) -> None:
        """Kueue's rules for one PodSet's annotations, each error naming the key; `pods` is the
        group's node count (None: elastic, which slices cannot divide)."""
        modes = [k for k in ("required", "preferred") if getattr(self, k) is not None]
        if self.unconstrained:
            modes.append("unconstrained")
        require(
            isinstance(self.unconstrained, bool),
            f"{where}.unconstrained",
            f"{self.unconstrained!r} is not a boolean",
            "write true or false",
        )
        if len(modes) > 1:
            raise SpecError(
                where, f"sets both {modes[0]} and {modes[1]}", "keep one of required, preferred and unconstrained"
            )
        for key in ("required", "preferred", "slice_level"):
            value = getattr(self, key)
            if value is not None:
                check_label_key(f"{where}.{camel(key)}", value)
        if (self.slice_level is None) != (self.slice_size is None):
            missing, given = ("sliceSize", "sliceLevel") if self.slice_size is None else ("sliceLevel", "sliceSize")
            raise SpecError(
                f"{where}.{missing}", f"is missing (with {given})", "give sliceLevel and sliceSize together"
            )
        if self.slice_size is not None:
            positive_int(f"{where}.sliceSize", self.slice_size)
            require(
                pods is not None,
                f"{where}.sliceSize",
                "an elastic job's node count changes, so slices cannot divide it",
                "give a fixed node count, or drop the slice",
            )
            assert pods is not None
            require(
                pods % self.slice_size == 0,
                f"{where}.sliceSize",
                f"{self.slice_size} does not divide the group's {pods} nodes",
                f"use a divisor of {pods}: {', '.join(str(d) for d in range(1, pods + 1) if pods % d == 0)}",
            )


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of one shape (`nodeGroups[i]`): a node count, GPUs and processes per node, and the
    scheduling fields that differ per pool (A100 vs L4 nodes). The spec's own nodeSelector,
    tolerations and resources apply to every group; a group's entries add to or override them."""

    name: str = field(
        metadata=doc(
            "Group name, a DNS label unique in the job; names the group's Job/replicatedJob and pods.",
            minLength=1,
            maxLength=MAX_DNS_LABEL,
            pattern=DNS1123_LABEL.pattern,
        )
    )
    nodes: int = field(metadata=doc("Nodes (pods) of this shape.", minimum=1, maximum=MAX_NODES))
    gpus_per_node: int = field(metadata=doc("GPUs per node; 0 in every group runs on CPU with gloo.", minimum=0))
    procs_per_node: int | None = field(
        default=None, metadata=doc("Processes per node; null = one per GPU (2 on CPU).", minimum=1)
    )
    node_selector: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "Node labels this group's pods need, added to nodeSelector (the group's win).",
            **string_map({"type": "string", "pattern": bounded(LABEL_VALUE)}),
        ),
    )
    tolerations: tuple[Mapping[str, Any], ...] = field(
        default=(),
        metadata=doc(
            "Taints this group's pods tolerate, added to tolerations.",
            items=TOLERATION,
        ),
    )
    resources: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "cpu and/or memory of this group's pods, over resources' (GPUs come from gpusPerNode).",
            properties={k: {"type": "string", "pattern": QUANTITY_PATTERN} for k in ("cpu", "memory")},
            additionalProperties=False,
        ),
    )
    gpu_resource: str | None = field(
        default=None,
        metadata=doc(
            "Extended resource that counts this group's GPUs; null: resources.gpuResource.",
            pattern=RESOURCE_NAME.pattern,
        ),
    )
    topology: Topology | None = field(
        default=None,
        metadata=doc(
            "Kueue topology request of this group's pods, in place of the spec's topology; null: the spec's.",
            anyOf=[{"type": "null"}, Topology],
        ),
    )

    def __post_init__(self) -> None:
        for name in ("node_selector", "resources"):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                object.__setattr__(self, name, _FrozenDict(sorted(value.items())))
        tolerations: Any = self.tolerations  # a list when built from YAML
        if isinstance(tolerations, list):
            object.__setattr__(self, "tolerations", tuple(tolerations))

    @property
    def nproc(self) -> int:
        """Processes per node of this group: one per GPU, else the CPU process count (2 when not given)."""
        if self.procs_per_node is not None:
            return self.procs_per_node
        return self.gpus_per_node or 2


@dataclass(frozen=True)
class JobSpec:
    """One DDP training job, as the user asked for it. Frozen: derive, never mutate."""

    name: str = field(
        default="ddp-train",
        metadata=doc(
            "Job name (a DNS-1035 label: lowercase letters, digits, '-', starting with a letter). Objects, pods and "
            "Services are named after it, NOT after the Helm release, so the objects equal `ddpctl render`'s. Pod "
            "names derived from it must stay within 63 characters.",
            minLength=1,
            maxLength=MAX_DNS_LABEL,
            pattern=DNS1035_LABEL.pattern,
        ),
    )
    namespace: str = field(
        default="default",
        metadata=doc(
            "Namespace of every object. Usually set it equal to the release namespace (`helm install -n NS`, "
            "Argo CD `destination.namespace`, Flux `targetNamespace`).",
            minLength=1,
            maxLength=MAX_DNS_LABEL,
            pattern=DNS1123_LABEL.pattern,
        ),
    )
    target: str = field(
        default="job",
        metadata=doc(
            "Engine: job (Indexed Job + headless Service, no operator needed), pytorchjob (Kubeflow Training "
            "Operator v1), jobset (JobSet controller) or trainjob (Kubeflow Trainer v2).",
            enum=TARGETS,
        ),
    )
    image: str = field(
        default=DEFAULT_IMAGE, metadata=doc("Trainer image (`ddpctl build` makes one).", pattern=IMAGE.pattern)
    )
    image_pull_policy: str = field(
        default="IfNotPresent", metadata=doc("Always, IfNotPresent or Never.", enum=PULL_POLICIES)
    )
    image_pull_secrets: tuple[str, ...] = field(
        default=(), metadata=doc("Names of Secrets used to pull the image.", items=SECRET_NAME)
    )
    # What each node runs: torchrun of a module (default: the ddpctl trainer) or a script,
    # or a full command that replaces torchrun.
    module: str | None = field(
        default=TRAINER_MODULE,
        metadata=doc(
            "Python module torchrun runs on every node (default: the ddpctl trainer). The container runs "
            "`torchrun -m <module>`; set it to null when you give script or command.",
            pattern=MODULE.pattern,
        ),
    )
    script: str | None = field(
        default=None,
        metadata=doc(
            "Or a script path inside the image: `torchrun <script>` (set module: null).",
            minLength=1,
            pattern=no_chars(CONTROL_CLASS, min_one=True),
        ),
    )
    command: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            "Or a full container command that replaces torchrun, e.g. [python, train.py] (set module: null).",
            items=[{"type": "string", "minLength": 1, "pattern": NO_NUL}],
            additionalItems={"type": "string", "pattern": NO_NUL},
        ),
    )
    args: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            'Arguments after the module/script/command, e.g. [--epochs, "10"] (strings). With the ddpctl trainer, '
            "volumes named `data` and `checkpoints` add --data-dir/--checkpoint-dir.",
            items={"type": "string", "pattern": NO_NUL},
        ),
    )
    # Layout: `nodes` fixed, or elastic between min_nodes and max_nodes.
    nodes: int = field(
        default=2,
        metadata=doc(
            'Nodes (pods): a number N, or "MIN:MAX" (a string) for an elastic job with c10d rendezvous.',
            oneOf=[
                {"type": "integer", "minimum": 1, "maximum": MAX_NODES},
                {"type": "string", "pattern": "^0*[1-9][0-9]*(:0*[1-9][0-9]*)?$"},
            ],
        ),
    )
    min_nodes: int | None = None  # set from nodes "MIN:MAX"; not a key of its own
    max_nodes: int | None = None
    gpus_per_node: int = field(
        default=0,
        metadata=doc(
            "GPUs per node; 0 runs on CPU with gloo. GPUs add a toleration for resources.gpuResource.", minimum=0
        ),
    )
    procs_per_node: int | None = field(
        default=None,
        metadata=doc(
            "Processes per node; null = one per GPU (2 on CPU). At most gpusPerNode when GPUs are used.", minimum=1
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
            items=NodeGroup,
        ),
    )
    backend: str = field(
        default="auto",
        metadata=doc("Process-group backend: auto (nccl with GPUs, gloo without), nccl or gloo.", enum=BACKENDS),
    )
    rendezvous: Rendezvous = field(default_factory=Rendezvous, metadata=doc("How ranks find rank 0."))
    resources: Resources = field(default_factory=Resources, metadata=doc("Per-pod resources."))
    shm_size: str = field(
        default="2Gi",
        metadata=doc(
            "Size of the memory-backed /dev/shm emptyDir (DataLoader workers need more than 64M).",
            pattern=QUANTITY_PATTERN,
        ),
    )
    env: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "Environment variables, a map NAME: value (strings). Yours win over ddpctl's wiring. An object store's "
            "secrets (AWS_SECRET_ACCESS_KEY, ...) go in secretEnv instead.",
            # YAML numbers are kept as written (`env_value`); booleans are refused.
            **string_map({"type": ["string", "number"], "pattern": NO_NUL}, keys=ENV_NAME.pattern),
            properties=dict.fromkeys(protocol.OBJECT_STORE_SECRET_ENV, False),
        ),
    )
    env_from_secrets: tuple[str, ...] = field(
        default=(),
        metadata=doc("Secrets whose keys all become env variables (referenced, never inlined).", items=SECRET_NAME),
    )
    secret_env: Mapping[str, SecretKeyRef] = field(
        default_factory=dict,
        metadata=doc(
            "Env variables read from Secrets: a map VAR: {secret: NAME, key: KEY}.",
            patternProperties={ENV_NAME.pattern: SecretKeyRef},
            additionalProperties=False,
        ),
    )
    volumes: Mapping[str, Volume] = field(
        default_factory=dict,
        metadata=doc(
            "PersistentVolumeClaims to mount: a map NAME: {claimName, mountPath, readOnly (default false)}. `data` "
            "and `checkpoints` are passed to the ddpctl trainer. The name `dshm` is reserved.",
            patternProperties={bounded(DNS1123_LABEL): Volume},
            properties={"dshm": False},
            additionalProperties=False,
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
            pattern=CHECKPOINT_URL_PATTERN,
        ),
    )
    node_selector: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "Node labels the pods need (map).", **string_map({"type": "string", "pattern": bounded(LABEL_VALUE)})
        ),
    )
    tolerations: tuple[Mapping[str, Any], ...] = field(
        default=(),
        metadata=doc(
            "Taints the pods tolerate: a list of {key, operator, value, effect, tolerationSeconds}.",
            items=TOLERATION,
        ),
    )
    affinity: Mapping[str, Any] = field(
        default_factory=dict,
        metadata=doc(
            "Pod affinity: a map with nodeAffinity, podAffinity and/or podAntiAffinity.",
            properties={kind: {"type": "object"} for kind in AFFINITY_KINDS},
            additionalProperties=False,
        ),
    )
    priority_class_name: str | None = field(
        default=None,
        metadata=doc(
            "PriorityClass of the pods (not available with target trainjob); null: none.",
            maxLength=253,
            pattern=DNS1123_SUBDOMAIN.pattern,
        ),
    )
    service_account_name: str | None = field(
        default=None,
        metadata=doc(
            "ServiceAccount of the pods; null: the namespace's default.",
            maxLength=253,
            pattern=DNS1123_SUBDOMAIN.pattern,
        ),
    )
    labels: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "Labels on every object and pod (map). ddpctl's app.kubernetes.io/* labels win on a clash.",
            **string_map({"type": "string", "pattern": bounded(LABEL_VALUE)}),
        ),
    )
    annotations: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc("Annotations on every object and pod (map).", **string_map({"type": "string", "pattern": NO_NUL})),
    )
    queue: str | None = field(
        default=None,
        metadata=doc(
            "Kueue LocalQueue (adds the kueue.x-k8s.io/queue-name label); null: none.",
            minLength=1,
            pattern=bounded(LABEL_VALUE),
        ),
    )
    workload_priority_class: str | None = field(
        default=None,
        metadata=doc(
            "Kueue WorkloadPriorityClass (adds the kueue.x-k8s.io/priority-class label; not the pods' "
            "priorityClassName); null: none.",
            minLength=1,
            pattern=bounded(LABEL_VALUE),
        ),
    )
    topology: Topology = field(
        default_factory=Topology,
        metadata=doc(
            "Kueue Topology Aware Scheduling: where each node group's pods may land (one of required, "
            "preferred, unconstrained; optional slices). Empty: no request."
        ),
    )
    restart_policy: str | None = field(
        default=None,
        metadata=doc(
            "Pod restart policy: Never, OnFailure, or ExitCode (pytorchjob); null: the target's "
            "(Never plus failure rules; ExitCode on pytorchjob running the ddpctl trainer).",
            enum=(*RESTART_POLICIES, None),
        ),
    )
    backoff_limit: int = field(
        default=DEFAULT_BACKOFF_LIMIT,
        metadata=doc("Restarts after failures before the job is marked failed (preemptions do not count).", minimum=0),
    )
    ttl_seconds_after_finished: int | None = field(
        default=86400, metadata=doc("Seconds a finished job is kept before cleanup; null: forever.", minimum=0)
    )
    active_deadline_seconds: int | None = field(
        default=None, metadata=doc("Seconds before a running job is stopped; null: no limit.", minimum=1)
    )
    grace_period: int = field(
        default=DEFAULT_GRACE_PERIOD,
        metadata=doc(
            "Seconds from a pod's SIGTERM (preemption, drain, delete) to its SIGKILL: the pods' "
            "terminationGracePeriodSeconds. The ddpctl trainer uses it to finish its step and write a checkpoint; "
            f"torchrun waits up to {GRACE_MARGIN} s less for its workers (TORCH_ELASTIC_SHUTDOWN_TIMEOUT), so it "
            "reports before the kubelet kills the pod.",
            minimum=MIN_GRACE_PERIOD,
        ),
    )
    collective_timeout: int | None = field(
        default=None,
        metadata=doc(
            "Seconds a rank of the ddpctl trainer waits in one collective (its process-group timeout, "
            "DDP_TRAINER_TIMEOUT_S) before failing, so the group stops and restarts when a peer died "
            "mid-collective; null: the trainer's default (600). Keep it above the longest checkpoint write "
            "(ranks wait in a barrier meanwhile) and the stall watchdog's timeout.",
            minimum=1,
        ),
    )
    pod_security: str = field(
        default="restricted",
        metadata=doc("Pod Security profile the pods meet: restricted (default) or baseline.", enum=POD_SECURITY),
    )
    # The trainer's stall watchdog (DDP_TRAINER_STALL_TIMEOUT); None: the trainer's default (300).
    stall_timeout: int | None = field(
        default=None,
        metadata=doc(
            "Seconds without progress on any rank before the trainer stops a hung job and names the rank "
            "(exit code 200); null: the trainer's 300, 0: off.",
            minimum=0,
        ),
    )

    def __post_init__(self) -> None:
        # Normalise containers to immutable, sorted forms so equal specs render byte-identically.
        freeze = object.__setattr__
        for name in ("image_pull_secrets", "command", "args", "env_from_secrets", "tolerations", "node_groups"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise SpecError(camel(name), f"expected a list, got {type(value).__name__}", "write it as a YAML list")
            freeze(self, name, tuple(value))
        for name in ("env", "secret_env", "volumes", "node_selector", "affinity", "labels", "annotations"):
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                raise SpecError(
                    camel(name), f"expected a map, got {type(value).__name__}", "write it as key: value pairs"
                )
            freeze(self, name, _FrozenDict(sorted(value.items())) if name != "affinity" else _FrozenDict(value))
        if self.node_groups:
            self._validate_node_groups()
            # The totals the rest of ddpctl reads (backend choice, notes); per-node values come from `nodes_layout`.
            freeze(self, "nodes", sum(g.nodes for g in self.node_groups))
            freeze(self, "gpus_per_node", max(g.gpus_per_node for g in self.node_groups))
            freeze(self, "procs_per_node", None)
        self._validate()

    # ---------------------------------------------------------------- validation

    def _validate(self) -> None:
        one_of("target", self.target, TARGETS)
        check_dns_label("name", self.name, rfc1035=True)
        check_dns_label("namespace", self.namespace)
        self._validate_layout()
        require(
            isinstance(self.image, str) and bool(IMAGE.fullmatch(self.image or "")),
            "image",
            f"{self.image!r} is not an image reference",
            "use a reference like 'registry.example.com/team/trainer:1.0'",
        )
        one_of("imagePullPolicy", self.image_pull_policy, PULL_POLICIES)
        for i, secret in enumerate(self.image_pull_secrets):
            check_dns_label(f"imagePullSecrets[{i}]", secret)
        self._validate_entrypoint()
        one_of("backend", self.backend, BACKENDS)
        require(
            not (self.backend == "nccl" and self.gpus_per_node == 0),
            "backend",
            "nccl needs GPUs but gpusPerNode is 0",
            "use backend gloo (or auto), or set gpusPerNode",
        )
        self._validate_rendezvous()
        self._validate_resources()
        self._validate_pod_fields()
        self._validate_checkpoints()
        self._validate_topology()
        if self.restart_policy is not None:
            one_of("restartPolicy", self.restart_policy, RESTART_POLICIES)
        positive_int("backoffLimit", self.backoff_limit, minimum=0)
        positive_int("ttlSecondsAfterFinished", self.ttl_seconds_after_finished, minimum=0, allow_none=True)
        positive_int("activeDeadlineSeconds", self.active_deadline_seconds, minimum=1, allow_none=True)
        positive_int("collectiveTimeout", self.collective_timeout, minimum=1, allow_none=True)
        positive_int("gracePeriod", self.grace_period, minimum=MIN_GRACE_PERIOD)
        one_of("podSecurity", self.pod_security, POD_SECURITY)
        positive_int("stallTimeout", self.stall_timeout, minimum=0, allow_none=True)
        if self.uses_trainer and self.collective_timeout is not None:
            stall = TRAINER_STALL_TIMEOUT if self.stall_timeout is None else self.stall_timeout
            require(
                stall == 0 or stall < self.collective_timeout,
                "collectiveTimeout",
                f"{self.collective_timeout} is not above the stall watchdog's {stall} s (stallTimeout): the trainer "
                "would refuse to start",
                f"set collectiveTimeout above {stall}, or lower stallTimeout",
            )
        elif self.uses_trainer and self.stall_timeout:
            require(
                self.stall_timeout < TRAINER_COLLECTIVE_TIMEOUT,
                "stallTimeout",
                f"{self.stall_timeout} is not below the trainer's process-group timeout of "
                f"{TRAINER_COLLECTIVE_TIMEOUT} s (collectiveTimeout): the trainer would refuse to start",
                f"set stallTimeout below {TRAINER_COLLECTIVE_TIMEOUT}, or raise collectiveTimeout",
            )

    def _validate_entrypoint(self) -> None:
        chosen = [n for n, v in (("module", self.module), ("script", self.script), ("command", self.command)) if v]
        require(
            len(chosen) == 1,
            "module",
            f"exactly one of module, script or command must be set, got {', '.join(chosen) or 'none'}",
            "set just one of them",
        )
        if self.module:
            require(
                bool(MODULE.fullmatch(self.module)),
                "module",
                f"{self.module!r} is not a Python module path",
                "use a dotted name like 'mypkg.train'",
            )
        if self.script:
            check_plain_string("script", self.script, allow_empty=False)
            require(
                not CONTROL_CHARS.search(self.script),
                "script",
                "contains control characters",
                "give a plain file path",
            )
        for i, part in enumerate(self.command):
            check_plain_string(f"command[{i}]", part, allow_empty=i > 0)
        for i, arg in enumerate(self.args):
            check_plain_string(f"args[{i}]", arg)

    def _validate_layout(self) -> None:
        elastic = self.min_nodes is not None or self.max_nodes is not None
        if elastic:
            for bound, value in (("minimum", self.min_nodes), ("maximum", self.max_nodes)):
                require(  # nodes: "MIN:MAX" is one key of ddp.yaml
                    isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                    "nodes",
                    f"the elastic {bound} {yaml_spelling(value)} is not a node count of at least 1",
                    "write nodes as MIN:MAX with 1 <= MIN <= MAX",
                )
            lo, hi = self.min_nodes, self.max_nodes
            assert lo is not None and hi is not None  # refused above
            require(lo <= hi, "nodes", f"min {lo} is more than max {hi}", "write nodes as MIN:MAX with MIN <= MAX")
            require(hi <= MAX_NODES, "nodes", f"max {hi} is more than {MAX_NODES}", f"use at most {MAX_NODES} nodes")
        else:
            positive_int("nodes", self.nodes)
            require(
                self.nodes <= MAX_NODES,
                "nodes",
                f"{self.nodes} is more than {MAX_NODES}",
                f"use at most {MAX_NODES} nodes",
            )
        positive_int("gpusPerNode", self.gpus_per_node, minimum=0)
        positive_int("procsPerNode", self.procs_per_node, allow_none=True)
        if self.gpus_per_node and self.procs_per_node is not None:
            require(
                self.procs_per_node <= self.gpus_per_node,
                "procsPerNode",
                f"{self.procs_per_node} processes cannot share {self.gpus_per_node} GPUs one each",
                "leave procsPerNode unset to use one process per GPU",
            )

    def _validate_node_groups(self) -> None:
        """Each group: a unique DNS-label name, a node count, GPUs and processes per node; GPUs in
        every group or in none (one backend serves the whole job)."""
        seen: set[str] = set()
        for i, group in enumerate(self.node_groups):
            where = f"nodeGroups[{i}]"
            require(isinstance(group, NodeGroup), where, "must be a map", "write it as {name, nodes, gpusPerNode}")
            check_dns_label(f"{where}.name", group.name)
            require(
                group.name not in seen, f"{where}.name", f"{group.name!r} is used twice", "give each group its own name"
            )
            seen.add(group.name)
            positive_int(f"{where}.nodes", group.nodes)
            positive_int(f"{where}.gpusPerNode", group.gpus_per_node, minimum=0)
            positive_int(f"{where}.procsPerNode", group.procs_per_node, allow_none=True)
            if group.gpus_per_node and group.procs_per_node is not None:
                require(
                    group.procs_per_node <= group.gpus_per_node,
                    f"{where}.procsPerNode",
                    f"{group.procs_per_node} processes cannot share {group.gpus_per_node} GPUs one each",
                    "leave procsPerNode unset to use one process per GPU",
                )
            first = self.node_groups[0]
            require(
                bool(group.gpus_per_node) == bool(first.gpus_per_node),
                f"{where}.gpusPerNode",
                f"{group.gpus_per_node} GPUs here but {first.gpus_per_node} in nodeGroups[0]: "
                "one backend serves the whole job",
                "give every group GPUs, or none (CPU processes with gloo)",
            )
            check_node_selector(f"{where}.nodeSelector", group.node_selector)
            check_tolerations(f"{where}.tolerations", group.tolerations)
            require(
                isinstance(group.resources, Mapping) and set(group.resources) <= {"cpu", "memory"},
                f"{where}.resources",
                "only cpu and memory can be set per group",
                "write it as {cpu: '8', memory: 64Gi}; GPUs come from gpusPerNode and gpuResource",
            )
            for key, value in group.resources.items():
                check_quantity(f"{where}.resources.{key}", value)
            if group.gpu_resource is not None:
                require(
                    isinstance(group.gpu_resource, str) and bool(RESOURCE_NAME.fullmatch(group.gpu_resource)),
                    f"{where}.gpuResource",
                    f"{group.gpu_resource!r} is not a resource name",
                    "use a name like 'nvidia.com/gpu'",
                )
        require(
            self.min_nodes is None and self.max_nodes is None,
            "nodeGroups",
            "an elastic job (nodes MIN:MAX) cannot have node groups",
            "give fixed node counts per group, or drop nodeGroups for an elastic job",
        )
        total = sum(g.nodes for g in self.node_groups)
        require(
            total <= MAX_NODES,
            "nodeGroups",
            f"{total} nodes in all is more than {MAX_NODES}",
            f"use at most {MAX_NODES} nodes",
        )

    def _validate_topology(self) -> None:
        require(isinstance(self.topology, Topology), "topology", "must be a map", "see `ddpctl init` for its keys")
        for i, group in enumerate(self.groups):
            where = f"nodeGroups[{i}].topology" if group.topology is not None else "topology"
            topology = self.topology_of(group)
            require(isinstance(topology, Topology), where, "must be a map", "write it as {required: LEVEL}")
            topology.check(where, None if self.elastic else (group.nodes if self.node_groups else self.nodes))

    def _validate_rendezvous(self) -> None:
        rdzv = self.rendezvous
        require(isinstance(rdzv, Rendezvous), "rendezvous", "must be a map", "see `ddpctl init` for its keys")
        one_of("rendezvous.mode", rdzv.mode, RDZV_MODES)
        require(
            not (self.elastic and rdzv.mode == "static"),
            "rendezvous.mode",
            "an elastic job (nodes MIN:MAX) cannot use static rendezvous",
            "use mode c10d or auto",
        )
        positive_int("rendezvous.port", rdzv.port)
        require(
            rdzv.port <= 65535, "rendezvous.port", f"{rdzv.port} is not a TCP port", "use a port between 1 and 65535"
        )
        positive_int("rendezvous.joinTimeout", rdzv.join_timeout)
        positive_int("rendezvous.lastCallTimeout", rdzv.last_call_timeout)
        positive_int("rendezvous.maxRestarts", rdzv.max_restarts, minimum=0)

    def _validate_resources(self) -> None:
        res = self.resources
        require(isinstance(res, Resources), "resources", "must be a map", "see `ddpctl init` for its keys")
        if res.cpu is not None:
            check_quantity("resources.cpu", res.cpu)
        if res.memory is not None:
            check_quantity("resources.memory", res.memory)
        require(
            isinstance(res.gpu_resource, str) and bool(RESOURCE_NAME.fullmatch(res.gpu_resource)),
            "resources.gpuResource",
            f"{res.gpu_resource!r} is not a resource name",
            "use a name like 'nvidia.com/gpu'",
        )
        check_quantity("shmSize", self.shm_size)

    def _validate_checkpoints(self) -> None:
        """An object store URL the trainer can read, with nothing in it that belongs elsewhere (credentials)
        and no second place for the same checkpoints."""
        url = self.checkpoints
        if url is None:
            return
        check_plain_string("checkpoints", url, allow_empty=False)
        wrong = protocol.checkpoint_url_problem(url)
        if wrong is not None:
            raise SpecError("checkpoints", *wrong)
        require(
            self.uses_trainer,
            "checkpoints",
            f"is read by the ddpctl trainer only (module {protocol.TRAINER_MODULE})",
            "give your own script its checkpoint location in args or env, and drop checkpoints",
        )
        require(
            "checkpoints" not in self.volumes,
            "checkpoints",
            "is set together with a volume named checkpoints",
            "keep one: the object store URL or the volume",
        )
        require(
            not any(a == "--checkpoint-dir" or a.startswith("--checkpoint-dir=") for a in self.args),
            "checkpoints",
            "is set together with --checkpoint-dir in args",
            "keep one of them",
        )

    def _validate_pod_fields(self) -> None:
        for key, value in self.env.items():
            require(  # the value is not repeated: it is a secret
                key not in protocol.OBJECT_STORE_SECRET_ENV,
                f"env.{key}",
                "would put a secret in plain text into every pod's manifest",
                f"keep it in a Secret and reference it: secretEnv {key}: {{secret: NAME, key: KEY}}",
            )
            require(
                isinstance(key, str) and bool(ENV_NAME.fullmatch(key)),
                f"env.{key}",
                "is not a valid environment variable name",
                "use letters, digits, '_', '-' or '.', not starting with a digit",
            )
            check_plain_string(f"env.{key}", value)
        for i, secret in enumerate(self.env_from_secrets):
            check_dns_label(f"envFromSecrets[{i}]", secret)
        for key, ref in self.secret_env.items():
            require(
                bool(ENV_NAME.fullmatch(key)),
                f"secretEnv.{key}",
                "is not a valid environment variable name",
                "use letters, digits and '_'",
            )
            require(
                isinstance(ref, SecretKeyRef),
                f"secretEnv.{key}",
                "must name a secret and a key",
                "write it as {secret: NAME, key: KEY}",
            )
            check_dns_label(f"secretEnv.{key}.secret", ref.secret)
            require(
                isinstance(ref.key, str) and bool(SECRET_KEY.fullmatch(ref.key)),
                f"secretEnv.{key}.key",
                f"{ref.key!r} is not a Secret key",
                "use letters, digits, '-', '_' or '.'",
            )
        clash = set(self.env) & set(self.secret_env)
        require(
            not clash, "secretEnv", f"{', '.join(sorted(clash))} is also set in env", "set each variable in one place"
        )
        mounts: dict[str, str] = {}
        for vname, vol in self.volumes.items():
            check_dns_label(f"volumes.{vname}", vname)
            require(
                vname != "dshm",
                f"volumes.{vname}",
                "the name 'dshm' is reserved for /dev/shm",
                "choose another volume name",
            )
            require(
                isinstance(vol, Volume),
                f"volumes.{vname}",
                "must give claimName and mountPath",
                "write it as {claimName: PVC, mountPath: /path}",
            )
            check_dns_subdomain(f"volumes.{vname}.claimName", vol.claim_name)
            require(
                isinstance(vol.mount_path, str)
                and vol.mount_path.startswith("/")
                and not CONTROL_CHARS.search(vol.mount_path)
                and ":" not in vol.mount_path,
                f"volumes.{vname}.mountPath",
                f"{vol.mount_path!r} is not an absolute path",
                "use a path like /data",
            )
            require(
                vol.mount_path.rstrip("/") != SHM_MOUNT,
                f"volumes.{vname}.mountPath",
                "/dev/shm is managed by shmSize",  # noqa: S108 - a message, not a path
                "mount the volume elsewhere",
            )
            require(
                vol.mount_path not in mounts,
                f"volumes.{vname}.mountPath",
                f"{vol.mount_path} is also used by volume {mounts.get(vol.mount_path)}",
                "give each volume its own path",
            )
            mounts[vol.mount_path] = vname
        check_node_selector("nodeSelector", self.node_selector)
        check_tolerations("tolerations", self.tolerations)
        for key in self.affinity:
            require(
                key in AFFINITY_KINDS,
                f"affinity.{key}",
                "is not an affinity kind",
                "use nodeAffinity, podAffinity or podAntiAffinity",
            )
        check_json_like("affinity", self.affinity)
        for fname, object_name in (
            ("priorityClassName", self.priority_class_name),
            ("serviceAccountName", self.service_account_name),
        ):
            if object_name is not None:
                check_dns_subdomain(fname, object_name)
        for key, value in self.labels.items():
            check_label_key(f"labels.{key}", key)
            check_label_value(f"labels.{key}", value)
        for key, value in self.annotations.items():
            check_label_key(f"annotations.{key}", key)
            check_plain_string(f"annotations.{key}", value)
        if self.queue is not None:
            check_label_value("queue", self.queue)
            require(bool(self.queue), "queue", "must not be empty", "name a Kueue LocalQueue or leave queue unset")
        if self.workload_priority_class is not None:
            check_label_value("workloadPriorityClass", self.workload_priority_class)
            require(
                bool(self.workload_priority_class),
                "workloadPriorityClass",
                "must not be empty",
                "name a Kueue WorkloadPriorityClass or leave it unset",
            )

    # ---------------------------------------------------------------- reading the fields
    # What the fields say, read once for the checks above; what a spec derives with its engine
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

    # ---------------------------------------------------------------- (de)serialisation

    def replace(self, **changes: Any) -> JobSpec:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """Build from the camelCase form of ddp.yaml / Helm values; unknown keys are errors."""
        return cls(**_kwargs_from_dict(data))

    def to_dict(self) -> dict[str, Any]:
        """The camelCase form, round-trippable through `from_dict` (what `init` and Helm values use)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            key = camel(f.name)
            if f.name in ("min_nodes", "max_nodes"):
                continue
            if self.node_groups and f.name in ("nodes", "gpus_per_node", "procs_per_node"):
                continue  # given per group
            if f.name == "node_groups":
                out[key] = [_group_dict(g) for g in value]
                continue
            if f.name == "nodes":
                out[key] = f"{self.min_nodes}:{self.max_nodes}" if self.elastic else self.nodes
            elif isinstance(value, (Rendezvous, Resources, Topology)):
                out[key] = {camel(k): v for k, v in dataclasses.asdict(value).items()}
            elif f.name == "volumes":
                out[key] = {k: {camel(a): b for a, b in dataclasses.asdict(v).items()} for k, v in value.items()}
            elif f.name == "secret_env":
                out[key] = {k: {"secret": v.secret, "key": v.key} for k, v in value.items()}
            elif isinstance(value, tuple):
                out[key] = [dict(v) if isinstance(v, Mapping) else v for v in value]
            elif isinstance(value, Mapping):
                out[key] = plain(value)
            else:
                out[key] = value
        return out


class _FrozenDict(dict[str, Any]):
    """A dict that refuses mutation, so a frozen JobSpec stays frozen all the way down."""

    def _refuse(self, *_: Any, **__: Any) -> None:
        raise TypeError("JobSpec maps are read-only; use JobSpec.replace")

    # one refusing method stands in for every mutator, whatever its signature
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]  # dict sets __hash__ = None; a frozen map can hash
        return hash(tuple(sorted((k, repr(v)) for k, v in self.items())))


def _group_dict(group: NodeGroup) -> dict[str, Any]:
    out: dict[str, Any] = {"name": group.name, "nodes": group.nodes, "gpusPerNode": group.gpus_per_node}
    if group.procs_per_node is not None:
        out["procsPerNode"] = group.procs_per_node
    if group.node_selector:
        out["nodeSelector"] = dict(group.node_selector)
    if group.tolerations:
        out["tolerations"] = [dict(t) for t in group.tolerations]
    if group.resources:
        out["resources"] = dict(group.resources)
    if group.gpu_resource is not None:
        out["gpuResource"] = group.gpu_resource
    if group.topology is not None:
        out["topology"] = {camel(k): v for k, v in dataclasses.asdict(group.topology).items()}
    return out


_SPEC_FIELDS = {f.name for f in dataclasses.fields(JobSpec)} - {"min_nodes", "max_nodes"}
_SPEC_KEYS = sorted(camel(n) for n in _SPEC_FIELDS)


_GROUP_KEYS = {
    "name": "name",
    "nodes": "nodes",
    "gpusPerNode": "gpus_per_node",
    "procsPerNode": "procs_per_node",
    "nodeSelector": "node_selector",
    "tolerations": "tolerations",
    "resources": "resources",
    "gpuResource": "gpu_resource",
    "topology": "topology",
}


def _node_groups(value: Any) -> tuple[NodeGroup, ...]:
    """nodeGroups: a list of {name, nodes, gpusPerNode, procsPerNode?, nodeSelector?, tolerations?,
    resources?, gpuResource?}; each error names the group's index and key."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise SpecError("nodeGroups", f"expected a list, got {type(value).__name__}", "write it as a YAML list")
    groups = []
    for i, item in enumerate(value):
        where = f"nodeGroups[{i}]"
        if not isinstance(item, Mapping):
            raise SpecError(
                where, f"expected a map, got {type(item).__name__}", "write it as {name, nodes, gpusPerNode}"
            )
        for key in item:
            if key not in _GROUP_KEYS:
                raise SpecError(f"{where}.{key}", "is not a known key", f"use one of {', '.join(_GROUP_KEYS)}")
        for key in ("name", "nodes", "gpusPerNode"):
            if key not in item:
                raise SpecError(f"{where}.{key}", "is missing", f"give every group {key}")
        kwargs = {_GROUP_KEYS[k]: v for k, v in item.items()}
        for key in ("node_selector", "resources"):
            if kwargs.get(key) is None:
                kwargs[key] = {}
            elif not isinstance(kwargs[key], Mapping):
                raise SpecError(f"{where}.{camel(key)}", "expected a map", "write it as key: value pairs")
        if kwargs.get("topology") is not None:
            kwargs["topology"] = sub_dataclass(Topology, f"{where}.topology", kwargs["topology"])
        if kwargs.get("tolerations") is None:
            kwargs["tolerations"] = ()
        elif not isinstance(kwargs["tolerations"], (list, tuple)):
            raise SpecError(f"{where}.tolerations", "expected a list", "write it as a YAML list")
        groups.append(NodeGroup(**kwargs))
    return tuple(groups)


def _kwargs_from_dict(data: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise SpecError(
            "spec", f"expected a map at the top level, got {type(data).__name__}", "see `ddpctl init` for an example"
        )
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = snake(str(key))
        if name not in _SPEC_FIELDS or key != camel(name):
            raise SpecError(str(key), "is not a known key", key_fix(str(key), _SPEC_KEYS))
        if name == "nodes":
            kwargs["nodes"], kwargs["min_nodes"], kwargs["max_nodes"] = parse_nodes(value)
        elif name == "node_groups":
            kwargs[name] = _node_groups(value)
        elif name == "rendezvous":
            kwargs[name] = sub_dataclass(Rendezvous, key, value)
        elif name == "resources":
            kwargs[name] = sub_dataclass(Resources, key, value)
        elif name == "topology":
            kwargs[name] = sub_dataclass(Topology, key, {} if value is None else value)
        elif name == "volumes" and value is not None:
            if not isinstance(value, Mapping):
                raise SpecError(key, "expected a map of volume name to {claimName, mountPath}", "see `ddpctl init`")
            kwargs[name] = {k: sub_dataclass(Volume, f"volumes.{k}", v) for k, v in value.items()}
        elif name == "secret_env" and value is not None:
            if not isinstance(value, Mapping):
                raise SpecError(key, "expected a map of VAR to {secret, key}", "see `ddpctl init`")
            kwargs[name] = {k: sub_dataclass(SecretKeyRef, f"secretEnv.{k}", v) for k, v in value.items()}
        elif name == "env" and isinstance(value, Mapping):
            kwargs[name] = {k: env_value(f"env.{k}", v) for k, v in value.items()}
        elif value is None and name in (
            "env",
            "secret_env",
            "volumes",
            "node_selector",
            "affinity",
            "labels",
            "annotations",
        ):
            kwargs[name] = {}
        elif value is None and name in ("image_pull_secrets", "command", "args", "env_from_secrets", "tolerations"):
            kwargs[name] = ()
        else:
            kwargs[name] = value
    if kwargs.get("node_groups"):
        both = [camel(k) for k in ("nodes", "gpus_per_node", "procs_per_node") if k in kwargs]
        if both:
            raise SpecError(
                "nodeGroups",
                f"is set together with {', '.join(both)}",
                "give nodes, gpusPerNode and procsPerNode in each group, or drop nodeGroups",
            )
    if kwargs.get("command") or kwargs.get("script"):
        kwargs.setdefault("module", None)  # a file that names a script/command replaces the default module
    return kwargs
