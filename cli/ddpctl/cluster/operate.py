"""`ddpctl status / logs / list / delete` in a cluster: find a job by its labels and act on it.

The functions take a connected `Cluster` (its namespace is the job's); `ddpctl.cluster.kube_backend`
connects and calls them."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ddpctl.backend import JobStatus, JobSummary, LogOptions, NodeRow, Where
from ddpctl.console import StatusLine, plural
from ddpctl.errors import ClusterError, UsageError
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.cluster.config import Cluster
    from ddpctl.cluster.kinds import Kind


# ------------------------------------------------------------------------------ status


def job_status(cluster: Cluster, name: str) -> JobStatus:
    """What `ddpctl status NAME` says of a job in the cluster: its state, its pods by node rank and
    why a node fails or waits, Kueue's admission, a stall, rank 0's progress, its preflight report
    and its straggler lines."""
    from ddpctl.cluster import pods as P
    from ddpctl.cluster import workloads
    from ddpctl.cluster.admission import admission
    from ddpctl.cluster.apply import find_job
    from ddpctl.cluster.kinds import POD, age, finished
    from ddpctl.cluster.logs import rank0_preflight, rank0_progress, rank0_recoveries, rank0_stragglers

    ns = cluster.namespace
    kind, job = find_job(cluster, name, ns)
    pods = P.ranked(kind, job, cluster.list(POD, ns, workloads.pod_selector(kind, name)).get("items") or [])
    recoveries: list[str] = []
    spent = None
    if P.recovers_pods(pods):  # recovery: pod: a node's failed pods were replaced alone, its newest is the node's
        pods, gone = P.replaced(pods)
        if finished(kind, job)[0] == "Failed":
            spent = P.spent_node(kind, gone, pods)
        said = rank0_recoveries(cluster, kind, pods)
        # each replaced pod with rank 0's line for its node; then lines whose pods are gone (evicted)
        recoveries = [P.recovery_text(kind, rank, pod, line) for rank, pod, line in P.pair_recoveries(gone, said)]
    result, cond = finished(kind, job)
    rows: list[dict[str, Any]] = []
    for rank, pod in pods:
        problem = P.pod_problem(kind, pod)
        text = problem[0] if problem else ""
        if text.startswith("Unschedulable"):
            msg = P.scheduler_event(cluster, ns, pod["metadata"]["name"])
            text = f"Unschedulable: {msg}" if msg else text
        cs = P.main_status(kind, pod)
        last = ((cs.get("lastState") or {}).get("terminated")) or {}
        rows.append(
            {
                "node": rank,
                "pod": pod["metadata"]["name"],
                "phase": P.pod_phase(pod),
                "restarts": int(cs.get("restartCount") or 0),
                "reason": text,
                **({"lastTermination": f"{last.get('reason')} (exit code {last.get('exitCode')})"} if last else {}),
            }
        )
    failing = [(r, p) for r, p in pods if P.pod_problem(kind, p)]
    stalled = P.stalled_node(cluster, kind, failing)
    missing = None if stalled or not failing else P.missing_code_node(cluster, kind, failing)
    queued = admission(cluster, job)
    groups = P.counts(kind, pods)
    state = P.state_of(result, pods)
    started = any(P.pod_phase(p) != "Pending" for _, p in pods)
    progress = rank0_progress(cluster, kind, pods) if started else None
    preflight = rank0_preflight(cluster, kind, pods) if started and _checks_on(job) else []
    stragglers = rank0_stragglers(cluster, kind, pods) if started and stragglers_on(job) else []
    replicas = {r: {p.lower(): c[p] for p in ("Pending", "Running", "Succeeded", "Failed")} for r, c in groups.items()}
    data = {
        "namespace": ns,
        "target": kind.target,
        "kind": kind.kind,
        "apiVersion": kind.api_version,
        "state": state,
        "nodes": workloads.expected_nodes(kind, job),
        "replicas": replicas,
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message") if c.get(k) is not None}
            for c in (job.get("status") or {}).get("conditions") or []
        ],
        "pods": rows,
        **({"stall": {"node": stalled[0], "summary": stalled[1]}} if stalled else {}),
        **({"cause": {"node": missing[0], "text": missing[1]}} if missing else {}),
        **({"admission": queued.as_dict()} if queued else {}),
        **({"recoveries": recoveries} if recoveries else {}),
    }
    lines = [("Admission", queued.message)] if queued else []
    lines.append(("Age", age(job["metadata"].get("creationTimestamp"))))
    if stalled:
        lines.append(("Stalled", f"node {stalled[0]} stalled: {stalled[1]}"))
    if missing:
        lines.append(("Cause", f"node {missing[0]}: {missing[1]}"))
    if recoveries:
        lines.append(("Recoveries", "; ".join(recoveries)))
    if spent and not stalled and not missing:
        lines.append(("Cause", spent))
    return JobStatus(
        name=name,
        backend=Where.cluster,
        where=f"namespace {ns}, {cluster.where}",
        state=state + (f" ({cond.get('reason')}: {cond.get('message')})" if cond and cond.get("reason") else ""),
        nodes=f"{data['nodes']}  "
        + "; ".join(f"{r}: " + ", ".join(f"{v} {k}" for k, v in c.items()) for r, c in replicas.items()),
        progress=progress[0] if progress else None,
        progress_age_s=progress[1] if progress else None,
        head=[("Namespace", ns), ("Target", f"{kind.target} ({kind.ref(name)})")],
        lines=lines,
        rows=[
            NodeRow(r["node"], r["pod"], r["phase"], r["restarts"], r["reason"], r.get("lastTermination", ""))
            for r in rows
        ],
        preflight=preflight,
        stragglers=stragglers,
        data=data,
    )


def _checks_on(job: dict[str, Any]) -> bool:
    """Whether the job's pods run the preflight (its variable is in the object's pod templates, where
    each engine keeps them): only then is node 0's log read for the report."""
    return json.dumps(protocol.PREFLIGHT_ENV) in json.dumps(job.get("spec") or {})


