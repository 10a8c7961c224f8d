"""The layout: what a JobSpec alone derives, before any engine is asked (`Layout`), and the parts
a Plan is made of: each node (pod) in rank order, and each node group's workload, pods, command
and env (`Node`, `GroupPlan`). An engine plans from a Layout (ddpctl.engines.base.Engine.plan):
its own facts -- names, DNS names, where rank 0 listens, the env its controller injects, failure
rules -- go into the `Plan` (ddpctl.plan.plan) it makes, next to these."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from ddpctl.records import record
from ddpctl.spec import kueue
from ddpctl.spec.fabrics import PROFILES, Fabric
from ddpctl.spec.fields import number_text
from ddpctl.spec.model import JobSpec, NodeGroup, Topology
from ddpctl.spec.rules import NODE_AFFINITY, REQUIRED_NODES
from ddpctl.spec.schema import GRACE_MARGIN
from ddpctl_trainer import protocol

NO_CHECKPOINT_VOLUME = (
    "no `checkpoints` volume: the trainer's checkpoints stay in the pod's own file system, so a restart "
    "(preemption, node loss) starts from scratch; add one, e.g. --volume checkpoints=CLAIM:/checkpoints, or "
    "keep them in an object store: --checkpoints s3://BUCKET/PREFIX"
)
NODE_GROUP_LABEL = "ddpctl.io/node-group"
COMPONENT_LABEL = "app.kubernetes.io/component"  # trainer, or a pod-recovery job's coordinator
PREFLIGHT_OVERHEAD_S = 0.2  # the preflight's gathers and barriers, measured on 2 x 2 gloo
PREFLIGHT_PAIR_ROUNDS = 4  # rounds of node pairs at most (ddpctl_trainer.preflight.judge.MAX_PAIR_ROUNDS)


@record
class Node:
    """One node (pod) of the job in rank order: its group, index in the group, processes and ranks."""

    rank: int  # node rank: 0 is the first group's first node
    group: NodeGroup
    group_index: int  # which group, in spec order
    index: int  # the completion index within its group
    first_rank: int  # global rank of its local rank 0 (ranks are contiguous per node)

    @property
    def nproc(self) -> int:
        return self.group.nproc

    @property
    def ranks(self) -> range:
        return range(self.first_rank, self.first_rank + self.nproc)


# What torch.distributed's env:// initialisation reads: a process torchrun did not start needs them.
PLAIN_DDP_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


@record
class GroupPlan:
    """One node group's workload and pods: its object's name, pods, command and container env."""

    group: NodeGroup
    index: int  # in spec order
    first_node: int  # the node rank of its first pod
    pods: int  # the pods its workload asks for (the elastic maximum when elastic)
    workload_name: str  # the object that runs its pods
    replicated_job: str | None  # its JobSet replicatedJob (JobSet-based engines)
    command: tuple[str, ...]  # the training container's command
    env: Mapping[str, str]  # the training container's literal env: wiring first, then the user's
    topology: Topology  # Kueue's topology request for its pods
    labels: Mapping[str, str]  # on its pods (and its workload object's template)
    pod_annotations: Mapping[str, str]  # on its pod template: the spec's and Kueue's topology request

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def nproc(self) -> int:
        return self.group.nproc


@record(eq=False)
class Layout:
    """A checked spec with what it derives on any engine (see the module docstring)."""

    spec: JobSpec
    # pod or gang: the spec's, its auto resolved by the engine (Engine.layout); gang when none did
    recovery: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if not self.recovery:
            object.__setattr__(self, "recovery", "gang" if self.spec.recovery == "auto" else self.spec.recovery)

    # ------------------------------------------------------------------ the layout

    @property
    def elastic(self) -> bool:
        return self.spec.elastic

    @property
    def replicas(self) -> int:
        """Pods to create: the fixed node count, or the elastic maximum."""
        return sum(g.nodes for g in self.spec.groups)

    @property
    def nnodes(self) -> str:
        """torchrun's --nnodes value: `N` or `MIN:MAX`."""
        spec = self.spec
        return f"{spec.min_nodes}:{spec.max_nodes}" if spec.elastic else str(self.replicas)

    @property
    def nproc_per_node(self) -> int:
        """Processes per node of the first group (per-node counts are in `nodes`)."""
        return self.spec.groups[0].nproc

    @property
    def uneven(self) -> bool:
        """Do nodes run different numbers of processes?"""
        return len({g.nproc for g in self.spec.groups}) > 1

    @functools.cached_property
    def nodes(self) -> tuple[Node, ...]:
        """Every node in rank order: groups in spec order, nodes in completion-index order, and
        global ranks contiguous per node (as torchrun assigns them: a cumulative sum of the nodes'
        process counts in node-rank order)."""
        out: list[Node] = []
        first_rank = 0
        for g, group in enumerate(self.spec.groups):
            for index in range(group.nodes):
                out.append(Node(len(out), group, g, index, first_rank))
                first_rank += group.nproc
        return tuple(out)

    @property
    def first_node(self) -> Node:
        """Node rank 0: the first group's first node."""
        return Node(0, self.spec.groups[0], 0, 0, 0)

    def edge_nodes(self) -> list[Node]:
        """The first and last node of every group, without laying out the nodes between (checking
        a 1024-node spec must not build 1024 names)."""
        out: list[Node] = []
        rank = first_rank = 0
        for g, group in enumerate(self.spec.groups):
            out.append(Node(rank, group, g, 0, first_rank))
            last = group.nodes - 1
            out.append(Node(rank + last, group, g, last, first_rank + last * group.nproc))
            rank += group.nodes
            first_rank += group.nodes * group.nproc
        return out

    @property
    def world_size(self) -> int:
        """Total processes: the sum over nodes (the elastic maximum when elastic)."""
        return sum(g.nodes * g.nproc for g in self.spec.groups)

    def group_offset(self, group: NodeGroup) -> int:
        """The node rank of `group`'s first pod."""
        offset = 0
        for other in self.spec.groups:
            if other is group:
                return offset
            offset += other.nodes
        raise ValueError(f"{group.name} is not a group of this spec")

    # ------------------------------------------------------------------ wiring

    @property
    def backend(self) -> str:
        """The process-group backend: the spec's, or nccl with GPUs and gloo without."""
        if self.spec.backend != "auto":
            return self.spec.backend
        return "nccl" if self.spec.gpus_per_node else "gloo"

    @property
    def rdzv_mode(self) -> str:
        """c10d for elastic jobs (required), static otherwise unless asked."""
        mode = self.spec.rendezvous.mode
        if mode != "auto":
            return mode
        return "c10d" if self.spec.elastic else "static"

    @property
    def service_name(self) -> str:
        """The headless Service / subdomain that gives pods DNS names (Indexed Job and JobSet targets)."""
        return self.spec.name

    @property
    def recommended_labels(self) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": "ddp-job",
            "app.kubernetes.io/instance": self.spec.name,
            COMPONENT_LABEL: "trainer",
            "app.kubernetes.io/managed-by": "ddpctl",
        }

    @property
    def object_labels(self) -> dict[str, str]:
        """Labels on every object and pod: the user's, then ours (ours win, `list` relies on them)."""
        labels = dict(self.spec.labels)
        labels.update(self.recommended_labels)
        return dict(sorted(labels.items()))

    @property
    def top_labels(self) -> dict[str, str]:
        """Labels on the top-level objects: the object labels, and Kueue's queue and priority class."""
        labels = self.object_labels
        if self.spec.queue:
            labels[kueue.QUEUE_LABEL] = self.spec.queue
        if self.spec.workload_priority_class:
            labels[kueue.PRIORITY_LABEL] = self.spec.workload_priority_class
        return dict(sorted(labels.items()))

    @property
    def selector_labels(self) -> dict[str, str]:
        """The stable subset used by Service selectors and `ddpctl list/logs`."""
        return {"app.kubernetes.io/instance": self.spec.name, "app.kubernetes.io/managed-by": "ddpctl"}

    # ------------------------------------------------------------------ what the pods run

    @property
    def uses_trainer(self) -> bool:
        return self.spec.uses_trainer

    @property
    def uses_launcher(self) -> bool:
        """Whether the pods run torchrun through ddpctl_trainer.launch, whose exit code says why a
        node stopped (2 usage, 138 lost a peer, 143 preempted) for the failure rules to read. Only
        when the job runs the ddpctl trainer do we know the image holds it; other modules and
        scripts run plain torchrun, which exits 1 for every failure."""
        return self.spec.uses_trainer and not self.spec.command

    @property
    def launcher(self) -> tuple[str, ...]:
        """The torchrun the pods run: `python3 -m ddpctl_trainer.launch` (same arguments) or `torchrun`."""
        if self.uses_launcher:
            return (protocol.LAUNCHER_PYTHON, "-m", protocol.LAUNCHER_MODULE)
        return ("torchrun",)

    @property
    def entrypoint(self) -> tuple[str, ...]:
        """The container's command: torchrun of the module/script (layout comes from PET_* env)."""
        spec = self.spec
        if spec.command:
            return spec.command
        if spec.module:
            return (*self.launcher, "-m", spec.module)
        assert spec.script is not None  # validation requires one of module, script and command
        return (*self.launcher, spec.script)

    @property
    def trainer_args(self) -> tuple[str, ...]:
        """Arguments after the entrypoint: the user's, with mount paths fed to our trainer."""
        spec, extra = self.spec, []
        if spec.uses_trainer:
            if spec.checkpoints:  # never with a checkpoints volume or --checkpoint-dir (the spec's rule)
                extra += ["--checkpoint-dir", spec.checkpoints]
            if "checkpoints" in spec.volumes and "--checkpoint-dir" not in spec.args:
                extra += ["--checkpoint-dir", spec.volumes["checkpoints"].mount_path]
            if "data" in spec.volumes and "--data-dir" not in spec.args:
                extra += ["--data-dir", spec.volumes["data"].mount_path]
        return tuple(extra) + spec.args

    @property
    def command_starts_torchrun(self) -> bool:
        """Whether a --command starts torchrun itself (which reads the pods' PET_* variables)."""
        command = self.spec.command
        head = " ".join(command[:3])
        return bool(command) and (
            command[0].rsplit("/", 1)[-1] == "torchrun" or "torch.distributed.run" in head or "torchrun" in head
        )

    @property
    def ships_workspace(self) -> bool:
        """Whether the pods get the user's folder (`workspace`), unpacked before their command."""
        return bool(self.spec.workspace)

    @property
    def workspace_store(self) -> str | None:
        """Where a workspace too large for a Secret goes: `workspace.store`, else a `workspace/`
        prefix beside the checkpoints, when they go to an object store (their credentials reach
        it); None: nowhere."""
        if self.spec.workspace.store:
            return self.spec.workspace.store
        url = self.checkpoint_url
        return f"{url.rstrip('/')}/workspace" if url else None

    @property
    def restart_starts_from_scratch(self) -> str | None:
        """A warning when the ddpctl trainer's checkpoints live in the container's own file system:
        a restarted pod (after preemption or a node loss) then finds none. None when they persist."""
        spec = self.spec
        if (
            not spec.uses_trainer
            or spec.checkpoints
            or "checkpoints" in spec.volumes
            or "--checkpoint-dir" in spec.args
            or protocol.PREFLIGHT_ONLY_FLAG in spec.args  # the checks alone train nothing (`ddpctl check`)
        ):
            return None
        return NO_CHECKPOINT_VOLUME

    @property
    def checkpoint_url(self) -> str | None:
        """The object store URL the trainer's checkpoints go to, however it was given (the spec's
        `checkpoints`, a --checkpoint-dir in args, the last one winning as in argparse, or its env
        variable); None for a path."""
        spec = self.spec
        if not spec.uses_trainer:
            return None
        given = spec.checkpoints or spec.env.get(protocol.CHECKPOINT_DIR_ENV)
        for i, arg in enumerate(spec.args):
            if arg == "--checkpoint-dir" and i + 1 < len(spec.args):
                given = spec.args[i + 1]
            elif arg.startswith("--checkpoint-dir="):
                given = arg.split("=", 1)[1]
        return given if given and protocol.url_scheme(given) else None

    @property
    def checkpoint_location(self) -> str | None:
        """Where the ddpctl trainer's checkpoints go, in words (None when the pods run no ddpctl trainer)."""
        spec = self.spec
        if not spec.uses_trainer:
            return None
        if spec.checkpoints:
            refs = [*spec.secret_env, *(f"envFromSecrets {s}" for s in spec.env_from_secrets)]
            who = f"credentials from {', '.join(refs)}" if refs else "no Secret: the pods' workload identity"
            endpoint = spec.env.get(protocol.OBJECT_STORE_ENDPOINT_ENV)
            return (
                f"{spec.checkpoints} (object store: each checkpoint under a prefix of its own, `latest` written last; "
                f"{who}" + (f"; endpoint {endpoint}" if endpoint else "") + ")"
            )
        if "checkpoints" in spec.volumes:
            vol = spec.volumes["checkpoints"]
            return f"{vol.mount_path} on the volume checkpoints (PersistentVolumeClaim {vol.claim_name})"
        for i, arg in enumerate(spec.args):
            if arg == "--checkpoint-dir" and i + 1 < len(spec.args):
                return f"{spec.args[i + 1]} (--checkpoint-dir in args)"
            if arg.startswith("--checkpoint-dir="):
                return f"{arg.split('=', 1)[1]} (--checkpoint-dir in args)"
        return None

    @property
    def pod_recovery_problem(self) -> str | None:
        """Why a lost pod of this job cannot be replaced alone, whatever the target (None: it can)."""
        spec = self.spec
        if not self.uses_launcher:
            return "only the built-in trainer forms its group again and hands a replacement its state"
        if spec.elastic:
            return "an elastic layout admits nodes through torchrun's c10d rendezvous instead"
        if self.backend != "gloo":
            return f"a {self.backend} group is not formed again yet (gloo only: gpusPerNode 0)"
        strategy = spec.env.get(protocol.flag_env("--strategy"))
        for i, arg in enumerate(spec.args):
            if arg == "--strategy" and i + 1 < len(spec.args):
                strategy = spec.args[i + 1]
            elif arg.startswith("--strategy="):
                strategy = arg.split("=", 1)[1]
        if strategy not in (None, "ddp"):
            return "only DDP is formed again (every rank holds the whole state); FSDP's shards are not"
        return None

    def recovery_env(self, group: NodeGroup, coordinator: str) -> dict[str, str]:
        """torchrun's and the trainer's env of `group`'s pods under pod recovery: torchrun supervises
        its own node alone, the trainer forms the group through the `coordinator` (HOST:PORT), and
        the launcher derives the node's place from its completion index and the group's offsets."""
        first_node = self.group_offset(group)
        return {
            "PET_NNODES": "1",
            "PET_NPROC_PER_NODE": str(group.nproc),
            "PET_STANDALONE": "1",
            "PET_MAX_RESTARTS": "0",
            protocol.NODE_RANK_OFFSET_ENV: str(first_node),
            protocol.RANK_OFFSET_ENV: str(self.nodes[first_node].first_rank),
            protocol.COORDINATOR_ENV: coordinator,
            protocol.JOB_WORLD_SIZE_ENV: str(self.world_size),
            protocol.JOB_NNODES_ENV: str(self.replicas),
        }

    def container_env(self, group: NodeGroup, wiring: Mapping[str, str]) -> dict[str, str]:
        """Literal env of `group`'s training container: the engine's `wiring` (torchrun's PET_*)
        first, then ddpctl's, then the user's (user wins on clash)."""
        spec = self.spec
        env = dict(wiring)
        # The backend for the training code: our trainer reads DDP_TRAINER_<FLAG>, a user's script DDP_BACKEND.
        env[protocol.BACKEND_ENV if spec.uses_trainer else protocol.USER_BACKEND_ENV] = self.backend
        env[protocol.JOB_NAME_ENV] = spec.name
        env["PYTHONUNBUFFERED"] = "1"
        # Hang evidence: the trainer's stall watchdog, and on GPUs PyTorch's NCCL flight recorder (a
        # ring buffer of recent collectives, dumped on a timeout or by the watchdog), written next to
        # the checkpoints when there is a volume for them. Legacy TORCH_NCCL_* names: read by the
        # image's torch 2.5 and, as fallbacks, by newer ones.
        if spec.stall_timeout is not None:
            env[protocol.STALL_TIMEOUT_ENV] = str(spec.stall_timeout)
        if spec.gpus_per_node:
            env["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "2000"
            env["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
            if "checkpoints" in spec.volumes:
                mount = spec.volumes["checkpoints"].mount_path.rstrip("/")
                env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = f"{mount}/nccl_trace_rank_"
        # torchrun forwards SIGTERM to its workers and SIGKILLs them after this wait (default 30 s):
        # fitted inside the pod's grace period so a checkpoint in progress can finish.
        env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(spec.grace_period - GRACE_MARGIN)
        if spec.collective_timeout is not None and spec.uses_trainer:
            env[protocol.COLLECTIVE_TIMEOUT_ENV] = str(spec.collective_timeout)  # the process-group timeout
        env.update(self.fabric.env)
        env.update(self.preflight_env)
        env.update(self.stragglers_env)
        env.update(self.group_env(group))
        env.update(spec.env)
        return dict(sorted(env.items()))

    def group_plan(
        self,
        group: NodeGroup,
        *,
        workload_name: str,
        replicated_job: str | None,
        command: tuple[str, ...],
        wiring: Mapping[str, str],
    ) -> GroupPlan:
        """`group`'s workload and pods, with what its engine names and wires (see GroupPlan)."""
        spec, index = self.spec, self.spec.groups.index(group)
        labels = self.object_labels
        if spec.node_groups:
            labels[NODE_GROUP_LABEL] = group.name
        topology = spec.topology_of(group)
        annotations = {**spec.annotations, **topology.annotations()}
        return GroupPlan(
            group=group,
            index=index,
            first_node=self.group_offset(group),
            pods=group.nodes,
            workload_name=workload_name,
            replicated_job=replicated_job,
            command=command,
            env=self.container_env(group, wiring),
            topology=topology,
            labels=dict(sorted(labels.items())),
            pod_annotations=dict(sorted(annotations.items())),
        )

    # ------------------------------------------------------------------ the fabric, the preflight, stragglers

    @property
    def fabric(self) -> Fabric:
        """What the spec's fabric needs in the pods (spec/fabrics.py)."""
        return PROFILES[self.spec.fabric]

    @property
    def fabric_resource(self) -> str | None:
        """The extended resource that counts the fabric's devices: the spec's, else the fabric's usual one."""
        if self.fabric.resource is None:
            return None
        return self.spec.resources.fabric_resource or self.fabric.resource

    @property
    def preflight_env(self) -> dict[str, str]:
        """The trainer's preflight flags as its variables (the spec's preflight and fabric), when on."""
        spec, checks = self.spec, self.spec.preflight
        if not checks.on:
            return {}
        env = {protocol.PREFLIGHT_ENV: checks.mode, protocol.PREFLIGHT_TOLERANCE_ENV: number_text(checks.tolerance)}
        env.update({protocol.PREFLIGHT_FLOOR_ENV[k]: number_text(v) for k, v in checks.floors().items()})
        if spec.fabric != "socket":
            env[protocol.FABRIC_ENV] = spec.fabric
        return env

    @property
    def stragglers_env(self) -> dict[str, str]:
        """The trainer's straggler flags as its variables (the spec's stragglers): the mode always,
        so that off reaches a trainer (or a script's ddpctl_trainer.stragglers) whose default is
        warn, and the tolerance and window when on."""
        watch = self.spec.stragglers
        env = {protocol.STRAGGLERS_ENV: watch.mode}
        if watch.on:
            env[protocol.STRAGGLERS_TOLERANCE_ENV] = number_text(watch.tolerance)
            env[protocol.STRAGGLERS_EVERY_ENV] = number_text(watch.every)
            env[protocol.STRAGGLERS_WINDOWS_ENV] = number_text(watch.windows)
        return env

    def group_env(self, group: NodeGroup) -> dict[str, str]:
        """`group`'s name for the straggler detector, with node groups and the detector on: it
        compares a node with the nodes of its own group (an A100 node with A100 nodes, not with L4
        nodes of as many processes)."""
        if not (self.spec.node_groups and self.spec.stragglers.on):
            return {}
        return {protocol.NODE_GROUP_ENV: group.name}

    @property
    def downward_env(self) -> dict[str, str]:
        """Variables the pods take from the downward API (name -> fieldPath): with the preflight or
        the straggler detector on, the pod's own name and its Kubernetes node's, which their lines
        name (unless the spec's env sets them)."""
        if not (self.spec.preflight.on or self.spec.stragglers.on):
            return {}
        wanted = {protocol.NODE_NAME_ENV: "spec.nodeName", protocol.POD_NAME_ENV: "metadata.name"}
        return {k: v for k, v in wanted.items() if k not in self.spec.env}

    def preflight_cost_s(self) -> tuple[float, float]:
        """About how many seconds the checks add to each start of the job: (healthy, with every
        round of node pairs a slow node can cost), scheduled as the trainer does with one pod per
        machine (a CPU pod's ranks together, a GPU machine's host-to-device copies in turn). NCCL's
        connection set-up, which the first collective of any job pays, is not counted."""
        spec = self.spec

        def setting(flag: str, default: float) -> float:
            try:  # the spec's env may set the trainer's flag: DDP_TRAINER_PREFLIGHT_WINDOW=0.5
                return float(spec.env.get(protocol.flag_env(flag), default))
            except ValueError:
                return default

        window = setting("--preflight-window", protocol.PREFLIGHT_JOB_WINDOW_S)
        repeats = int(setting("--preflight-repeats", protocol.PREFLIGHT_JOB_REPEATS))
        kernel = (protocol.PREFLIGHT_WARMUP_SHARE + repeats) * window  # a timed kernel's warm-up and windows
        # GPU: every GEMM at once, then a machine's host-to-device copies one after another; CPU: a
        # pod's ranks together (its cores hold their threads, as torchrun's one thread a rank does)
        local = kernel + max(g.nproc for g in spec.groups) * kernel if spec.gpus_per_node else kernel
        base = local + repeats * window + PREFLIGHT_OVERHEAD_S  # + the world's all-reduce
        nodes = self.replicas
        pairs = 0 if nodes < 3 else (3 if nodes == 3 else 1)  # rounds of node pairs: healthy nodes meet once
        most = 0 if nodes < 3 else (3 if nodes == 3 else PREFLIGHT_PAIR_ROUNDS)
        return base + pairs * repeats * window, base + most * repeats * window

    @property
    def affinity(self) -> dict[str, Any]:
        """The pods' affinity: the spec's, with avoidNodes as a required node anti-affinity on the
        nodes' names (`matchFields` on metadata.name) added to each of its required terms."""
        out: dict[str, Any] = copy.deepcopy(dict(self.spec.affinity))
        if not self.spec.avoid_nodes:
            return out
        avoid = {"key": "metadata.name", "operator": "NotIn", "values": list(self.spec.avoid_nodes)}
        node = out.setdefault(NODE_AFFINITY, {})
        required = node.setdefault(REQUIRED_NODES, {"nodeSelectorTerms": [{}]})
        required["nodeSelectorTerms"] = [
            {**term, "matchFields": [*term.get("matchFields", []), avoid]} for term in required["nodeSelectorTerms"]
        ]
        return out
