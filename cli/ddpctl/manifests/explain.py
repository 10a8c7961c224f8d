"""`ddpctl render --explain`: the layout in words, so a user can check the wiring before paying for it."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING

from ddpctl.console import plural
from ddpctl.engines import engine_of
from ddpctl.engines.base import NODE_RANK_LAUNCHER
from ddpctl.plan import Plan
from ddpctl.spec.fabrics import ENFORCE_LABEL
from ddpctl.spec.fields import number_text
from ddpctl.spec.schema import DEFAULT_IMAGE, GRACE_MARGIN
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.workspace.ship import Shipment

# `ddpctl build` tags an image by the hash of what went into it (image/build.py HASH_LEN): such an
# image runs as the trainer image's non-root user
BUILT_TAG = re.compile(r":(?:[0-9a-f]{12}|ws-[0-9a-f]{12}-[0-9a-f]{8})$")
MAX_TABLE_ROWS = 16  # a 64-node job shows its first and last nodes, not 64 lines


def _ranks(first: int, last: int) -> str:
    return f"rank {first}" if first == last else f"ranks {first}-{last}"


def _topology_lines(plan: Plan) -> list[str]:
    spec = plan.spec
    """Kueue's topology request per group, and what keeps rank order (or that it does nothing)."""
    requests = [(g.name, spec.topology_of(g)) for g in spec.groups]
    if not any(t for _, t in requests):
        return []
    group = engine_of(plan).podset_group(plan)
    if len(requests) == 1:
        text = requests[0][1].describe()
    else:
        text = "; ".join(f"group {name}: {t.describe() if t else 'none'}" for name, t in requests)
        if not group:
            text += " (each group is its own Kueue PodSet, placed on its own)"
    text += " (Kueue Topology Aware Scheduling; ranks stay in consecutive order per domain)"
    if group:
        text += f"; Master and Worker are placed as one (podset-group-name {group})"
    if not spec.queue:
        text += "; without --queue Kueue does not place the job, so this does nothing"
    return _wrapped("  topology:           ", text)


def _fabric_lines(plan: Plan) -> list[str]:
    """The fabric's devices, env and capabilities, what the namespace and the nodes must allow, and
    the nodes the pods avoid."""
    spec, fabric = plan.spec, plan.fabric
    lines: list[str] = []
    if spec.fabric != "socket":
        env = ", ".join(f"{k}={v}" for k, v in fabric.env.items())
        text = (
            f"{spec.fabric}: {fabric.title}; {spec.resources.fabric_devices} x {plan.fabric_resource} per pod "
            f"(resources.fabricResource names your device plugin's); env {env}"
        )
        if fabric.capabilities:
            text += f"; capability {', '.join(fabric.capabilities)}"
        text += (
            "; memlock: RDMA pins memory and a pod spec has no setting for it, so the nodes' container runtime "
            "must allow unlimited locked memory (containerd's or Docker's LimitMEMLOCK=infinity)"
        )
        lines += _wrapped("  fabric:             ", text)
    if spec.pod_security == "privileged":
        needs = f" ({', '.join(fabric.capabilities)} for fabric {spec.fabric})" if fabric.capabilities else ""
        lines += _wrapped(
            "  pod security:       ",
            f"privileged{needs}: namespace {spec.namespace!r} needs the label {ENFORCE_LABEL}=privileged "
            f"(kubectl label namespace {spec.namespace} {ENFORCE_LABEL}=privileged), or Pod Security admission "
            "refuses the pods",
        )
    if spec.avoid_nodes:
        lines += _wrapped(
            "  avoids nodes:       ",
            f"{', '.join(spec.avoid_nodes)} (a required node anti-affinity on their names: the pods wait rather "
            "than run there)",
        )
    return lines


def _preflight_lines(plan: Plan) -> list[str]:
    """What the preflight checks, what it costs each start, and what a failed one does here."""
    checks = plan.spec.preflight
    if not checks.on:
        return []
    low, high = plan.preflight_cost_s()
    cost = f"about {low:.1f} s" + (
        f" ({high:.1f} s when a slow node takes every round of node pairs)" if high > low else ""
    )
    text = (
        f"{checks.mode}: after the rendezvous, before the first step, every rank times a GEMM and the all-reduce"
        + (", node pairs" if plan.replicas >= 3 else "")
        + ("; on GPUs the host-to-device copy and NCCL's transport" if plan.spec.gpus_per_node else "")
        + f"; rank 0 names what is below {number_text(checks.tolerance)} x the median"
        + (
            f" or a floor ({', '.join(f'{k} {number_text(v)}' for k, v in checks.floors().items())})"
            if checks.floors()
            else ""
        )
        + f"; costs {cost} per start (one pod per machine; pods that share one take turns)"
    )
    if checks.mode == "fail":
        text += f"; exit {protocol.EXIT_PREFLIGHT} on a finding: {engine_of(plan).preflight_failure(plan)}"
    else:
        text += "; findings are reported, training goes on"
    return _wrapped("  preflight:          ", text)


