"""The JobSpec's rules that span keys: each reads a spec whose keys have passed their own rules
(spec/fields) and raises a SpecError naming the key to change and how.

The chart checks the same rules at render time with these messages: tools/chart/messages.py reads
each off this code by running it on probe specs, so a new rule here needs a probe there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ddpctl.errors import SpecError
from ddpctl.spec.checks import require, yaml_spelling
from ddpctl.spec.fabrics import ENFORCE_LABEL, PROFILES
from ddpctl.spec.fields import NODE_COUNT
from ddpctl.spec.parts import NodeGroup, Preflight, Rendezvous, SecretKeyRef, Stragglers, Topology, Volume
from ddpctl.spec.schema import MAX_NODES, TRAINER_COLLECTIVE_TIMEOUT, TRAINER_STALL_TIMEOUT
from ddpctl_trainer import protocol


class Spec(Protocol):
    """What the rules read of a spec (ddpctl.spec.model.JobSpec is one, and runs them as it is made):
    typed here, so the rules need not import the model that imports them."""

    @property
    def affinity(self) -> Mapping[str, Any]: ...
    @property
    def args(self) -> tuple[str, ...]: ...
    @property
    def avoid_nodes(self) -> tuple[str, ...]: ...
    @property
    def backend(self) -> str: ...
    @property
    def checkpoints(self) -> str | None: ...
    @property
    def collective_timeout(self) -> int | None: ...
    @property
    def command(self) -> tuple[str, ...]: ...
    @property
    def elastic(self) -> bool: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def fabric(self) -> str: ...
    @property
    def gpus_per_node(self) -> int: ...
    @property
    def groups(self) -> tuple[NodeGroup, ...]: ...
    @property
    def max_nodes(self) -> int | None: ...
    @property
    def min_nodes(self) -> int | None: ...
    @property
    def module(self) -> str | None: ...
    @property
    def node_groups(self) -> tuple[NodeGroup, ...]: ...
    @property
    def nodes(self) -> int: ...
    @property
    def pod_security(self) -> str: ...
    @property
    def preflight(self) -> Preflight: ...
    @property
    def procs_per_node(self) -> int | None: ...
    @property
    def recovery(self) -> str: ...
    @property
    def rendezvous(self) -> Rendezvous: ...
    @property
    def script(self) -> str | None: ...
    @property
    def secret_env(self) -> Mapping[str, SecretKeyRef]: ...
    @property
    def stall_timeout(self) -> int | None: ...
    @property
    def stragglers(self) -> Stragglers: ...
    @property
    def uses_trainer(self) -> bool: ...
    @property
    def volumes(self) -> Mapping[str, Volume]: ...

    def topology_of(self, group: NodeGroup) -> Topology: ...


def node_groups(spec: Spec) -> None:
    """Group names are unique, no group has more processes than GPUs, GPUs are in every group or
    in none (one backend serves the whole job), and the groups hold a fixed count of MAX_NODES at most."""
    seen: set[str] = set()
    first = spec.node_groups[0]
    for i, group in enumerate(spec.node_groups):
        where = f"nodeGroups[{i}]"
        require(
            group.name not in seen, f"{where}.name", f"{group.name!r} is used twice", "give each group its own name"
        )
        seen.add(group.name)
        if group.gpus_per_node and group.procs_per_node is not None:
            require(
                group.procs_per_node <= group.gpus_per_node,
                f"{where}.procsPerNode",
                f"{group.procs_per_node} processes cannot share {group.gpus_per_node} GPUs one each",
                "leave procsPerNode unset to use one process per GPU",
            )
        require(
            bool(group.gpus_per_node) == bool(first.gpus_per_node),
            f"{where}.gpusPerNode",
            f"{group.gpus_per_node} GPUs here but {first.gpus_per_node} in nodeGroups[0]: "
            "one backend serves the whole job",
            "give every group GPUs, or none (CPU processes with gloo)",
        )
    require(
        spec.min_nodes is None and spec.max_nodes is None,
        "nodeGroups",
        "an elastic job (nodes MIN:MAX) cannot have node groups",
        "give fixed node counts per group, or drop nodeGroups for an elastic job",
    )
    total = sum(g.nodes for g in spec.node_groups)
    require(
        total <= MAX_NODES,
        "nodeGroups",
        f"{total} nodes in all is more than {MAX_NODES}",
        f"use at most {MAX_NODES} nodes",
    )


def layout(spec: Spec) -> None:
    """`nodes` (N, or MIN:MAX read into minNodes and maxNodes) and processes per GPU."""
    if spec.min_nodes is not None or spec.max_nodes is not None:
        for bound, value in (("minimum", spec.min_nodes), ("maximum", spec.max_nodes)):
            require(  # nodes: "MIN:MAX" is one key of ddp.yaml
                isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                "nodes",
                f"the elastic {bound} {yaml_spelling(value)} is not a node count of at least 1",
                "write nodes as MIN:MAX with 1 <= MIN <= MAX",
            )
        lo, hi = spec.min_nodes, spec.max_nodes
        assert lo is not None and hi is not None  # refused above
        require(lo <= hi, "nodes", f"min {lo} is more than max {hi}", "write nodes as MIN:MAX with MIN <= MAX")
        require(hi <= MAX_NODES, "nodes", f"max {hi} is more than {MAX_NODES}", f"use at most {MAX_NODES} nodes")
    else:
        NODE_COUNT.check("nodes", spec.nodes)
    if spec.gpus_per_node and spec.procs_per_node is not None:
        require(
            spec.procs_per_node <= spec.gpus_per_node,
            "procsPerNode",
            f"{spec.procs_per_node} processes cannot share {spec.gpus_per_node} GPUs one each",
            "leave procsPerNode unset to use one process per GPU",
        )


def entrypoint(spec: Spec) -> None:
    chosen = [n for n, v in (("module", spec.module), ("script", spec.script), ("command", spec.command)) if v]
    require(
        len(chosen) == 1,
        "module",
        f"exactly one of module, script or command must be set, got {', '.join(chosen) or 'none'}",
        "set just one of them",
    )


def backend(spec: Spec) -> None:
    require(
        not (spec.backend == "nccl" and spec.gpus_per_node == 0),
        "backend",
        "nccl needs GPUs but gpusPerNode is 0",
        "use backend gloo (or auto), or set gpusPerNode",
    )


def rendezvous(spec: Spec) -> None:
    require(
        not (spec.elastic and spec.rendezvous.mode == "static"),
        "rendezvous.mode",
        "an elastic job (nodes MIN:MAX) cannot use static rendezvous",
        "use mode c10d or auto",
    )


def env(spec: Spec) -> None:
    clash = set(spec.env) & set(spec.secret_env)
    require(not clash, "secretEnv", f"{', '.join(sorted(clash))} is also set in env", "set each variable in one place")


def volumes(spec: Spec) -> None:
    mounts: dict[str, str] = {}
    for name, volume in spec.volumes.items():
        require(
            volume.mount_path not in mounts,
            f"volumes.{name}.mountPath",
            f"{volume.mount_path} is also used by volume {mounts.get(volume.mount_path)}",
            "give each volume its own path",
        )
        mounts[volume.mount_path] = name


def checkpoints(spec: Spec) -> None:
    """An object store URL is the ddpctl trainer's, and the only place for its checkpoints."""
    if spec.checkpoints is None:
        return
    require(
        spec.uses_trainer,
        "checkpoints",
        f"is read by the ddpctl trainer only (module {protocol.TRAINER_MODULE})",
        "give your own script its checkpoint location in args or env, and drop checkpoints",
    )
    require(
        "checkpoints" not in spec.volumes,
        "checkpoints",
        "is set together with a volume named checkpoints",
        "keep one: the object store URL or the volume",
    )
    require(
        not any(a == "--checkpoint-dir" or a.startswith("--checkpoint-dir=") for a in spec.args),
        "checkpoints",
        "is set together with --checkpoint-dir in args",
        "keep one of them",
    )


