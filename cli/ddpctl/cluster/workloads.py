"""Reading live workload objects and their pods: which pods are a job's, each one's node rank and
role, how many the workload asks for, whether Kueue holds it suspended.

What differs between engines is asked of the engine as static facts (the labels its pods carry,
where its object keeps its node count: `Engine.node_count`, `index_label`, `role_label`,
`lead_replica`, `suspend_field`, `pods_labelled`); how to read them is here, once, for every kind.
"""

from __future__ import annotations

from typing import Any

from ddpctl.cluster.kinds import Kind, trainer_selector
from ddpctl.engines.base import NODE_RANK_OFFSET, NodeCount
from ddpctl_trainer import protocol


def pod_selector(kind: Kind, name: str) -> str:
    """The label selector that finds job NAME's pods: our labels, which every pod template we
    render carries, or the label the engine's runtime puts on the pods it makes."""
    label = kind.engine.pods_labelled
    return f"{label}={name}" if label else trainer_selector(name)


def suspended(kind: Kind, obj: dict[str, Any]) -> bool:
    """Whether the applied object came back suspended (Kueue's webhook suspends what it queues)."""
    return field(obj, kind.engine.suspend_field) is True


def replica_type(kind: Kind, pod: dict[str, Any]) -> str:
    """The pod's role: its role label (the last role when missing), or the engine's one role."""
    engine = kind.engine
    if engine.role_label is None:
        return engine.replica_types[0]
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return str(labels.get(engine.role_label, engine.replica_types[-1]))


def rank_of(kind: Kind, job: dict[str, Any] | None, pod: dict[str, Any]) -> int | None:
    """A pod's node rank: its index, plus its group's offset (node groups); with a lead replica,
    the other roles' pods count after it when the job has one (an unknown job is assumed to)."""
    engine = kind.engine
    md = pod.get("metadata") or {}
    labels, annotations = md.get("labels") or {}, md.get("annotations") or {}
    index = as_int(labels.get(engine.index_label, annotations.get(engine.index_label)))
    if index is None:
        return None
    if engine.lead_replica is not None and replica_type(kind, pod) != engine.replica_types[0]:
        has_lead = not job or field(job, engine.lead_replica) is not None
        return index + (1 if has_lead else 0)
    return index + (rank_offset(pod) or 0)


def first_node_rank(workload: dict[str, Any]) -> int:
    """The node rank of a workload object's first pod: its node group's offset (0 without groups)."""
    return rank_offset((workload.get("spec") or {}).get("template") or {}) or 0


def expected_nodes(kind: Kind, job: dict[str, Any]) -> int | None:
    """How many node pods the workload object asks for. A Job of one node group (its pod template
    carries the group's offset) is part of a larger job: the job's count is its PET_NNODES."""
    env = container_env((job.get("spec") or {}).get("template") or {})
    if NODE_RANK_OFFSET in env:  # under pod recovery PET_NNODES is 1 (each pod alone): DDP_NNODES counts them
        return as_int(env.get(protocol.JOB_NNODES_ENV) or env.get("PET_NNODES"))
    return count_nodes(kind.engine.node_count, job)


def count_nodes(count: NodeCount, obj: dict[str, Any]) -> int | None:
    """`count` read from `obj` (see NodeCount)."""
    found = field(obj, count.path)
    if not count.factors:
        return as_int(found)
    if isinstance(found, dict):
        items = [found[k] for k in count.keys if k in found]
    else:
        items = found if isinstance(found, list) else []
    total = 0
    for item in items:
        if isinstance(item, dict) and item.get("name") in count.skip:
            continue
        product = 1
        for paths in count.factors:
            value = next((v for v in (field(item, p) for p in paths) if v is not None), 1)
            product *= as_int(value) or 0
        total += product
    return total


def rank_offset(pod: dict[str, Any]) -> int | None:
    """PET_NODE_RANK_OFFSET from a pod (or pod template)'s containers (node groups on job/jobset)."""
    value = container_env(pod).get(NODE_RANK_OFFSET)
    return None if value is None else as_int(value)


def container_env(pod: dict[str, Any]) -> dict[str, Any]:
    """The literal env of a pod's containers, the first container that sets a name winning."""
    env: dict[str, Any] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for item in container.get("env") or []:
            env.setdefault(item.get("name"), item.get("value"))
    return env


def pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates a workload holds (a Job's, a JobSet's child Jobs', an operator's replicas'),
    each as a pod (`{"spec": ...}`) for `container_env`."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("containers"), list):
                found.append({"spec": node})
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj.get("spec") or {})
    return found


def meets_at_coordinator(obj: dict[str, Any]) -> bool:
    """Whether a workload's pods meet at a coordinator (recovery: pod), read off its pod templates."""
    return any(protocol.COORDINATOR_ENV in container_env(t) for t in pod_templates(obj))


def field(obj: Any, path: tuple[str, ...]) -> Any:
    """The value at `path` in nested mappings; None where one is missing."""
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def as_int(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None
