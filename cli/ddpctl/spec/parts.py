"""The parts of a job spec: a volume, a secret reference, rendezvous, resources, a Kueue topology
request and a node group, each a frozen dataclass of declared keys (spec/fields), checked as part
of the JobSpec that holds them (its errors name the key under the part's place: `volumes.data.mountPath`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from ddpctl.records import record
from ddpctl.spec import kueue
from ddpctl.spec.fields import (
    NODE_COUNT,
    Bool,
    CheckpointURL,
    DnsLabel,
    DnsSubdomain,
    GroupResources,
    Int,
    LabelKey,
    LabelValue,
    ListOf,
    MapOf,
    Matches,
    MountPath,
    Number,
    OneOf,
    Part,
    Quantity,
    Text,
    Tolerations,
    doc,
    flag,
    freeze,
)
from ddpctl.spec.names import ENV_NAME, RESOURCE_NAME, SECRET_KEY
from ddpctl.spec.schema import MAX_FLOOR, PREFLIGHT_MODES, RDZV_MODES, SHM_MOUNT, STRAGGLER_MODES, STRAGGLER_REFUSED
from ddpctl_trainer import protocol

# The rules several keys share (JobSpec's too).
SECRET_NAME = DnsLabel()
LEVEL = LabelKey()
GPU_RESOURCE = Matches(RESOURCE_NAME, "{value!r} is not a resource name", "use a name like 'nvidia.com/gpu'")
ENV_KEY = Matches(
    ENV_NAME,
    "is not a valid environment variable name",
    "use letters, digits, '_', '-' or '.', not starting with a digit",
)


@record
class Volume:
    """A PersistentVolumeClaim mounted into every pod (data sets, checkpoints)."""

    claim_name: str = field(metadata=doc("PersistentVolumeClaim name.", DnsSubdomain()))
    mount_path: str = field(metadata=doc(f"Absolute mount path (not {SHM_MOUNT}, which shmSize manages).", MountPath()))
    read_only: bool = field(default=False, metadata=doc("Mount read-only.", Bool()))


@record
class SecretKeyRef:
    """An env var whose value lives in a Secret: referenced, never inlined."""

    secret: str = field(metadata=doc("Secret name.", SECRET_NAME))
    key: str = field(
        metadata=doc(
            "Key in the Secret.",
            Matches(SECRET_KEY, "{value!r} is not a Secret key", "use letters, digits, '-', '_' or '.'"),
        )
    )


@record
class Rendezvous:
    """How ranks find rank 0: static master address/port, or c10d (required for elastic jobs)."""

    mode: str = field(
        default="auto",
        metadata=doc(
            "auto (static for a fixed node count, c10d for elastic), static or c10d.",
            OneOf(RDZV_MODES),
            flag("--rdzv", panel="Layout"),
        ),
    )
    port: int = field(
        default=29500,
        metadata=doc(
            "TCP port of rank 0's store (the trainjob runtime always uses 29500).",
            Int(1, 65535, above=("{value} is not a TCP port", "use a port between 1 and 65535")),
            flag("--port", panel="Layout"),
        ),
    )
    join_timeout: int = field(default=600, metadata=doc("c10d rendezvous join timeout, seconds.", Int(1)))
    last_call_timeout: int = field(default=30, metadata=doc("c10d rendezvous last-call timeout, seconds.", Int(1)))
    max_restarts: int = field(
        default=0,
        metadata=doc(
            "torchrun --max-restarts (worker group restarts inside a pod).",
            Int(0),
            flag("--max-restarts", panel="Lifecycle"),
        ),
    )


@record
class Resources:
    """Per-pod requests (cpu, memory) and GPU limits; GPUs are counted in `JobSpec.gpus_per_node`."""

    cpu: str | None = field(
        default=None,
        metadata=doc(
            'CPU request (a quantity such as "8" or "500m"); null: none.', Quantity(), flag("--cpu", panel="Resources")
        ),
    )
    memory: str | None = field(
        default=None,
        metadata=doc(
            'Memory request and limit (a quantity such as "64Gi"); null: none.',
            Quantity(),
            flag("--memory", panel="Resources"),
        ),
    )
    gpu_resource: str = field(
        default="nvidia.com/gpu",
        metadata=doc(
            "Extended resource that counts GPUs (limit = gpusPerNode).",
            GPU_RESOURCE,
            flag("--gpu-resource", panel="Resources"),
        ),
    )
    cpu_limit: str | None = field(
        default=None,
        metadata=doc(
            'CPU limit (a quantity such as "8" or "500m"); null: none. A limit is a quota the kernel enforces per '
            "100 ms: keep it at or above the cpu request.",
            Quantity(),
            flag("--cpu-limit", panel="Resources"),
        ),
    )
    fabric_resource: str | None = field(
        default=None,
        metadata=doc(
            "Extended resource that counts the fabric's network devices (limit = fabricDevices); null: the "
            "fabric's usual one (rdma/rdma_shared_device_a for infiniband and roce, vpc.amazonaws.com/efa for "
            "efa). Not used with fabric socket.",
            GPU_RESOURCE,
            flag("--fabric-resource", panel="Resources"),
        ),
    )
    fabric_devices: int = field(
        default=1,
        metadata=doc(
            "Network devices of the fabric per pod (its device plugin's count).",
            Int(1),
            flag("--fabric-devices", panel="Resources"),
        ),
    )


@record
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
            LEVEL,
        ),
    )
    preferred: str | None = field(
        default=None,
        metadata=doc(
            "Node label of the level Kueue tries first, going up a level when the pods do not fit "
            "(podset-preferred-topology); null: none.",
            LEVEL,
        ),
    )
    unconstrained: bool = field(
        default=False,
        metadata=doc("Any nodes with room, counted by Kueue's topology cache (podset-unconstrained-topology).", Bool()),
    )
    slice_level: str | None = field(
        default=None,
        metadata=doc(
            "Node label of the level one slice of sliceSize pods must fit (podset-slice-required-topology); "
            "null: no slices.",
            LEVEL,
        ),
    )
    slice_size: int | None = field(
        default=None, metadata=doc("Pods per slice; must divide the group's node count; null: no slices.", Int(1))
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


@record
class Preflight:
    """The preflight checks inside every job of the ddpctl trainer: after the rendezvous, before the
    first step, every rank measures its GEMM speed and the all-reduce's bus bandwidth (with 3 nodes
    or more, node pairs; on GPUs the host-to-device copy and NCCL's transport), and rank 0 names the
    node, rank or link below `tolerance` x the median or below a floor (docs/preflight.md)."""

    mode: str = field(
        default="off",
        metadata=doc(
            "Check every node before the first step: off, warn (report and train) or fail (end the job with "
            f"exit code {protocol.EXIT_PREFLIGHT} when a node, rank or link is slow, or NCCL fell back to sockets "
            "on a fast fabric). Only the ddpctl trainer runs it; `ddpctl check` runs it as a job of its own.",
            OneOf(PREFLIGHT_MODES),
            flag("--preflight", panel="Lifecycle"),
        ),
    )
    tolerance: float = field(
        default=protocol.PREFLIGHT_TOLERANCE,
        metadata=doc(
            "Name a node, rank or link below this share of the median (0.01 to 1).",
            Number(0.01, 1),
            flag("--preflight-tolerance", panel="Lifecycle"),
        ),
    )
    min_gflops: float = field(
        default=0, metadata=doc("Floor of a CPU node's GEMM rate, GFLOP/s; 0: none.", Number(0, MAX_FLOOR))
    )
    min_tflops: float = field(
        default=0, metadata=doc("Floor of a GPU's bfloat16 GEMM rate, TFLOP/s; 0: none.", Number(0, MAX_FLOOR))
    )
    min_busbw: float = field(
        default=0,
        metadata=doc(
            "Floor of the all-reduce's bus bandwidth, GB/s, over the job and each node pair; 0: none.",
            Number(0, MAX_FLOOR),
        ),
    )
    min_h2d: float = field(
        default=0, metadata=doc("Floor of a GPU's host-to-device copy, GB/s; 0: none.", Number(0, MAX_FLOOR))
    )

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def floors(self) -> dict[str, float]:
        """The floors set (camelCase key -> value)."""
        values = {"minGflops": self.min_gflops, "minTflops": self.min_tflops, "minBusbw": self.min_busbw}
        values["minH2d"] = self.min_h2d
        return {k: v for k, v in values.items() if v}


@record
class Stragglers:
    """Straggler detection during training: every rank times its own work per step, and every
    `every` steps the nodes are judged against the median speed; rank 0 names a node below
    `tolerance` x the median for `windows` windows in a row, and names it again when it recovers
    (docs/failures.md). The built-in trainer runs it; a script of one's own opts in with
    ddpctl_trainer.stragglers."""

    mode: str = field(
        default=protocol.STRAGGLER_MODE,
        metadata=doc(
            "Watch for a node that slows down during training: off, warn (name it and train on), fail (end the "
            f"job with exit code {protocol.EXIT_STRAGGLER}, naming the node) or replace (recovery: pod: the "
            "straggler's pod leaves and is replaced alone while the others keep their state; the replacement may "
            "land on the same Kubernetes node).",
            OneOf(STRAGGLER_MODES, refused=STRAGGLER_REFUSED),
            flag("--stragglers", panel="Lifecycle"),
        ),
    )
    tolerance: float = field(
        default=protocol.STRAGGLER_TOLERANCE,
        metadata=doc(
            "Name a node below this share of the median speed (above 0, below 1).",
            Number(0, 1, exclusive=True),
            flag("--stragglers-tolerance", panel="Lifecycle"),
        ),
    )
    every: int = field(
        default=protocol.STRAGGLER_EVERY,
        metadata=doc("Steps in a window: the nodes are judged once a window.", Int(1)),
    )
    windows: int = field(
        default=protocol.STRAGGLER_WINDOWS,
        metadata=doc("Windows in a row below the tolerance that name a node (and within it that clear it).", Int(1)),
    )

    @property
    def on(self) -> bool:
        return self.mode != "off"


@record
class NodeGroup:
    """Nodes of one shape (`nodeGroups[i]`): a node count, GPUs and processes per node, and the
    scheduling fields that differ per pool (A100 vs L4 nodes). The spec's own nodeSelector,
    tolerations and resources apply to every group; a group's entries add to or override them."""

    name: str = field(
        metadata=doc(
            "Group name, a DNS label unique in the job; names the group's Job/replicatedJob and pods.", DnsLabel()
        )
    )
    nodes: int = field(metadata=doc("Nodes (pods) of this shape.", NODE_COUNT))
    gpus_per_node: int = field(metadata=doc("GPUs per node; 0 in every group runs on CPU with gloo.", Int(0)))
    procs_per_node: int | None = field(
        default=None, metadata=doc("Processes per node; null = one per GPU (2 on CPU).", Int(1))
    )
    node_selector: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "Node labels this group's pods need, added to nodeSelector (the group's win).",
            MapOf(LabelKey(), LabelValue(), strings=True),
        ),
    )
    tolerations: tuple[Mapping[str, Any], ...] = field(
        default=(), metadata=doc("Taints this group's pods tolerate, added to tolerations.", Tolerations())
    )
    resources: Mapping[str, str] = field(
        default_factory=dict,
        metadata=doc(
            "cpu, memory and/or cpuLimit of this group's pods, over resources' (GPUs come from gpusPerNode).",
            GroupResources(),
        ),
    )
    gpu_resource: str | None = field(
        default=None,
        metadata=doc("Extended resource that counts this group's GPUs; null: resources.gpuResource.", GPU_RESOURCE),
    )
    topology: Topology | None = field(
        default=None,
        metadata=doc(
            "Kueue topology request of this group's pods, in place of the spec's topology; null: the spec's.",
            Part(Topology, fix="write it as {required: LEVEL}"),
        ),
    )

    def __post_init__(self) -> None:
        freeze(self)

    @property
    def nproc(self) -> int:
        """Processes per node of this group: one per GPU, else the CPU process count (2 when not given)."""
        if self.procs_per_node is not None:
            return self.procs_per_node
        return self.gpus_per_node or 2