def stragglers_on(job: dict[str, Any]) -> bool:
    """Whether the job's pods watch for stragglers: an env entry of its variable, not `off`, in the
    object's pod templates (or a TrainJob's trainer env): only then is node 0's log read for them."""

    def found(node: Any) -> bool:
        if isinstance(node, dict):
            if node.get("name") == protocol.STRAGGLERS_ENV and "value" in node:
                return str(node["value"]) != "off"
            return any(found(v) for v in node.values())
        return isinstance(node, list) and any(found(v) for v in node)

    return found(job.get("spec") or {})


def wait_for(cluster: Cluster, name: str, timeout: float | None, say: Callable[[str], None]) -> None:
    """`status --wait`: follow the job with a status line until it ends (exit 0 on success)."""
    from ddpctl.cluster.apply import find_job
    from ddpctl.cluster.follow import follow_job

    kind, job = find_job(cluster, name, cluster.namespace)
    follow_job(cluster, kind, job, timeout=timeout, follow=False, rank=None, say=say)


# ------------------------------------------------------------------------------ logs


def logs(
    cluster: Cluster, name: str, options: LogOptions, out: Callable[[str], None], say: Callable[[str], None]
) -> None:
    """Every node's logs (or node `options.rank`'s), read once or followed until the job ends."""
    from ddpctl.cluster import pods as P
    from ddpctl.cluster import watch as W
    from ddpctl.cluster import workloads
    from ddpctl.cluster.apply import find_job
    from ddpctl.cluster.kinds import POD, rank_notice
    from ddpctl.cluster.logs import Follower, Output, read_logs

    rank = options.rank
    ns = cluster.namespace
    kind, job = find_job(cluster, name, ns)
    nodes = workloads.expected_nodes(kind, job)
    if rank is not None and nodes is not None and rank >= nodes:
        raise UsageError(
            f"--rank: node rank {rank} is out of range; job {name} has {plural(nodes, 'node')}, "
            f"node ranks 0-{nodes - 1}"
        )
    notice = rank_notice(job, name, rank) if rank is not None else None
    if notice:
        say(notice)
    output = Output()
    if not options.follow:
        pods = P.ranked(kind, job, cluster.list(POD, ns, workloads.pod_selector(kind, name)).get("items") or [])
        if rank is not None:
            pods = [(r, p) for r, p in pods if r == rank]
        if not pods:
            raise ClusterError(
                f'job "{name}" in namespace "{ns}" has no pods'
                + (f" for node rank {rank}" if rank is not None else "")
                + f" yet; see `ddpctl status {name} -n {ns}`"
            )
        read_logs(
            cluster,
            kind,
            job,
            pods,
            prefix=options.with_prefix,
            out=output,
            note=say,
            tail=options.tail,
            previous=options.previous,
            timestamps=options.timestamps,
        )
        return
    follower = Follower(cluster, kind, out=output, prefix=options.with_prefix, rank=rank, timestamps=options.timestamps)
    status = StatusLine(enabled=False)  # stall reasons still print (say), the status line does not
    try:
        W.wait(cluster, kind, job, timeout=None, status=status, on_pods=follower.observe)
        follower.drain(W.DRAIN_SECONDS)
    finally:
        follower.stop()
    for err in follower.errors[:1]:
        raise err


