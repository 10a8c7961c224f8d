"""Logs of every node (pod), prefixed `[node N]`, read once or followed concurrently.

N is the node rank: the pod's index in the job (the trainer's own lines carry `[rank R]`, the global rank).

Following is driven by the pod watch (`watch.JobMonitor`): one thread per pod follows the current
container instance; when it ends and the kubelet restarts the container (restartCount + 1), the
thread follows the new instance; a replacement pod for the same rank gets its own thread. A stream
that ends while its container instance still runs (the apiserver, the kubelet or a proxy closed it)
is followed again from the timestamp of the last line printed, and the lines already printed are
skipped, so nothing is lost or repeated.
"""

from __future__ import annotations

import calendar
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ddpctl.cluster import errors as E
from ddpctl.cluster import workloads
from ddpctl.cluster.config import Cluster, iter_lines
from ddpctl.cluster.kinds import POD, Kind
from ddpctl.errors import ClusterError, DdpctlError
from ddpctl_trainer.protocol import (
    Progress,
    parse_progress,
    parse_rank_line,
    preflight_line,
    recovery_step,
    straggler_line,
)

PROGRESS_TAIL = 200  # lines of node 0's log searched for rank 0's progress (it reports every --log-every steps)
PREFLIGHT_HEAD = 1 << 20  # bytes of node 0's log searched for rank 0's preflight report (printed before step 1)
# Lines of node 0's log searched for rank 0's straggler lines, which come at any step: a bound, so
# status of a long run reads a few MB at most (20000 lines are ~2 MB, hours of progress lines at the
# trainer's defaults); a line older than that is not shown (the log itself keeps it).
STRAGGLER_TAIL = 20000
RECOVERY_TAIL = 20000  # lines of rank 0's log `status` reads for its pod-recovery lines


class Output:
    """Whole lines to stdout from several threads, never interleaved mid-line."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            out = self.stream or sys.stdout
            out.write(text + "\n")
            out.flush()


def _container(kind: Kind, pod: dict[str, Any]) -> str:
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    want = kind.engine.container_name
    return want if want in names or not names else names[0]


def _cstatus(pod: dict[str, Any], container: str) -> dict[str, Any]:
    return next((s for s in (pod.get("status") or {}).get("containerStatuses") or [] if s.get("name") == container), {})


def _prefix(rank: int | None, enabled: bool) -> str:
    if not enabled:
        return ""
    return f"[node {rank}] " if rank is not None else "[node ?] "


def read_logs(
    cluster: Cluster,
    kind: Kind,
    job: dict[str, Any],
    pods: list[tuple[int | None, dict[str, Any]]],
    *,
    prefix: bool,
    out: Output,
    note: Callable[[str], None],
    tail: int | None = None,
    previous: bool = False,
    timestamps: bool = False,
) -> None:
    """`ddpctl logs NAME`: each node's log in node order."""
    unserved: list[tuple[int | None, str, str]] = []
    for rank, pod in pods:
        name, ns = pod["metadata"]["name"], pod["metadata"].get("namespace")
        container = _container(kind, pod)
        query: list[tuple[str, Any]] = [("container", container)]
        if tail is not None:
            query.append(("tailLines", str(tail)))
        if previous:
            query.append(("previous", "true"))
        if timestamps:
            query.append(("timestamps", "true"))
        try:
            _, text = cluster.call("GET", POD.path(ns, name, "log"), E.Op("logs", POD, name, ns), query=query)
        except E.ApiError as exc:
            if exc.code == 400:  # waiting to start / no previous instance: say so, go on
                note(f"ddpctl: node {rank} (pod {name}): no logs: {exc.message.split(': ', 1)[-1]}")
                continue
            if exc.code == 404:  # deleted since it was listed (a controller cleaning up a finished job)
                note(f"ddpctl: node {rank} (pod {name}): no logs: the pod was deleted")
                continue
            if exc.code in (500, 502, 503) and _kubelet_unreachable(exc.message):
                unserved.append((rank, name, (pod.get("spec") or {}).get("nodeName") or "?"))
                continue
            raise
        for line in (text or "").splitlines() if isinstance(text, str) else []:
            out.line(_prefix(rank, prefix) + line)

    if unserved and len(unserved) == len(pods):  # one line for the whole job, not one per pod
        raise ClusterError(
            f"no logs: the kubelets of nodes {', '.join(sorted({n for _, _, n in unserved}))} served none; a "
            "simulated node (kwok) keeps none, a real one may be unreachable from the API server "
            "(`kubectl get nodes -o wide`)"
        )
    for node_rank, pod_name, node in unserved:
        note(f"ddpctl: node {node_rank} (pod {pod_name}): no logs: the kubelet of node {node} did not serve them")


