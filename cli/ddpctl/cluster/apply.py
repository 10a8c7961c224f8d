"""Create, find, list and delete a job's objects.

`submit` applies each rendered object with server-side apply (field manager `ddpctl`, content type
`application/apply-patch+yaml`). An object of the same name that this job did not create is an
error; the job's own objects must not exist yet, or `--replace` deletes them and waits until they
are gone. So every apply creates its object: nothing is merged into an existing one and no `force`
is needed. When one apply fails, the objects this submit created are deleted again: the deletion
is requested (foreground) but not waited for, so they may still be terminating when the command
returns, and any that could not be deleted are named in the error.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ddpctl.cluster import errors as E
from ddpctl.cluster import workloads
from ddpctl.cluster.config import FIELD_MANAGER, Cluster, iter_lines
from ddpctl.cluster.kinds import JOB_OBJECT_KINDS, POD, SECRET, WORKLOADS, Kind, is_coordinator, job_selector, kind_of
from ddpctl.engines import engine_for
from ddpctl.errors import ClusterError, DdpctlError, NotFound

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
WORKSPACE_COMPONENT = "app.kubernetes.io/component=workspace"  # the label of a job's workspace Secret
DELETE_WAIT_SECONDS = 120.0


@dataclass
class Applied:
    kind: Kind
    obj: dict[str, Any]  # what the server answered
    created: bool


def _ns(obj: dict[str, Any], cluster: Cluster) -> str:
    return (obj.get("metadata") or {}).get("namespace") or cluster.namespace


def apply_one(cluster: Cluster, obj: dict[str, Any], *, dry_run: bool = False) -> Applied:
    kind = kind_of(obj)
    name, ns = obj["metadata"]["name"], _ns(obj, cluster)
    query: list[tuple[str, Any]] = [("fieldManager", FIELD_MANAGER)]
    if dry_run:
        query.append(("dryRun", "All"))
    code, answer = cluster.call(
        "PATCH",
        kind.path(ns, name),
        E.Op("apply", kind, name, ns, dry_run),
        query=query,
        body=obj,
        content_type=APPLY_CONTENT_TYPE,
    )
    return Applied(kind, answer, code == 201)


PER_INDEX = "backoffLimitPerIndex"  # recovery: pod replaces a failed pod alone by this limit


def per_index_specs(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The Job specs in `obj` that set a per-index backoff limit, each with where it is: the Job's
    own, or a JobSet's child Job templates."""
    spec = obj.get("spec") or {}
    if PER_INDEX in spec:
        return [("spec", spec)]
    return [
        (f"spec.replicatedJobs[{i}].template.spec", rj["template"]["spec"])
        for i, rj in enumerate(spec.get("replicatedJobs") or [])
        if PER_INDEX in ((rj.get("template") or {}).get("spec") or {})
    ]


def dropped_per_index(sent: dict[str, Any], answered: dict[str, Any]) -> list[str]:
    """Where the cluster's answer to `sent` lost the per-index backoff limit it was sent with."""
    kept = {where for where, spec in per_index_specs(answered)}
    return [where for where, _ in per_index_specs(sent) if where not in kept]


