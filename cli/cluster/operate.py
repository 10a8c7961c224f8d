"""`ddpctl status / logs / list / delete`: find a job by its labels and act on it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import yaml
from ddpctl.cluster.flags import Format, ListFormat, parse_duration
from ddpctl.console import StatusLine, plural
from ddpctl.errors import ClusterError, UsageError

if TYPE_CHECKING:
    from ddpctl.cluster.config import ClusterOptions


def _defaults(name: str | None, namespace: str | None, command: str) -> tuple[str, str | None]:
    """NAME and namespace not given: take them from DDPCTL_NAME/NAMESPACE or ./ddp.yaml, as submit did."""
    from ddpctl.spec.sources import merged_layers

    chosen = merged_layers({}) if (name is None or namespace is None) else {}
    name = name or chosen.get("name")
    if not name:
        raise UsageError(
            f"missing NAME: give the job's name, e.g. `ddpctl {command} ddp-train` (or run it next to the job's "
            "ddp.yaml)"
        )
    return str(name), namespace or (str(chosen["namespace"]) if chosen.get("namespace") else None)


def _connect(options: ClusterOptions, namespace: str | None) -> Any:
    """The cluster of --kubeconfig/--context, in `namespace` (the flag's, else ddp.yaml's, else the context's)."""
    from ddpctl.cluster.config import connect

    return connect(dataclasses.replace(options, namespace=namespace))


# ------------------------------------------------------------------------------ status


def status(
    name: str | None,
    *,
    options: ClusterOptions,
    output: Format | None,
    wait: bool,
    timeout: str | None,
    out: Callable[[str], None],
    say: Callable[[str], None],
) -> None:
    from ddpctl.cluster import watch as W
    from ddpctl.cluster.apply import find_job
    from ddpctl.cluster.kinds import POD, expected_nodes, finished, pod_selector

    timeout_s = parse_duration(timeout)
    name, namespace = _defaults(name, options.namespace, "status")
    with _connect(options, namespace) as cluster:
        ns = cluster.namespace
        kind, job = find_job(cluster, name, ns)
        if wait:
            from ddpctl.cluster.follow import follow_job

            follow_job(cluster, kind, job, timeout=timeout_s, follow=False, rank=None, say=say)
            return
        pods = W.ranked(kind, job, cluster.list(POD, ns, pod_selector(kind, name)).get("items") or [])
        result, cond = finished(kind, job)
        rows = []
        for rank, pod in pods:
            problem = W.pod_problem(kind, pod)
            text = problem[0] if problem else ""
            if text.startswith("Unschedulable"):
                msg = W.scheduler_event(cluster, ns, pod["metadata"]["name"])
                text = f"Unschedulable: {msg}" if msg else text
            cs = W.main_status(kind, pod)
            last = ((cs.get("lastState") or {}).get("terminated")) or {}
            rows.append(
                {
                    "node": rank,
                    "pod": pod["metadata"]["name"],
                    "phase": W.pod_phase(pod),
                    "restarts": int(cs.get("restartCount") or 0),
                    "reason": text,
                    **({"lastTermination": f"{last.get('reason')} (exit code {last.get('exitCode')})"} if last else {}),
                }
            )
        stalled = W.stalled_node(cluster, kind, [(r, p) for r, p in pods if W.pod_problem(kind, p)])
        from ddpctl.cluster.admission import admission

        queued = admission(cluster, job)
        groups = W.counts(kind, pods)
        summary = {
            "name": name,
            "namespace": ns,
            "target": kind.target,
            "kind": kind.kind,
            "apiVersion": kind.api_version,
            "state": W.state_of(result, pods),
            "nodes": expected_nodes(kind, job),
            "replicas": {
                r: {p.lower(): c[p] for p in ("Pending", "Running", "Succeeded", "Failed")} for r, c in groups.items()
            },
            "conditions": [
                {k: c.get(k) for k in ("type", "status", "reason", "message") if c.get(k) is not None}
                for c in (job.get("status") or {}).get("conditions") or []
            ],
            "pods": rows,
            **({"stall": {"node": stalled[0], "summary": stalled[1]}} if stalled else {}),
            **({"admission": queued.as_dict()} if queued else {}),
        }
        if output is Format.json:
            out(json.dumps(summary, indent=2))
            return
        if output is Format.yaml:
            out(yaml.safe_dump(summary, sort_keys=False).rstrip("\n"))
            return
        from ddpctl.cluster.kinds import age

        out(f"Name:        {name}")
        out(f"Namespace:   {ns}")
        out(f"Target:      {kind.target} ({kind.ref(name)})")
        out(
            f"State:       {summary['state']}"
            + (f" ({cond.get('reason')}: {cond.get('message')})" if cond and cond.get("reason") else "")
        )
        out(
            f"Nodes:       {summary['nodes']}  "
            + "; ".join(f"{r}: " + ", ".join(f"{v} {k}" for k, v in c.items()) for r, c in summary["replicas"].items())
        )
        if queued:
            out(f"Admission:   {queued.message}")
        out(f"Age:         {age(job['metadata'].get('creationTimestamp'))}")
        if stalled:
            out(f"Stalled:     node {stalled[0]} stalled: {stalled[1]}")
        if rows:
            out("")
            out(
                table(
                    ["NODE", "POD", "PHASE", "RESTARTS", "REASON"],
                    [
                        [
                            str(r["node"]),
                            r["pod"],
                            r["phase"],
                            str(r["restarts"])
                            + (f" (last: {r['lastTermination']})" if r.get("lastTermination") else ""),
                            r["reason"],
                        ]
                        for r in rows
                    ],
                )
            )
        else:
            out("\nNo pods yet.")


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["   ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header] + rows]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ logs


def logs(
    name: str | None,
    *,
    options: ClusterOptions,
    follow: bool,
    rank: int | None,
    previous: bool,
    tail: int | None,
    timestamps: bool,
    prefix: bool | None,
    out: Callable[[str], None],
    say: Callable[[str], None],
) -> None:
    from ddpctl.cluster import watch as W
    from ddpctl.cluster.apply import find_job
    from ddpctl.cluster.kinds import POD, expected_nodes, pod_selector, rank_notice
    from ddpctl.cluster.logs import Follower, Output, read_logs

    if rank is not None and rank < 0:
        raise UsageError(f"--rank: {rank} is negative; node ranks count from 0")
    if follow and previous:
        raise UsageError("--previous cannot be combined with --follow; drop one of them")
    name, namespace = _defaults(name, options.namespace, "logs")
    with _connect(options, namespace) as cluster:
        ns = cluster.namespace
        kind, job = find_job(cluster, name, ns)
        nodes = expected_nodes(kind, job)
        if rank is not None and nodes is not None and rank >= nodes:
            raise UsageError(
                f"--rank: node rank {rank} is out of range; job {name} has {plural(nodes, 'node')}, "
                f"node ranks 0-{nodes - 1}"
            )
        notice = rank_notice(job, name, rank) if rank is not None else None
        if notice:
            say(notice)
        use_prefix = (rank is None) if prefix is None else prefix
        output = Output()
        if not follow:
            pods = W.ranked(kind, job, cluster.list(POD, ns, pod_selector(kind, name)).get("items") or [])
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
                prefix=use_prefix,
                out=output,
                note=say,
                tail=tail,
                previous=previous,
                timestamps=timestamps,
            )
            return
        follower = Follower(cluster, kind, out=output, prefix=use_prefix, rank=rank, timestamps=timestamps)
        status = StatusLine(enabled=False)  # stall reasons still print (say), the status line does not
        try:
            W.wait(cluster, kind, job, timeout=None, status=status, on_pods=follower.observe)
            follower.drain(W.DRAIN_SECONDS)
        finally:
            follower.stop()
        for err in follower.errors[:1]:
            raise err


# ------------------------------------------------------------------------------ list


def list_jobs(
    *,
    options: ClusterOptions,
    all_namespaces: bool,
    output: ListFormat,
    out: Callable[[str], None],
) -> None:
    from ddpctl.cluster import errors as E
    from ddpctl.cluster.kinds import MANAGED_BY, WORKLOADS, age, expected_nodes, finished, job_name_of
    from ddpctl.engines import engine_for

    namespace = options.namespace
    if namespace is None and not all_namespaces:
        _, namespace = _defaults("-", None, "list")
    with _connect(options, namespace) as cluster:
        ns = None if all_namespaces else cluster.namespace
        found = []
        for kind in WORKLOADS:
            try:
                items = cluster.list(kind, ns, MANAGED_BY).get("items") or []
            except E.ApiError as exc:
                if exc.not_served:
                    continue
                raise
            for item in items:
                if (item.get("metadata") or {}).get("ownerReferences"):
                    continue  # a TrainJob's JobSet and such: listed through their owner
                if kind.target and engine_for(kind.target).first_node_rank(item) > 0:
                    continue  # a later node group's Job: the job is listed once, by its rank-0 group's object
                item.setdefault("apiVersion", kind.api_version)
                item.setdefault("kind", kind.kind)
                found.append((kind, item))
        found.sort(key=lambda ko: (ko[1]["metadata"].get("namespace") or "", ko[1]["metadata"]["name"]))
        if output is ListFormat.json:
            out(
                json.dumps(
                    {"apiVersion": "v1", "kind": "List", "items": [o for _, o in found], "metadata": {}}, indent=2
                )
            )
            return
        if output is ListFormat.yaml:
            out(
                yaml.safe_dump(
                    {"apiVersion": "v1", "kind": "List", "items": [o for _, o in found], "metadata": {}},
                    sort_keys=False,
                ).rstrip("\n")
            )
            return
        if output is ListFormat.name:
            for kind, obj in found:
                out(kind.ref(obj["metadata"]["name"]))
            return
        if not found:
            where = "any namespace" if all_namespaces else f'namespace "{cluster.namespace}"'
            out(f"No ddpctl jobs found in {where}.")
            return
        from ddpctl.cluster.admission import admission
        from ddpctl.spec.kueue import QUEUE_LABEL

        queued = any(QUEUE_LABEL in (o["metadata"].get("labels") or {}) for _, o in found)
        header = (
            (["NAMESPACE"] if all_namespaces else [])
            + ["NAME", "TARGET", "NODES", "STATE"]
            + (["ADMISSION"] if queued else [])
            + ["AGE"]
        )
        if output is ListFormat.wide:
            header += ["KIND", "IMAGE"]
        rows = []
        for kind, obj in found:
            md = obj["metadata"]
            result = finished(kind, obj)[0] or _active_state(kind, obj)
            row = ([md.get("namespace", "")] if all_namespaces else []) + [
                job_name_of(obj),
                kind.target or "",
                str(expected_nodes(kind, obj) or "?"),
                result,
                *([(a.state if (a := admission(cluster, obj)) else "-")] if queued else []),
                age(md.get("creationTimestamp")),
            ]
            if output is ListFormat.wide:
                row += [kind.ref(md["name"]), _image(obj)]
            rows.append(row)
        out(table(header, rows))


def _active_state(kind: Any, obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    if status.get("active") or status.get("startTime"):
        return "Running"
    types = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    for t in ("Restarting", "Running", "Suspended", "Created"):
        if t in types:
            return t
    return "Pending"


def _image(obj: dict[str, Any]) -> str:
    text = json.dumps(obj.get("spec") or {})
    import re

    m = re.search(r'"image": "([^"]+)"', text)
    return m.group(1) if m else ""


# ------------------------------------------------------------------------------ delete


def delete(
    names: list[str],
    *,
    options: ClusterOptions,
    ignore_not_found: bool,
    wait: bool,
    timeout: str | None,
    out: Callable[[str], None],
) -> None:
    from ddpctl.cluster.apply import DELETE_WAIT_SECONDS, delete_job, raise_not_found

    timeout_s = parse_duration(timeout) or DELETE_WAIT_SECONDS
    namespace = options.namespace
    if not names:
        name, namespace = _defaults(None, namespace, "delete")
        names = [name]
    elif namespace is None:
        _, namespace = _defaults(names[0], None, "delete")
    with _connect(options, namespace) as cluster:
        ns = cluster.namespace
        missing = []
        for name in names:
            items = delete_job(
                cluster,
                name,
                ns,
                wait=wait,
                timeout=timeout_s,
                on_deleted=lambda kind, obj: out(f"{kind.ref(obj['metadata']['name'])} deleted"),
            )
            if not items:
                missing.append(name)
        if missing and not ignore_not_found:
            raise_not_found(cluster, missing[0], ns)