def _kubelet_unreachable(message: str) -> bool:
    """The API server's answer when it cannot reach the pod's kubelet (or the node has no address)."""
    return any(text in message for text in ("no preferred addresses", "dial tcp", "connection refused", "kubelet"))


RESUME_SECONDS = 1.0  # a stream that ended while its container still runs is followed again after this

_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def stamp_ns(stamp: str) -> int | None:
    """An RFC3339(Nano) log timestamp as nanoseconds since the epoch; None when it is not one."""
    m = _STAMP.match(stamp)
    if not m:
        return None
    try:
        seconds = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    zone = m.group(3)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds * 1_000_000_000 + int((m.group(2) or "0").ljust(9, "0"))


class _Printed:
    """Which lines of one container instance were printed, by timestamp, so that a stream followed
    again from `sinceTime` (whole seconds at the kubelet: lines already printed come again) skips them."""

    def __init__(self) -> None:
        self.stamp: str | None = None  # the last printed line's timestamp, as the server wrote it
        self.ns = -1
        self.same = 0  # lines printed with exactly that timestamp
        self.replayed = 0  # of those, how many the current stream has sent again

    def new_stream(self) -> None:
        self.replayed = 0

    def take(self, stamp: str, ns: int | None) -> bool:
        """True when the line stamped `stamp` (`ns` nanoseconds; None: no stamp) is new and is to be printed."""
        if ns is None:
            return True
        if ns < self.ns:
            return False
        if ns == self.ns:
            self.replayed += 1
            if self.replayed <= self.same:
                return False
            self.same += 1
            return True
        self.stamp, self.ns, self.same, self.replayed = stamp, ns, 1, 1
        return True


