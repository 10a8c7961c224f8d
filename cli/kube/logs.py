"""Logs of every rank, prefixed `[rank N]`, read once or followed concurrently.

Following is driven by the pod watch (`watch.JobMonitor`): one thread per pod follows the current
container instance; when it ends and the kubelet restarts the container (restartCount + 1), the
thread follows the new instance; a replacement pod for the same rank gets its own thread.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable

from ddpctl.errors import DdpctlError
from ddpctl.kube import errors as E
from ddpctl.kube.config import Cluster, iter_lines
from ddpctl.kube.kinds import POD, Kind, container_name, rank_of


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
    want = container_name(kind)
    return want if want in names or not names else names[0]


def _cstatus(pod: dict[str, Any], container: str) -> dict[str, Any]:
    return next((s for s in (pod.get("status") or {}).get("containerStatuses") or [] if s.get("name") == container), {})


def _prefix(rank: int | None, enabled: bool) -> str:
    if not enabled:
        return ""
    return f"[rank {rank}] " if rank is not None else "[rank ?] "


def read_logs(cluster: Cluster, kind: Kind, job: dict[str, Any], pods: list[tuple[int | None, dict[str, Any]]], *,
              prefix: bool, out: Output, note: Callable[[str], None], tail: int | None = None, previous: bool = False,
              timestamps: bool = False) -> None:
    """`ddpctl logs NAME`: each rank's log in rank order."""
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
                note(f"ddpctl: rank {rank} (pod {name}): no logs: {exc.message.split(': ', 1)[-1]}")
                continue
            raise
        for line in (text or "").splitlines() if isinstance(text, str) else []:
            out.line(_prefix(rank, prefix) + line)


class Follower:
    """Concurrent follow of every rank's pod (or one rank), across restarts and replacements."""

    def __init__(self, cluster: Cluster, kind: Kind, *, out: Output, prefix: bool = True, rank: int | None = None,
                 timestamps: bool = False) -> None:
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
            self.pods = {n: p for n, p in monitor.pods.items()}
            for name, pod in self.pods.items():
                if name in self.threads:
                    continue
                rank = rank_of(self.kind, self.job, pod)
                if self.rank is not None and rank != self.rank:
                    continue
                t = threading.Thread(target=self._follow_pod, args=(name, rank), name=f"ddpctl-logs-{name}", daemon=True)
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

    def _follow_pod(self, name: str, rank: int | None) -> None:
        import urllib3

        followed = -1
        prefix = _prefix(rank, self.prefix)
        while True:
            with self.cond:
                while (ready := self._ready(name, followed)) is None:
                    self.cond.wait()
                what, restarts = ready
                if what == "end":
                    return
                pod = self.pods[name]
            ns = pod["metadata"].get("namespace")
            query: list[tuple[str, Any]] = [("container", _container(self.kind, pod)), ("follow", "true")]
            if self.timestamps:
                query.append(("timestamps", "true"))
            try:
                raw = self.cluster.stream(POD.path(ns, name, "log"), E.Op("logs", POD, name, ns), query, read_timeout=None)
            except E.ApiError as exc:
                if exc.code in (400, 404):  # not started after all, or gone: wait for the next change
                    followed = restarts - 1 if exc.code == 400 else restarts
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
            try:
                for line in iter_lines(raw):
                    self.out.line(prefix + line.decode("utf-8", "replace").rstrip("\r"))
            except (urllib3.exceptions.HTTPError, OSError, ValueError):
                pass  # stopped, or the connection dropped: the next change decides
            finally:
                with self.cond:
                    self.raws.pop(name, None)
                self.cluster.done_with(raw)
            followed = restarts

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