def require_per_index(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    """recovery: pod needs the cluster to keep per-index backoff limits (Kubernetes 1.29 or later
    with JobBackoffLimitPerIndex, on by default, GA in 1.33; for a JobSet, a CRD whose schema knows
    the field). An older API server refuses the unknown field; a disabled feature gate or an older
    CRD drops it without a word, and the job would restart whole. A server dry run of the first
    object that sets it tells, before anything is created."""
    for obj in objects:
        if not per_index_specs(obj):
            continue
        answered = apply_one(cluster, obj, dry_run=True).obj
        lost = dropped_per_index(obj, answered)
        if lost:
            ref = kind_of(obj).ref(obj["metadata"]["name"])
            raise ClusterError(
                f"recovery: pod needs per-index backoff limits, and this cluster dropped {lost[0]}.{PER_INDEX} "
                f"from {ref} (it needs Kubernetes 1.29 or later with the JobBackoffLimitPerIndex feature, GA in "
                "1.33, and for a JobSet a JobSet release whose CRD has the field); submit with --recovery gang, "
                "or upgrade the cluster"
            )
        return


def find_objects(
    cluster: Cluster, name: str, namespace: str, kinds: tuple[Kind, ...] = JOB_OBJECT_KINDS
) -> list[tuple[Kind, dict[str, Any]]]:
    """The top-level objects ddpctl made for job NAME (labels), across the kinds the cluster serves.
    Objects owned by another object (a TrainJob's JobSet, a JobSet's Jobs) are left to the GC."""
    found = []
    for kind in kinds:
        try:
            items = cluster.list(kind, namespace, job_selector(name)).get("items") or []
        except E.ApiError as exc:
            if exc.not_served or (kind is SECRET and exc.code == 403):
                continue  # one who may not list Secrets made no workspace Secret; its owner's GC removes one
            raise
        for item in items:
            if not (item.get("metadata") or {}).get("ownerReferences"):
                found.append((kind, item))
    return found


def find_job(cluster: Cluster, name: str, namespace: str) -> tuple[Kind, dict[str, Any]]:
    """The workload (Job, PyTorchJob, JobSet or TrainJob) of job NAME, or a one-line error."""
    workloads = [(k, o) for k, o in find_objects(cluster, name, namespace, WORKLOADS) if not is_coordinator(o)]
    if not workloads:
        raise_not_found(cluster, name, namespace)
    if len(workloads) > 1:
        # two submits with different targets: the newest wins; of one submit's objects (a Job
        # per node group), the one that runs rank 0
        # (a kind's objects are made by one submit, a second or more apart: the kind's newest one
        # dates the submit, never a later group's Job)
        newest: dict[str, str] = {}
        for kind, obj in workloads:
            stamp = obj["metadata"].get("creationTimestamp") or ""
            newest[kind.kind] = max(newest.get(kind.kind, ""), stamp)
        workloads.sort(key=lambda ko: _first_rank(ko[0], ko[1]))
        workloads.sort(key=lambda ko: newest[ko[0].kind], reverse=True)
    return workloads[0]


def _first_rank(kind: Kind, obj: dict[str, Any]) -> int:
    """The node rank of a workload object's first pod (0 unless it runs a later node group)."""
    return workloads.first_node_rank(obj) if kind.target else 0


def raise_not_found(cluster: Cluster, name: str, namespace: str) -> None:
    from ddpctl.cluster.kinds import NAMESPACE

    try:
        cluster.get(NAMESPACE, namespace, None)
        missing_ns = False
    except E.ApiError as exc:
        missing_ns = exc.code == 404  # a 403 (may not read namespaces): cannot tell
    if missing_ns:
        raise NotFound(
            f'namespace "{namespace}" does not exist ({cluster.where}); check -n, or create it with '
            f"`kubectl create namespace {namespace}`"
        )
    raise NotFound(
        f'no job "{name}" in namespace "{namespace}" (no Job, PyTorchJob, JobSet or TrainJob labelled '
        f"{job_selector(name)}); see `ddpctl list -n {namespace}`"
    )


def delete_object(cluster: Cluster, kind: Kind, obj: dict[str, Any], *, propagation: str = "Foreground") -> None:
    md = obj["metadata"]
    ns = md.get("namespace")
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
    if md.get("uid"):
        body["preconditions"] = {"uid": md["uid"]}  # never delete a same-named successor
    try:
        cluster.call("DELETE", kind.path(ns, md["name"]), E.Op("delete", kind, md["name"], ns), body=body)
    except E.ApiError as exc:
        if not exc.object_missing:
            raise


def propagation_of(kind: Kind) -> str:
    """How the garbage collector removes the dependents of an object of this kind."""
    return engine_for(kind.target).delete_propagation if kind.target else "Foreground"


def _pods_to_wait_for(items: list[tuple[Kind, dict[str, Any]]], name: str, namespace: str) -> tuple[str, str] | None:
    """A background delete leaves the pods to the garbage collector: wait for them by label."""
    return (name, namespace) if any(propagation_of(kind) == "Background" for kind, _ in items) else None


def wait_deleted(
    cluster: Cluster,
    items: list[tuple[Kind, dict[str, Any]]],
    timeout: float = DELETE_WAIT_SECONDS,
    *,
    pods_of: tuple[str, str] | None = None,
) -> None:
    """Until each object is gone (foreground deletion ends when its dependents are gone), and then,
    with `pods_of` (job name, namespace), until no pod of that job is left (background deletion)."""
    deadline = time.monotonic() + timeout
    for kind, obj in items:
        md = obj["metadata"]
        while True:
            current = cluster.get_or_none(kind, md["name"], md.get("namespace"))
            if current is None or current["metadata"].get("uid") != md.get("uid"):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClusterError(
                    f'{kind.ref(md["name"])} in namespace "{md.get("namespace")}" is still being deleted '
                    f"after {int(timeout)}s (finalizers: "
                    f"{', '.join(current['metadata'].get('finalizers') or []) or 'none'}); "
                    "check it with kubectl, then retry"
                )
            _wait_for_change(
                cluster,
                kind,
                md.get("namespace"),
                ("fieldSelector", f"metadata.name={md['name']}"),
                current["metadata"].get("resourceVersion", "0"),
                min(left, 30.0),
                md["name"],
            )
    if pods_of:
        _wait_pods_gone(cluster, *pods_of, deadline, timeout)


def _wait_pods_gone(cluster: Cluster, name: str, namespace: str, deadline: float, timeout: float) -> None:
    selector = job_selector(name)
    while True:
        pods = cluster.list(POD, namespace, selector)
        if not pods.get("items"):
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise ClusterError(
                f'{len(pods["items"])} pod(s) of job "{name}" in namespace "{namespace}" still exist after '
                f"{int(timeout)}s; check them with `kubectl get pods -n {namespace} -l {selector}`, then retry"
            )
        _wait_for_change(
            cluster,
            POD,
            namespace,
            ("labelSelector", selector),
            pods["metadata"].get("resourceVersion", "0"),
            min(left, 30.0),
            None,
        )


def _wait_for_change(
    cluster: Cluster,
    kind: Kind,
    namespace: str | None,
    selector: tuple[str, str],
    resource_version: str,
    seconds: float,
    name: str | None,
) -> None:
    query = [
        ("watch", "true"),
        selector,
        ("resourceVersion", resource_version),
        ("timeoutSeconds", str(max(1, int(seconds)))),
    ]
    raw = cluster.stream(kind.path(namespace), E.Op("watch", kind, name, namespace), query, read_timeout=seconds + 10)
    try:
        for _ in iter_lines(raw):
            return  # any change: look again
    except Exception:  # noqa: BLE001 - a dropped watch: look again
        return
    finally:
        cluster.done_with(raw)


def delete_job(
    cluster: Cluster,
    name: str,
    namespace: str,
    *,
    wait: bool = True,
    timeout: float = DELETE_WAIT_SECONDS,
    on_deleted: Callable[[Kind, dict[str, Any]], None] | None = None,
) -> list[tuple[Kind, dict[str, Any]]]:
    """Delete every top-level object of job NAME (foreground propagation where the engine's controller
    allows it); [] when none exist. Waiting ends when the objects and the job's pods are gone."""
    items = find_objects(cluster, name, namespace)
    # the workload first (its pods go with it), the Service after
    items.sort(key=lambda ko: 0 if ko[0] in WORKLOADS else 1)
    for kind, obj in items:
        delete_object(cluster, kind, obj, propagation=propagation_of(kind))
        if on_deleted:
            on_deleted(kind, obj)
    if wait and items:
        wait_deleted(cluster, items, timeout, pods_of=_pods_to_wait_for(items, name, namespace))
    return items


def submit(
    cluster: Cluster,
    objects: list[dict[str, Any]],
    *,
    name: str,
    namespace: str,
    dry_run: bool = False,
    replace: bool = False,
    say: Callable[[str], None] = lambda s: None,
) -> list[Applied]:
    """Apply the job's objects in order; roll back what this call created when one fails."""
    existing = find_objects(cluster, name, namespace)
    theirs = []
    for obj in objects:
        kind = kind_of(obj)
        cur = cluster.get_or_none(kind, obj["metadata"]["name"], _ns(obj, cluster))
        if cur is not None and not any(
            k is kind and o["metadata"].get("uid") == cur["metadata"].get("uid") for k, o in existing
        ):
            theirs.append((kind, cur))
    if theirs:
        kind, cur = theirs[0]
        raise ClusterError(
            f'{kind.ref(cur["metadata"]["name"])} already exists in namespace "{namespace}" and was not '
            "created by ddpctl for this job; choose another name with --name, or delete it yourself"
        )
    if existing and not replace:
        kinds = ", ".join(k.ref(o["metadata"]["name"]) for k, o in existing)
        raise ClusterError(
            f'job "{name}" already exists in namespace "{namespace}" ({kinds}); delete it with '
            f"`ddpctl delete {name} -n {namespace}`, or resubmit with --replace"
        )
    if existing and replace and not dry_run:
        for kind, obj in existing:
            delete_object(cluster, kind, obj, propagation=propagation_of(kind))
            say(f"{kind.ref(obj['metadata']['name'])} deleted (--replace)")
        wait_deleted(cluster, existing, pods_of=_pods_to_wait_for(existing, name, namespace))
    if replace and not dry_run:
        _delete_workspace_secrets(cluster, name, namespace)
    done: list[Applied] = []
    try:
        for obj in objects:
            done.append(apply_one(cluster, obj, dry_run=dry_run))
    except BaseException as exc:
        created = [a for a in done if a.created and not dry_run]
        if not created:
            raise
        removed, failed = [], []
        for applied in reversed(created):
            try:
                delete_object(cluster, applied.kind, applied.obj, propagation=propagation_of(applied.kind))
                removed.append(applied.kind.ref(applied.obj["metadata"]["name"]))
            except DdpctlError as rollback_exc:
                failed.append(f"{applied.kind.ref(applied.obj['metadata']['name'])} ({rollback_exc.message})")
        note = f"rolled back: deleted {', '.join(removed)}" if removed else ""
        if failed:
            note += (
                "; " if note else ""
            ) + f"could not delete {', '.join(failed)}: run `ddpctl delete {name} -n {namespace}`"
        if isinstance(exc, DdpctlError):
            raise _with_note(exc, note) from None
        say(f"interrupted; {note}")
        raise
    return done


def _with_note(exc: DdpctlError, note: str) -> DdpctlError:
    """The same error (same class, same exit code) with the rollback note appended."""
    new = copy.copy(exc)
    new.message = f"{exc.message} ({note})"
    return new


def _delete_workspace_secrets(cluster: Cluster, name: str, namespace: str) -> None:
    """--replace: the job's workspace Secrets, owned by the workload just deleted, go now rather
    than whenever the garbage collector comes (it would take one of the same name, the same code,
    from the new job)."""
    try:
        items = cluster.list(SECRET, namespace, f"{job_selector(name)},{WORKSPACE_COMPONENT}").get("items") or []
    except E.ApiError as exc:
        if exc.not_served or exc.code == 403:
            return
        raise
    found = [(SECRET, item) for item in items]
    for kind, obj in found:
        delete_object(cluster, kind, obj, propagation="Background")
    if found:
        wait_deleted(cluster, found)


def own(cluster: Cluster, owner: dict[str, Any], obj: dict[str, Any]) -> None:
    """Make `owner` (the job's workload, now that it exists) the owner of `obj` (the workspace's
    Secret, made before it so that no pod starts without it): the garbage collector deletes it with
    the job. A failure leaves it to `ddpctl delete`, which finds it by its labels."""
    kind, md = kind_of(obj), obj["metadata"]
    ns = md.get("namespace") or cluster.namespace
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }
    cluster.call(
        "PATCH",
        kind.path(ns, md["name"]),
        E.Op("patch", kind, md["name"], ns),
        body={"metadata": {"ownerReferences": [ref]}},
        content_type="application/merge-patch+json",
    )