class Follower:
    """Concurrent follow of every node's pod (or one node), across restarts and replacements."""

    def __init__(
        self,
        cluster: Cluster,
        kind: Kind,
        *,
        out: Output,
        prefix: bool = True,
        rank: int | None = None,
        timestamps: bool = False,
    ) -> None:
        self.cluster, self.kind, self.out = cluster, kind, out
        self.prefix, self.rank, self.timestamps = prefix, rank, timestamps
        self.cond = threading.Condition()
        self.pods: dict[str, dict[str, Any]] = {}
        self.job: dict[str, Any] | None = None
        self.threads: dict[str, threading.Thread] = {}
        self.raws: dict[str, Any] = {}
        self.stopped = False
        self.errors: list[DdpctlError] = []

    # called from the monitor loop after each change
    def observe(self, monitor: Any) -> None:
        with self.cond:
            self.job = monitor.job
            self.pods = dict(monitor.pods.items())
            for name, pod in self.pods.items():
                if name in self.threads:
                    continue
                rank = workloads.rank_of(self.kind, self.job, pod)
                if self.rank is not None and rank != self.rank:
                    continue
                t = threading.Thread(
                    target=self._follow_pod, args=(name, rank), name=f"ddpctl-logs-{name}", daemon=True
                )
                self.threads[name] = t
                t.start()
            self.cond.notify_all()

    def _ready(self, name: str, after: int) -> tuple[str, int] | None:
        """('follow', restartCount) when an instance newer than `after` runs or ran; ('end', _) when the
        pod is gone or finished; None to keep waiting. Called with the condition held."""
        pod = self.pods.get(name)
        if pod is None or self.stopped:
            return "end", after
        container = _container(self.kind, pod)
        cs = _cstatus(pod, container)
        state = cs.get("state") or {}
        restarts = int(cs.get("restartCount") or 0)
        if ("running" in state or "terminated" in state) and restarts > after:
            return "follow", restarts
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") and restarts <= after:
            return "end", after
        return None

    def _still_running(self, name: str, restarts: int) -> bool:
        """The instance `restarts` of the pod's container runs, as far as the watch knows. Called with the
        condition held."""
        pod = self.pods.get(name)
        if pod is None or self.stopped or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return False
        cs = _cstatus(pod, _container(self.kind, pod))
        return "running" in (cs.get("state") or {}) and int(cs.get("restartCount") or 0) == restarts

    def _follow_pod(self, name: str, rank: int | None) -> None:
        import urllib3

        followed = -1
        prefix = _prefix(rank, self.prefix)
        printed = _Printed()
        resume = False  # follow the same instance again: its stream ended while it kept running
        while True:
            with self.cond:
                if resume:
                    restarts = followed
                else:
                    while (ready := self._ready(name, followed)) is None:
                        self.cond.wait()
                    what, restarts = ready
                    if what == "end":
                        return
                    printed = _Printed()  # a new instance
                pod = self.pods.get(name)
                if pod is None or self.stopped:
                    return
            ns = pod["metadata"].get("namespace")
            # always with timestamps: they tell where to pick up after a dropped stream
            query: list[tuple[str, Any]] = [
                ("container", _container(self.kind, pod)),
                ("follow", "true"),
                ("timestamps", "true"),
            ]
            if resume and printed.stamp:
                query.append(("sinceTime", printed.stamp))
            try:
                raw = self.cluster.stream(
                    POD.path(ns, name, "log"), E.Op("logs", POD, name, ns), query, read_timeout=None
                )
            except E.ApiError as exc:
                if exc.code in (400, 404):  # not started after all, or gone: wait for the next change
                    followed = restarts if resume or exc.code == 404 else restarts - 1
                    resume = False
                    with self.cond:
                        if not self.stopped:
                            self.cond.wait()
                    if exc.code == 404:
                        return
                    continue
                self.errors.append(exc)
                return
            except DdpctlError as exc:
                self.errors.append(exc)
                return
            with self.cond:
                self.raws[name] = raw
            printed.new_stream()
            try:
                for line in iter_lines(raw):
                    text = line.decode("utf-8", "replace").rstrip("\r")
                    stamp, _, rest = text.partition(" ")
                    ns = stamp_ns(stamp)
                    if ns is None:  # not stamped after all: print it whole
                        stamp, rest = "", text
                    if not printed.take(stamp, ns):
                        continue
                    self.out.line(prefix + (text if self.timestamps else rest))
            except (urllib3.exceptions.HTTPError, OSError, ValueError):
                pass  # stopped, or the connection dropped: decided below
            finally:
                with self.cond:
                    self.raws.pop(name, None)
                self.cluster.done_with(raw)
            followed = restarts
            # The stream ended: the instance finished, or the connection was closed under it. Give the
            # watch a moment to tell; an instance still running then is followed again.
            with self.cond:
                deadline = time.monotonic() + RESUME_SECONDS
                while self._still_running(name, restarts) and (left := deadline - time.monotonic()) > 0:
                    self.cond.wait(left)
                resume = self._still_running(name, restarts)

    def drain(self, timeout: float) -> None:
        """After the job finished: let the streams end by themselves (bounded), then stop."""
        deadline = time.monotonic() + timeout
        for t in list(self.threads.values()):
            t.join(max(0.0, deadline - time.monotonic()))
        self.stop()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            raws = list(self.raws.values())
            self.cond.notify_all()
        for raw in raws:
            self.cluster.done_with(raw)
        for t in list(self.threads.values()):
            t.join(1.0)