def _stragglers_lines(plan: Plan) -> list[str]:
    """What the straggler detector watches during training, and what a named node does here."""
    watch = plan.spec.stragglers
    label = "  stragglers:         "
    if not watch.on:
        return _wrapped(label, "off: no node is watched for slowing down during training (--stragglers warn or fail)")
    every, windows = watch.every, watch.windows
    text = (
        f"{watch.mode}: every rank times its own work per step; every {plural(every, 'step')} rank 0 names a node "
        f"below {number_text(watch.tolerance)} x the median speed for {plural(windows, 'window')} in a row "
        f"({plural(windows * every, 'step')}), and again when it recovers"
    )
    if not plan.uses_trainer:
        text += " (your script opts in with ddpctl_trainer.stragglers; its pods get these settings)"
    if watch.mode == "fail":
        what = engine_of(plan).straggler_failure(plan)
        text += f"; exit {protocol.EXIT_STRAGGLER} on every rank when a node is named: {what}"
    elif watch.mode == "replace":
        text += (
            "; a named node's pod leaves after that step and is replaced alone, not counted, while the others keep "
            "their state and hand it over (it may land on the same Kubernetes node unless the job avoids it)"
        )
    else:
        text += "; training goes on"
    return _wrapped(label, text)


def node_table(plan: Plan) -> list[str]:
    """One line per node: node rank, group, pod, processes, global ranks."""
    nodes = plan.nodes
    hosts = plan.pod_hostnames
    rows = [
        (f"node {n.rank}", n.group.name, hosts[n.rank], str(n.nproc), _ranks(n.ranks[0], n.ranks[-1])) for n in nodes
    ]
    if len(rows) > MAX_TABLE_ROWS:
        half = MAX_TABLE_ROWS // 2
        rows = rows[:half] + [("...", "", "", "", "")] + rows[-half:]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return ["    " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _shown(command: tuple[str, ...]) -> tuple[str, ...]:
    """The node-rank launcher's code is long: name what it does instead."""
    return tuple(
        "'<PET_NODE_RANK = PET_NODE_RANK_OFFSET + JOB_COMPLETION_INDEX; torchrun>'" if c == NODE_RANK_LAUNCHER else c
        for c in command
    )


def _wrapped(label: str, text: str, width: int = 110) -> list[str]:
    """`label` + `text`, long text continued under the text's first column."""
    return textwrap.wrap(text, width, initial_indent=label, subsequent_indent=" " * len(label), break_on_hyphens=False)


def recovery_text(plan: Plan) -> str:
    """What a lost pod costs under the plan's `recovery`, and why, in one line."""
    auto = " (auto)" if plan.spec.recovery == "auto" else ""
    if plan.coordinator is not None:
        return (
            f"pod{auto}: a lost pod is replaced alone; the others keep their training state and hand it over (no "
            "step lost, no checkpoint read)"
        )
    gang = f"gang{auto}: a lost pod restarts every pod, and training resumes from the last checkpoint"
    why = engine_of(plan).pod_recovery_blocked(plan)
    if why:
        return f"{gang}; recovery: pod cannot run here: {why}"
    return f"{gang}; recovery: pod would replace the lost pod alone and keep the others' state"


def explain(plan: Plan, shipment: Shipment | None = None, *, lint: str | None = None) -> str:
    """The layout in words; `shipment`, the workspace the job ships (what, where, what was left
    out); `lint`, what `ddpctl lint` found of the job's script before the run."""
    spec, engine = plan.spec, engine_of(plan)
    hosts = plan.pod_hostnames
    nproc = plan.nproc_per_node
    gpus = {g.gpus_per_node for g in spec.groups}
    if plan.uneven or len(gpus) > 1:
        per_node = "per node group, see the table"
        device = "GPUs: one per process" if spec.gpus_per_node else "CPU only"
    else:
        per_node = str(nproc)
        device = f"{plural(spec.gpus_per_node, 'GPU')} per node" if spec.gpus_per_node else "CPU only"
    if spec.elastic:
        nodes = f"elastic {spec.min_nodes} to {spec.max_nodes} nodes (pods), {plan.replicas} created"
        world = (
            f"{(spec.min_nodes or 0) * nproc} to {plan.world_size} = nodes x {plural(nproc, 'process', 'processes')}"
        )
    elif spec.node_groups:
        groups = ", ".join(f"{g.name}: {g.nodes} x {g.nproc}" for g in spec.groups)
        nodes = f"{spec.nodes} node(s) (pods) in {len(spec.groups)} group(s) ({groups})"
        world = f"{plan.world_size} = " + " + ".join(f"{g.nodes} x {g.nproc}" for g in spec.groups) + " processes"
    else:
        nodes = f"{plural(spec.nodes, 'node')} (pods)"
        world = f"{plan.world_size} = {plural(spec.nodes, 'node')} x {plural(nproc, 'process', 'processes')}"
    if plan.coordinator is not None:
        rdzv = (
            f"the coordinator (pod {plan.coordinator_name}): every node's trainer meets at {plan.coordinator}; "
            "each pod's torchrun runs its own node alone"
        )
    elif plan.rdzv_mode == "static":
        rdzv = f"static: every node connects to MASTER_ADDR={plan.rank0_host} MASTER_PORT={plan.master_port}"
    else:
        rdzv = f"c10d: every node joins the store at {plan.rdzv_endpoint} (rendezvous id {spec.name})"
    shown = ", ".join(hosts[:3]) + (f", ..., {hosts[-1]}" if len(hosts) > 3 else "")
    if plan.uneven:
        global_rank = "the processes of the nodes before it + local_rank (LOCAL_RANK picks the device)"
    else:
        global_rank = f"node_rank x {nproc} + local_rank (LOCAL_RANK picks the device)"
    commands = {g.name: " ".join(_shown(g.command + plan.trainer_args)) for g in plan.groups}
    if len(set(commands.values())) == 1:
        command_lines = [f"  command:            {next(iter(commands.values()))}"]
    else:
        # the command starts in the column of every other line's value (22: "  processes per node: ")
        command_lines = [f"{f'  command ({name}):':<21} {c}" for name, c in commands.items()]
    if spec.command and not plan.command_starts_torchrun:
        # what runs is the command, once per pod: the counts are what the pods are told, not what starts
        per_node = f"1 (the command, once per pod; the pods are told {per_node}: PET_NPROC_PER_NODE)"
        world = f"{plan.replicas} if each pod's one process joins (the pods are told {world})"
    lines = [
        f"job {spec.name} in namespace {spec.namespace}: {engine.title}",
        f"  nodes:              {nodes}: {shown}",
        f"  processes per node: {per_node} ({device}, backend {plan.backend})",
        f"  world size:         {world}",
        f"  rank 0:             node rank 0 = pod {hosts[0]}, local rank 0",
        f"  rendezvous:         {rdzv}",
        f"  node rank from:     {plan.node_rank_source}",
        *_wrapped("  recovery:           ", recovery_text(plan)),
        *_wrapped("  on failure:         ", plan.failure_handling),
        f"  global rank:        {global_rank}",
        *command_lines,
    ]
    lines.append(
        f"  on SIGTERM:         {spec.grace_period} s to stop (terminationGracePeriodSeconds); torchrun waits "
        f"{spec.grace_period - GRACE_MARGIN} s for its workers"
        + ("; the trainer checkpoints the step it is in and exits 143" if spec.uses_trainer else "")
    )
    if spec.queue:
        kind = engine.workload.kind
        lines += _wrapped(
            "  queue:              ",
            f"Kueue LocalQueue {spec.queue} (label on the {kind}); Kueue's webhook creates the {kind} suspended "
            "and it starts when its Workload is admitted"
            + (
                f"; priority: WorkloadPriorityClass {spec.workload_priority_class}"
                if spec.workload_priority_class
                else ""
            )
            + f" (`ddpctl status {spec.name}` says why it waits)",
        )
        if engine.kueue_note:
            lines += _wrapped("  note:               ", engine.kueue_note)
    lines += _topology_lines(plan)
    lines += _fabric_lines(plan)
    lines += _preflight_lines(plan)
    lines += _stragglers_lines(plan)
    if shipment is not None:
        lines += _wrapped("  workspace:          ", shipment.explain())
    if lint:
        lines += _wrapped("  lint:               ", lint)
    if plan.checkpoint_location:
        lines += _wrapped("  checkpoints:        ", plan.checkpoint_location)
    if spec.pod_security == "restricted" and not (BUILT_TAG.search(spec.image) or spec.image == DEFAULT_IMAGE):
        lines += _wrapped(
            "  runs as:            ",
            f"a non-root user (Pod Security restricted: runAsNonRoot, no runAsUser): {spec.image} is not an image "
            "ddpctl build made (those run as uid 1000), so it must set a numeric USER other than 0, or the kubelet "
            "refuses to start it (CreateContainerConfigError: image will run as root); add USER 1000 to its "
            "Dockerfile, build it on the trainer image (ddpctl build), or use --pod-security baseline",
        )
    for warning in (plan.restart_starts_from_scratch, plan.plain_command_warning):
        if warning:
            lines += _wrapped("  warning:            ", warning)
    ignored = engine.left_to_engine
    if ignored:
        lines.append(f"  note:               {spec.target} leaves {', '.join(ignored)} to the training runtime")
    if not spec.elastic:  # elastic node ranks come from the rendezvous: no fixed table
        lines.append("  layout:             node, group, pod, processes, global ranks")
        lines += node_table(plan)
    return "\n".join(lines) + "\n"