def topology(spec: Spec) -> None:
    """Kueue's rules for each group's PodSet annotations (its own topology, else the spec's)."""
    for i, group in enumerate(spec.groups):
        where = f"nodeGroups[{i}].topology" if group.topology is not None else "topology"
        pods = None if spec.elastic else (group.nodes if spec.node_groups else spec.nodes)
        podset_topology(spec.topology_of(group), where, pods)


def podset_topology(request: Topology, where: str, pods: int | None) -> None:
    """One mode at most, sliceLevel and sliceSize together, and slices that divide the group's
    `pods` (None: elastic, which slices cannot divide)."""
    modes = [k for k in ("required", "preferred") if getattr(request, k) is not None]
    if request.unconstrained:
        modes.append("unconstrained")
    if len(modes) > 1:
        raise SpecError(
            where, f"sets both {modes[0]} and {modes[1]}", "keep one of required, preferred and unconstrained"
        )
    if (request.slice_level is None) != (request.slice_size is None):
        missing, given = ("sliceSize", "sliceLevel") if request.slice_size is None else ("sliceLevel", "sliceSize")
        raise SpecError(f"{where}.{missing}", f"is missing (with {given})", "give sliceLevel and sliceSize together")
    if request.slice_size is not None:
        require(
            pods is not None,
            f"{where}.sliceSize",
            "an elastic job's node count changes, so slices cannot divide it",
            "give a fixed node count, or drop the slice",
        )
        assert pods is not None
        require(
            pods % request.slice_size == 0,
            f"{where}.sliceSize",
            f"{request.slice_size} does not divide the group's {pods} nodes",
            f"use a divisor of {pods}: {', '.join(str(d) for d in range(1, pods + 1) if pods % d == 0)}",
        )