def _rank0_lines(
    cluster: Cluster, kind: Kind, pods: list[tuple[int | None, dict[str, Any]]], query: list[tuple[str, str]]
) -> list[str]:
    """Rank 0's lines of node 0's pod's log (`query`: how much of it); empty when there is no such
    pod or its log cannot be read (status shows the rest)."""
    pod = next((p for rank, p in pods if rank == 0), None)
    if pod is None:
        return []
    name, ns = pod["metadata"]["name"], pod["metadata"].get("namespace")
    try:
        _, text = cluster.call(
            "GET",
            POD.path(ns, name, "log"),
            E.Op("logs", POD, name, ns),
            query=[("container", _container(kind, pod)), *query],
        )
    except DdpctlError:
        return []
    lines = text.splitlines() if isinstance(text, str) else []
    return [line for line in lines if (parse_rank_line(line) or (None, ""))[0] == 0]


def rank0_preflight(cluster: Cluster, kind: Kind, pods: list[tuple[int | None, dict[str, Any]]]) -> list[str]:
    """Rank 0's preflight report, read from the head of node 0's pod's log (the trainer prints it
    right after the rendezvous, before its first step: the first PREFLIGHT_HEAD bytes hold it)."""
    lines = _rank0_lines(cluster, kind, pods, [("limitBytes", str(PREFLIGHT_HEAD))])
    return [line for line in lines if preflight_line(line)]


def rank0_stragglers(cluster: Cluster, kind: Kind, pods: list[tuple[int | None, dict[str, Any]]]) -> list[str]:
    """Rank 0's straggler lines (a node named, a node recovered), read from the last STRAGGLER_TAIL
    lines of node 0's pod's log."""
    lines = _rank0_lines(cluster, kind, pods, [("tailLines", str(STRAGGLER_TAIL))])
    return [line for line in lines if straggler_line(line)]


def rank0_recoveries(cluster: Cluster, kind: Kind, pods: list[tuple[int | None, dict[str, Any]]]) -> list[str]:
    """Rank 0's pod-recovery lines (the group formed again, at which step, after how long), oldest
    first, from the last RECOVERY_TAIL lines of node 0's current pod's log."""
    lines = _rank0_lines(cluster, kind, pods, [("tailLines", str(RECOVERY_TAIL))])
    return [line for line in lines if recovery_step(line) is not None]


def rank0_progress(
    cluster: Cluster, kind: Kind, pods: list[tuple[int | None, dict[str, Any]]], now: float | None = None
) -> tuple[Progress, float] | None:
    """Rank 0's newest progress line and how many seconds ago it was printed, read from the tail of
    node 0's pod's log (the trainer's `[rank 0] epoch E/N step S/M ...`, `protocol.parse_progress`);
    None when that pod has printed none, or its log cannot be read (status shows the rest)."""
    pod = next((p for rank, p in pods if rank == 0), None)
    if pod is None:
        return None
    name, ns = pod["metadata"]["name"], pod["metadata"].get("namespace")
    query = [("container", _container(kind, pod)), ("tailLines", str(PROGRESS_TAIL)), ("timestamps", "true")]
    try:
        _, text = cluster.call("GET", POD.path(ns, name, "log"), E.Op("logs", POD, name, ns), query=query)
    except DdpctlError:
        return None
    for line in reversed(text.splitlines() if isinstance(text, str) else []):
        stamp, _, rest = line.partition(" ")
        found = parse_progress(rest)
        if found is not None:
            at = stamp_ns(stamp)
            age = max((now if now is not None else time.time()) - at / 1e9, 0.0) if at is not None else 0.0
            return found, age
    return None
