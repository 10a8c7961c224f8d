"""Kueue's word on a queued job: admitted, or why it waits. Read from the job's Workload.

Kueue makes one Workload per queued object, labelled `kueue.x-k8s.io/job-uid=<the object's uid>`;
its conditions (QuotaReserved, Admitted, Evicted, Preempted, Finished) carry Kueue's reasons and
messages, such as "couldn't assign flavors ... insufficient quota". A job whose LocalQueue does not
exist gets no useful Workload, so that is checked by name.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import Any

from ddpctl.cluster import errors as E
from ddpctl.cluster.config import Cluster
from ddpctl.cluster.kinds import LOCALQUEUE, PRIORITY, WORKLOAD
from ddpctl.records import record
from ddpctl.spec.kueue import JOB_UID_LABEL, PRIORITY_LABEL, QUEUE_LABEL


@record
class Admission:
    state: str  # admitted, waiting, evicted, finished, not installed
    message: str  # one line for `status`
    workload: str | None = None
    conditions: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "message": self.message, "workload": self.workload, "conditions": self.conditions}


# Kueue's flavor assigner says what does not fit in arithmetic; one short clause says the same
_QUOTA = re.compile(
    r"previously considered podsets requests \((?P<prev>\d+)\) \+ current podset request \((?P<cur>\d+)\)"
    r" > maximum capacity \((?P<cap>\d+)\)"
)


def short_reason(message: str) -> str:
    """Kueue's pending message in one line, its quota arithmetic as `(needs N, maximum capacity M)`."""
    return _QUOTA.sub(
        lambda m: f"(needs {int(m['prev']) + int(m['cur'])}, maximum capacity {m['cap']})", E.one_line(message)
    ).replace(", (needs", " (needs")


def _true(conditions: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None)


def _cluster_queue(cluster: Cluster, ns: str, queue: str) -> str | None:
    try:
        lq = cluster.get(LOCALQUEUE, queue, ns)
    except E.ApiError as exc:
        if exc.code == 404 and not exc.not_served:
            return None
        raise
    return str((lq.get("spec") or {}).get("clusterQueue") or "?")


def _priority_missing(cluster: Cluster, name: str | None) -> bool:
    if not name:
        return False
    try:
        cluster.get(PRIORITY, name)
    except E.ApiError as exc:
        if exc.code == 404 and not exc.not_served:
            return True
        raise
    return False


def _no_local_queue(queue: str, ns: str) -> str:
    return (
        f'LocalQueue "{queue}" does not exist in namespace "{ns}": Kueue will not admit the job; create it or '
        f"resubmit with another --queue (`kubectl get localqueues -n {ns}`)"
    )


def _no_priority_class(name: str) -> str:
    return (
        f'WorkloadPriorityClass "{name}" does not exist: Kueue makes no Workload for the job, which then waits '
        "with no word; create it or resubmit with another --workload-priority-class "
        "(`kubectl get workloadpriorityclasses`)"
    )


def admission(cluster: Cluster, job: dict[str, Any]) -> Admission | None:
    """None for a job with no queue label; else what Kueue has decided about it."""
    md = job.get("metadata") or {}
    queue = (md.get("labels") or {}).get(QUEUE_LABEL)
    if not queue:
        return None
    ns = md.get("namespace") or ""
    try:
        items = cluster.list(WORKLOAD, ns, f"{JOB_UID_LABEL}={md.get('uid')}").get("items") or []
    except E.ApiError as exc:
        if exc.not_served:
            return Admission("not installed", f"queue {queue} named, but this cluster runs no Kueue (no Workload API)")
        raise
    cq = _cluster_queue(cluster, ns, queue)
    if cq is None:
        return Admission("waiting", _no_local_queue(queue, ns))
    priority = (md.get("labels") or {}).get(PRIORITY_LABEL)
    if not items and priority and _priority_missing(cluster, priority):
        return Admission("waiting", _no_priority_class(str(priority)))
    if not items:
        return Admission(
            "waiting", f"no Workload yet for LocalQueue {queue} (ClusterQueue {cq}): Kueue has not seen it"
        )
    wl = items[0]
    conds = list((wl.get("status") or {}).get("conditions") or [])
    brief = [{k: c.get(k) for k in ("type", "status", "reason", "message") if c.get(k) is not None} for c in conds]
    name = wl["metadata"]["name"]
    if done := _true(conds, "Finished"):
        return Admission("finished", f"finished ({done.get('reason') or 'done'})", name, brief)
    for kind in ("Evicted", "Preempted"):
        if c := _true(conds, kind):
            text = f"{kind.lower()} by Kueue ({c.get('reason')}): {E.one_line(c.get('message') or '')}"
            return Admission("evicted", text, name, brief)
    if _true(conds, "Admitted"):
        admitted_by = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") or cq
        return Admission("admitted", f"admitted by ClusterQueue {admitted_by}", name, brief)
    pending = next((c for c in conds if c.get("type") == "QuotaReserved"), None)
    why = short_reason((pending or {}).get("message") or "not yet considered")
    return Admission("waiting", f"waiting for admission in ClusterQueue {cq}: {why}", name, brief)


def queue_warnings(cluster: Cluster, target: str, obj: dict[str, Any], queue: str | None) -> list[str]:
    """What `submit` (also with --dry-run=server, which runs Kueue's webhooks) can tell from the
    cluster about `--queue` and `--workload-priority-class`: no Kueue, no such LocalQueue or
    WorkloadPriorityClass, or Kueue left the object unsuspended (its integration for this kind is off)."""
    from ddpctl.cluster import workloads
    from ddpctl.cluster.kinds import BY_TARGET
    from ddpctl.engines import engine_for

    ns = (obj.get("metadata") or {}).get("namespace") or ""
    priority = ((obj.get("metadata") or {}).get("labels") or {}).get(PRIORITY_LABEL)
    if not queue:
        return [f"--workload-priority-class {priority}: without --queue, Kueue does not manage the job"]
    try:
        cq = _cluster_queue(cluster, ns, queue)
    except E.ApiError as exc:
        if exc.not_served:
            return [f"--queue {queue}: this cluster runs no Kueue (no kueue.x-k8s.io API); the label does nothing"]
        raise
    notes = []
    if priority and _priority_missing(cluster, priority):
        notes.append(f"--workload-priority-class {priority}: {_no_priority_class(priority)}")
    if cq is None:
        notes.append(f"--queue {queue}: {_no_local_queue(queue, ns)}")
    engine = engine_for(target)
    if not workloads.suspended(BY_TARGET[target], obj):
        notes.append(
            f"--queue {queue}: Kueue did not suspend the {engine.workload.kind}: its integration "
            f"{engine.kueue_framework} looks off (integrations.frameworks in Kueue's configuration), so the job "
            "runs without waiting for quota"
        )
    return notes