# ------------------------------------------------------------------------------ list


def list_jobs(cluster: Cluster, all_namespaces: bool) -> list[JobSummary]:
    """The jobs ddpctl made in the namespace (or all), found by label: all four kinds, each once."""
    from ddpctl.cluster import errors as E
    from ddpctl.cluster import workloads
    from ddpctl.cluster.admission import admission
    from ddpctl.cluster.kinds import MANAGED_BY, NOT_COORDINATOR, WORKLOADS, age, finished, job_name_of
    from ddpctl.spec.kueue import QUEUE_LABEL

    ns = None if all_namespaces else cluster.namespace
    found = []
    for kind in WORKLOADS:
        try:
            items = cluster.list(kind, ns, f"{MANAGED_BY},{NOT_COORDINATOR}").get("items") or []
        except E.ApiError as exc:
            if exc.not_served:
                continue
            raise
        for item in items:
            if (item.get("metadata") or {}).get("ownerReferences"):
                continue  # a TrainJob's JobSet and such: listed through their owner
            if workloads.first_node_rank(item) > 0:
                continue  # a later node group's Job: the job is listed once, by its rank-0 group's object
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.kind)
            found.append((kind, item))
    found.sort(key=lambda ko: (ko[1]["metadata"].get("namespace") or "", ko[1]["metadata"]["name"]))
    queued = any(QUEUE_LABEL in (o["metadata"].get("labels") or {}) for _, o in found)
    recovered = _recoveries(cluster, ns, found)
    jobs = []
    for kind, obj in found:
        md = obj["metadata"]
        admitted = (a.state if (a := admission(cluster, obj)) else "-") if queued else None
        jobs.append(
            JobSummary(
                name=job_name_of(obj),
                target=kind.target or "",
                nodes=str(workloads.expected_nodes(kind, obj) or "?"),
                state=finished(kind, obj)[0] or _active_state(obj),
                age=age(md.get("creationTimestamp")),
                namespace=md.get("namespace", ""),
                admission=admitted,
                recoveries=recovered.get((md.get("namespace", ""), job_name_of(obj))),
                ref=kind.ref(md["name"]),
                image=_image(obj),
                raw=obj,
            )
        )
    return jobs


def _recoveries(
    cluster: Cluster, ns: str | None, found: list[tuple[Kind, dict[str, Any]]]
) -> dict[tuple[str, str], int]:
    """Pod-recovery jobs' replaced pods, by (namespace, job): one list of the namespace's pods
    (only when such a job is listed). An evicted pod's object is deleted: it is not counted."""
    from ddpctl.cluster import pods as P
    from ddpctl.cluster import workloads
    from ddpctl.cluster.kinds import MANAGED_BY, NOT_COORDINATOR, POD, job_name_of

    recovering = [(k, o) for k, o in found if workloads.meets_at_coordinator(o)]
    if not recovering:
        return {}
    pods = cluster.list(POD, ns, f"{MANAGED_BY},{NOT_COORDINATOR}").get("items") or []
    out = {}
    for kind, obj in recovering:
        where, name = obj["metadata"].get("namespace", ""), job_name_of(obj)
        mine = [p for p in pods if p["metadata"].get("namespace", "") == where and job_name_of(p) == name]
        out[(where, name)] = len(P.replaced(P.ranked(kind, obj, mine))[1])
    return out


def _active_state(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    if status.get("active") or status.get("startTime"):
        return "Running"
    types = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    for t in ("Restarting", "Running", "Suspended", "Created"):
        if t in types:
            return t
    return "Pending"


def _image(obj: dict[str, Any]) -> str:
    import re

    m = re.search(r'"image": "([^"]+)"', json.dumps(obj.get("spec") or {}))
    return m.group(1) if m else ""


# ------------------------------------------------------------------------------ delete


def delete(
    cluster: Cluster,
    names: Sequence[str],
    *,
    ignore_not_found: bool,
    wait: bool,
    timeout: float | None,
    out: Callable[[str], None],
) -> None:
    """Delete every object of each job (foreground: its pods go first), optionally waiting."""
    from ddpctl.cluster.apply import DELETE_WAIT_SECONDS, delete_job, raise_not_found

    ns = cluster.namespace
    missing = []
    for name in names:
        items = delete_job(
            cluster,
            name,
            ns,
            wait=wait,
            timeout=timeout or DELETE_WAIT_SECONDS,
            on_deleted=lambda kind, obj: out(f"{kind.ref(obj['metadata']['name'])} deleted"),
        )
        if not items:
            missing.append(name)
    if missing and not ignore_not_found:
        raise_not_found(cluster, missing[0], ns)
