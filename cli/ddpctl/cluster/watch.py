"""A job's live state: list + watch of the workload and its pods, the status line, and why a job
failed or stalls (termination reasons, waiting reasons, the scheduler's events, last log lines)."""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from ddpctl.cluster import errors as E
from ddpctl.cluster import workloads
from ddpctl.cluster.admission import Admission, admission
from ddpctl.cluster.config import Cluster, iter_lines
from ddpctl.cluster.kinds import (
    EVENT,
    POD,
    Kind,
    finished,
    job_name_of,
    trainer_selector,
)
from ddpctl.cluster.pods import (
    Outcome,
    pod_problem,
    pull_failure,
    ranked,
    scheduler_event,
    state_of,
    status_line,
)
from ddpctl.console import StatusLine, plural
from ddpctl.errors import ClusterError, DdpctlError, RuntimeFailure, WaitTimeout
from ddpctl.spec import kueue

WATCH_SECONDS = 300  # server-side timeout of one watch request; it is renewed from the last resourceVersion
RECONNECT_ATTEMPTS = 3
DRAIN_SECONDS = 10.0  # after the job finished, how long log streams may take to end by themselves
# while Kueue holds a queued job, how often its Workload is read again (the Workload is not watched)
ADMISSION_POLL_SECONDS = 3.0


# ------------------------------------------------------------------------------ list + watch