@record
class Workspace:
    """Your own code, shipped to every pod without rebuilding the image: a folder packed as git and
    Docker choose its files (.gitignore, .dockerignore, likely secrets left out), checked and
    unpacked at /workspace before torchrun starts."""

    dir: str | None = field(
        default=None,
        metadata=doc(
            "Folder whose code is shipped to the pods (relative to where ddpctl runs); null: none.",
            Text(nonempty=True, control=False),
            flag("--workspace", panel="Environment and volumes"),
        ),
    )
    exclude: tuple[str, ...] = field(
        default=(),
        metadata=doc("Patterns (git's syntax) of files left out, beside .gitignore and .dockerignore.", ListOf(Text())),
    )
    include: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            "Patterns of files shipped though ignored or likely secrets (.env, keys): named, they go.",
            ListOf(Text()),
        ),
    )
    store: str | None = field(
        default=None,
        metadata=doc(
            "Object store prefix for a workspace too large for a Secret (1 MiB compressed), s3://BUCKET/PREFIX; "
            "null: the checkpoints store's workspace/ prefix, if checkpoints go to one.",
            CheckpointURL(),
            flag("--workspace-store", panel="Environment and volumes"),
        ),
    )

    def __post_init__(self) -> None:
        freeze(self)

    def __bool__(self) -> bool:
        return self.dir is not None