def timeouts(spec: Spec) -> None:
    """The ddpctl trainer refuses to start unless its stall watchdog fires before its collectives time out."""
    if spec.uses_trainer and spec.collective_timeout is not None:
        stall = TRAINER_STALL_TIMEOUT if spec.stall_timeout is None else spec.stall_timeout
        require(
            stall == 0 or stall < spec.collective_timeout,
            "collectiveTimeout",
            f"{spec.collective_timeout} is not above the stall watchdog's {stall} s (stallTimeout): the trainer "
            "would refuse to start",
            f"set collectiveTimeout above {stall}, or lower stallTimeout",
        )
    elif spec.uses_trainer and spec.stall_timeout:
        require(
            spec.stall_timeout < TRAINER_COLLECTIVE_TIMEOUT,
            "stallTimeout",
            f"{spec.stall_timeout} is not below the trainer's process-group timeout of "
            f"{TRAINER_COLLECTIVE_TIMEOUT} s (collectiveTimeout): the trainer would refuse to start",
            f"set stallTimeout below {TRAINER_COLLECTIVE_TIMEOUT}, or raise collectiveTimeout",
        )


def preflight(spec: Spec) -> None:
    """The checks run inside the ddpctl trainer, once its process group is up: other code has no
    place for them (its pods run plain torchrun, and the image need not hold the trainer)."""
    if spec.preflight.on:
        require(
            spec.uses_trainer,
            "preflight.mode",
            f"{spec.preflight.mode} runs the checks inside the ddpctl trainer (module {protocol.TRAINER_MODULE}), "
            "which this job does not run",
            "run them as a job of their own before you submit (`ddpctl check`: the same layout and placement), "
            "and leave preflight.mode off",
        )


def fabric(spec: Spec) -> None:
    """A fast fabric carries NCCL's traffic (gloo has no transport for it), and its RDMA
    transport's IPC_LOCK capability is allowed only under Pod Security privileged."""
    if spec.fabric == "socket":
        return
    nccl = spec.backend == "nccl" or (spec.backend == "auto" and spec.gpus_per_node > 0)
    require(
        nccl,
        "fabric",
        f"{spec.fabric} carries NCCL's traffic, but this job runs gloo (backend {spec.backend}, "
        f"{spec.gpus_per_node} GPUs per node)",
        "give the job GPUs (gpusPerNode) with backend auto or nccl, or leave fabric socket",
    )
    needs = PROFILES[spec.fabric].capabilities
    if needs and spec.pod_security != "privileged":
        raise SpecError(
            "fabric",
            f"{spec.fabric} needs the {', '.join(needs)} capability (RDMA pins the memory it registers), which Pod "
            f"Security {spec.pod_security} forbids",
            f"set podSecurity privileged (--pod-security privileged), in a namespace labelled {ENFORCE_LABEL}="
            "privileged",
        )


def stragglers(spec: Spec) -> None:
    """stragglers.mode replace replaces the straggler's pod alone: only pod recovery can."""
    require(
        spec.stragglers.mode != "replace" or spec.recovery != "gang",
        "stragglers.mode",
        "replace needs recovery: pod (only the straggler's pod is replaced, while the others keep their state)",
        "add --recovery pod (or auto), or use --stragglers fail and resubmit with --avoid-node NODE",
    )


NODE_AFFINITY = "nodeAffinity"
REQUIRED_NODES = "requiredDuringSchedulingIgnoredDuringExecution"


def avoid_nodes(spec: Spec) -> None:
    """avoidNodes goes into every term of a required node affinity the spec has: it must be one
    Kubernetes takes (a map of nodeSelectorTerms, a non-empty list of maps)."""
    if not spec.avoid_nodes:
        return
    node = spec.affinity.get(NODE_AFFINITY, {})
    required = node.get(REQUIRED_NODES) if isinstance(node, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    fits = isinstance(node, Mapping) and (
        required is None
        or (
            isinstance(terms, (list, tuple))
            and bool(terms)
            and all(isinstance(t, Mapping) and isinstance(t.get("matchFields", []), (list, tuple)) for t in terms)
        )
    )
    require(
        fits,
        "avoidNodes",
        f"cannot be added to affinity.{NODE_AFFINITY}.{REQUIRED_NODES}, which is not a map of nodeSelectorTerms "
        "(a list of terms, each a map)",
        "write that affinity as Kubernetes takes it, or drop avoidNodes",
    )


# In the order JobSpec checks them (node_groups runs first, before the groups' totals are taken).
RULES = (
    layout,
    entrypoint,
    backend,
    rendezvous,
    env,
    volumes,
    checkpoints,
    topology,
    timeouts,
    preflight,
    fabric,
    avoid_nodes,
    stragglers,
)


def check(spec: Spec) -> None:
    for rule in RULES:
        rule(spec)