class Watcher(threading.Thread):
    """List, then watch from the list's resourceVersion; events go to a queue as (tag, type, obj).
    A 410 Expired re-lists (SYNC); a dropped stream resumes from the last resourceVersion."""

    def __init__(
        self,
        cluster: Cluster,
        kind: Kind,
        namespace: str,
        tag: str,
        events: queue.Queue[Any],
        selector: str | None = None,
        field_selector: str | None = None,
    ) -> None:
        super().__init__(name=f"ddpctl-watch-{tag}", daemon=True)
        self.cluster, self.kind, self.namespace, self.tag, self.events = cluster, kind, namespace, tag, events
        self.selector, self.field_selector = selector, field_selector
        self.stopped = threading.Event()
        self._raw: Any = None

    def stop(self) -> None:
        self.stopped.set()
        if self._raw is not None:
            self.cluster.done_with(self._raw)

    def run(self) -> None:
        import urllib3

        rv: str | None = None
        failures = 0
        op = E.Op("watch", self.kind, None, self.namespace)
        while not self.stopped.is_set():
            try:
                if rv is None:
                    listed = self.cluster.list(self.kind, self.namespace, self.selector, self.field_selector)
                    rv = listed["metadata"]["resourceVersion"]
                    self.events.put((self.tag, "SYNC", listed.get("items") or []))
                query: list[tuple[str, Any]] = [
                    ("watch", "true"),
                    ("resourceVersion", rv),
                    ("allowWatchBookmarks", "true"),
                    ("timeoutSeconds", str(WATCH_SECONDS)),
                ]
                query += [
                    (k, v) for k, v in (("labelSelector", self.selector), ("fieldSelector", self.field_selector)) if v
                ]
                self._raw = raw = self.cluster.stream(
                    self.kind.path(self.namespace), op, query, read_timeout=WATCH_SECONDS + 30
                )
                try:
                    for line in iter_lines(raw):
                        if self.stopped.is_set():
                            return
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        typ, obj = event.get("type"), event.get("object") or {}
                        if typ == "ERROR":
                            if obj.get("code") == 410:
                                rv = None  # expired: list again
                                break
                            raise E.from_status(int(obj.get("code") or 500), obj, op, self.cluster.where)
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if typ != "BOOKMARK":
                            self.events.put((self.tag, typ, obj))
                finally:
                    self.cluster.done_with(raw)
                    self._raw = None
                failures = 0
            except (DdpctlError, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                if self.stopped.is_set():
                    return
                failures += 1
                fatal = isinstance(exc, E.ApiError) and exc.code in (401, 403, 404)
                if fatal or failures >= RECONNECT_ATTEMPTS:
                    err = (
                        exc if isinstance(exc, DdpctlError) else E.from_transport(exc, op, self.cluster.where, failures)
                    )
                    self.events.put((self.tag, "FAIL", err))
                    return
                self.stopped.wait(0.5 * failures)  # reconnect backoff


class JobMonitor:
    """The workload object and its pods, kept current by two watchers."""

    def __init__(self, cluster: Cluster, kind: Kind, job: dict[str, Any]) -> None:
        self.cluster, self.kind, self.job = cluster, kind, job
        md = job["metadata"]
        self.name, self.namespace = md["name"], md.get("namespace") or cluster.namespace
        self.job_name = job_name_of(job)
        # Node groups on the `job` target: one Job per group (`<job>-<group>`), all watched; the
        # job failed when one failed, succeeded when all did. Otherwise one object, by name.
        self.grouped = self.job_name != self.name
        self.jobs: dict[str, dict[str, Any]] = {self.name: job}
        self.pods: dict[str, dict[str, Any]] = {}
        self.events: queue.Queue[Any] = queue.Queue()
        self.synced: set[str] = set()
        job_filter = (
            {"selector": trainer_selector(self.job_name)}
            if self.grouped
            else {"field_selector": f"metadata.name={self.name}"}
        )
        self.watchers = [
            Watcher(cluster, kind, self.namespace, "job", self.events, **job_filter),
            Watcher(
                cluster, POD, self.namespace, "pod", self.events, selector=workloads.pod_selector(kind, self.job_name)
            ),
        ]
        self._scheduler_messages: dict[str, str] = {}

    def __enter__(self) -> JobMonitor:
        for w in self.watchers:
            w.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        for w in self.watchers:
            w.stop()

    def next(self, timeout: float | None) -> bool:
        """Apply the next event(s); False when `timeout` passed with none."""
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            return False
        while True:
            self._apply(*item)
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                return True

    def _apply(self, tag: str, typ: str, payload: Any) -> None:
        if typ == "FAIL":
            raise payload
        if tag == "job":
            if typ == "SYNC":
                self.synced.add("job")
                mine = [o for o in payload if o["metadata"].get("uid") == self.job["metadata"].get("uid")]
                if not mine:
                    raise ClusterError(
                        f'{self.kind.ref(self.name)} in namespace "{self.namespace}" was deleted while ddpctl was '
                        'watching it'
                    )
                self.job = mine[0]
                if self.grouped:
                    self.jobs = {o["metadata"]["name"]: o for o in payload if not o["metadata"].get("ownerReferences")}
            elif typ == "DELETED":
                gone = payload["metadata"]["name"]
                raise ClusterError(
                    f'{self.kind.ref(gone)} in namespace "{self.namespace}" was deleted while ddpctl was watching it'
                )
            else:
                self.jobs[payload["metadata"]["name"]] = payload
                if payload["metadata"]["name"] == self.name:
                    self.job = payload
            return
        if typ == "SYNC":
            self.synced.add("pod")
            self.pods = {p["metadata"]["name"]: p for p in payload}
        elif typ == "DELETED":
            self.pods.pop(payload["metadata"]["name"], None)
        else:
            self.pods[payload["metadata"]["name"]] = payload

    def refresh_pods(self) -> None:
        """Re-list the pods: the job's final condition can arrive before the pods' last updates
        (two watch streams), and the final line and the failure reasons must see the end state."""
        items = (
            self.cluster.list(POD, self.namespace, workloads.pod_selector(self.kind, self.job_name)).get("items") or []
        )
        self.pods = {p["metadata"]["name"]: p for p in items}

    def wait_synced(self, deadline: float | None) -> bool:
        while len(self.synced) < 2:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.next(left)
        return True

    # ---------------------------------------------------------------- views

    @property
    def result(self) -> str | None:
        return finished(self.kind, self.decisive_job)[0]

    @property
    def decisive_job(self) -> dict[str, Any]:
        """The object whose state is the job's: a failed node group's Job, else (until every
        group's Job succeeded) one still running, else the rank-0 group's."""
        if not self.grouped:
            return self.job
        states = [(finished(self.kind, j)[0], j) for j in self.jobs.values()]
        failed = [j for state, j in states if state == "Failed"]
        running = [j for state, j in states if state is None]
        return (failed or running or [self.job])[0]

    def ranked_pods(self) -> list[tuple[int | None, dict[str, Any]]]:
        return ranked(self.kind, self.job, self.pods.values())

    def scheduler_message(self, pod: dict[str, Any]) -> str | None:
        """The scheduler's latest FailedScheduling event for the pod (fetched once per pod)."""
        name = pod["metadata"]["name"]
        if name not in self._scheduler_messages:
            self._scheduler_messages[name] = scheduler_event(self.cluster, self.namespace, name) or ""
        return self._scheduler_messages[name] or None


# ------------------------------------------------------------------------------ waiting


def wait(
    cluster: Cluster,
    kind: Kind,
    job: dict[str, Any],
    *,
    timeout: float | None,
    status: StatusLine,
    on_pods: Callable[[JobMonitor], None] | None = None,
) -> Outcome:
    """Follow the job until it finishes: status lines, stall reasons (once each), and `on_pods`
    (the log streamer) after every change. Raises WaitTimeout past `timeout`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    reported: set[tuple[str, str]] = set()
    name, ns = job["metadata"]["name"], job["metadata"].get("namespace") or cluster.namespace
    job_name = job_name_of(job)
    queue_watch = _Admissions(cluster, status) if kueue.QUEUE_LABEL in (job["metadata"].get("labels") or {}) else None
    refusals = _Refusals(cluster, kind, job_name, ns, status)
    with JobMonitor(cluster, kind, job) as mon:
        synced = mon.wait_synced(deadline)
        while True:
            if synced and mon.result:
                mon.refresh_pods()
            pods = mon.ranked_pods()
            if synced:
                status.show(status_line(kind, mon.job, pods, mon.result))
                if queue_watch and not mon.result:
                    queue_watch.check(mon.job)
                if not mon.result:
                    refusals.check(mon.job, pods)
                _say_waiting(mon, pods, reported, status)
                if on_pods:
                    on_pods(mon)
                unpullable = _unpullable(job_name, ns, pods)
                if unpullable is not None and not mon.result:
                    status.end()
                    raise unpullable
                if mon.result:
                    status.end()
                    return Outcome(mon.result, mon.decisive_job, pods)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                status.end()
                # the watches may not have caught up (or even synced) on a busy machine: the summary
                # is composed from one fresh list of the pods, not from what the watch delivered so far
                try:
                    mon.refresh_pods()
                    pods = mon.ranked_pods()
                except DdpctlError:
                    pass
                _say_waiting(mon, pods, reported, status)
                why = stall_summary(mon, pods)
                if queue_watch and queue_watch.holding:
                    why = f"Kueue: {queue_watch.last.message}" if queue_watch.last else why
                elif refusals.last:
                    why = refusals.last
                raise WaitTimeout(
                    f'timed out after {_fmt_seconds(timeout)} waiting for {kind.ref(name)} in namespace "{ns}"'
                    f" ({state_of(mon.result, pods)}{': ' + why if why else ''}); it keeps running: see "
                    f"`ddpctl status {job_name} -n {ns}`, or `ddpctl delete {job_name} -n {ns}`"
                )
            if (queue_watch and queue_watch.holding) or refusals.pods_missing:
                left = ADMISSION_POLL_SECONDS if left is None else min(left, ADMISSION_POLL_SECONDS)
            if not mon.next(left):
                continue
            synced = synced or len(mon.synced) == 2


class _Admissions:
    """Kueue's word on a queued job while `--wait` follows it: each new state or reason once."""

    def __init__(self, cluster: Cluster, status: StatusLine) -> None:
        self.cluster, self.status = cluster, status
        self.last: Admission | None = None

    @property
    def holding(self) -> bool:
        """Kueue has not admitted the job (yet): its Workload must be read again."""
        return self.last is None or self.last.state not in ("admitted", "finished", "not installed")

    def check(self, job: dict[str, Any]) -> None:
        try:
            now = admission(self.cluster, job)
        except DdpctlError:
            return  # a passing API error: the job's own watch goes on; read it again next time
        if now is None or (self.last and (now.state, now.message) == (self.last.state, self.last.message)):
            return
        self.last = now
        self.status.say(f"ddpctl: Kueue: {now.message}")


class _Refusals:
    """A controller's refusals to create the job's pods (its FailedCreate warnings: Pod Security,
    a quota, a webhook), each said once while pods are missing. Without them a refused job only
    looks Pending: the refusal is an Event on the workload, not on any pod."""

    def __init__(self, cluster: Cluster, kind: Kind, job_name: str, namespace: str, status: StatusLine) -> None:
        self.cluster, self.kind, self.job_name, self.namespace, self.status = cluster, kind, job_name, namespace, status
        self.seen: set[str] = set()
        self.last: str | None = None
        self.pods_missing = False
        self._next = 0.0

    def check(self, job: dict[str, Any], pods: list[tuple[int | None, dict[str, Any]]]) -> None:
        expected = workloads.expected_nodes(self.kind, job)
        self.pods_missing = expected is not None and len(pods) < expected and not workloads.suspended(self.kind, job)
        if not self.pods_missing or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + ADMISSION_POLL_SECONDS
        try:
            items = self.cluster.list(EVENT, self.namespace, field_selector="type=Warning").get("items") or []
        except DdpctlError:
            return
        for event in items:
            text = refusal(self.kind, self.job_name, event)
            key = re.sub(r'"[^"]*"', '""', text or "")  # one line per cause, not per pod name
            if text and key not in self.seen:
                self.seen.add(key)
                self.last = text
                self.status.say(f"ddpctl: {text}")


def refusal(kind: Kind, job_name: str, event: dict[str, Any]) -> str | None:
    """The one line for a FailedCreate warning on the job or one of its child objects, with the
    engine's hint when Pod Security refused a container its controller added (not ddpctl's)."""
    obj = event.get("involvedObject") or {}
    name = obj.get("name") or ""
    if not str(event.get("reason") or "").startswith("FailedCreate") or obj.get("kind") == "Pod":
        return None
    if name != job_name and not name.startswith(job_name + "-"):
        return None
    message = E.one_line(str(event.get("message") or "")).removeprefix("Error creating: ")
    text = f"{str(obj.get('kind') or 'object').lower()}/{name} cannot create pods: {message}"
    found = re.search(r'container "([^"]+)"', message) if "PodSecurity" in message else None
    hint = (
        kind.engine.added_container_hint(found.group(1))
        if found and found.group(1) != kind.engine.container_name
        else None
    )
    return f"{text}; {hint}" if hint else text


def _say_waiting(
    mon: JobMonitor, pods: list[tuple[int | None, dict[str, Any]]], reported: set[tuple[str, str]], status: StatusLine
) -> None:
    """Each pod's waiting problem (image pull, unschedulable, crash loop), once per pod and reason."""
    for rank, pod in pods:
        problem = pod_problem(mon.kind, pod)
        if not problem or problem[1]:
            continue
        key = (pod["metadata"]["name"], problem[0].split(":")[0])
        if key not in reported:
            reported.add(key)
            status.say(
                f"ddpctl: node {rank} (pod {pod['metadata']['name']}) is waiting: {_with_events(mon, pod, problem[0])}"
            )


def _with_events(mon: JobMonitor, pod: dict[str, Any], text: str) -> str:
    if text.startswith("Unschedulable"):
        msg = mon.scheduler_message(pod)
        if msg:
            return f"Unschedulable: {msg}"
    return text


def stall_summary(mon: JobMonitor, pods: list[tuple[int | None, dict[str, Any]]]) -> str:
    out = []
    for rank, pod in pods:
        problem = pod_problem(mon.kind, pod)
        if problem:
            out.append(f"node {rank} {_with_events(mon, pod, problem[0])}")
    if not pods:
        out.append("no pods yet")
    return "; ".join(out[:3]) + (f"; and {len(out) - 3} more" if len(out) > 3 else "")


def _fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{seconds:g}s" if seconds < 120 else f"{seconds / 60:g}m"


def _unpullable(job_name: str, namespace: str, pods: list[tuple[int | None, dict[str, Any]]]) -> RuntimeFailure | None:
    """An image that cannot be pulled, and will not be by waiting (not found, unauthorized, an
    unknown registry host, an invalid name): one error naming the pods, their node and the
    registry's answer, instead of waiting out --timeout. A pull that can still pass (a timeout, a
    registry's 5xx) keeps the wait going."""
    failing = [(rank, pod, why) for rank, pod in pods if (why := pull_failure(pod)) is not None]
    if not failing:
        return None
    names = ", ".join(f"node {rank} (pod {pod['metadata']['name']})" for rank, pod, _ in failing[:3])
    more = f" and {len(failing) - 3} more" if len(failing) > 3 else ""
    nodes = sorted({str((pod.get("spec") or {}).get("nodeName") or "?") for _, pod, _ in failing})
    return RuntimeFailure(
        f"{names}{more} cannot pull the image on {plural(len(nodes), 'node')} {', '.join(nodes)}: {failing[0][2]}; "
        f"the job waits for it in the cluster: fix the image (--image, or push it) and `ddpctl submit --replace`, "
        f"or `ddpctl delete {job_name} -n {namespace}`"
    )
