"""Scenario hooks on the kube-apiserver double, for driving ddpctl's cluster commands end to end.

`ScriptedDouble` is the double with three seams the CLI tests synchronise on (no sleeps):

* ``after_create(kind, fn)``: ``fn(double, obj)`` runs right after the engine controller made the
  pods of a new workload, inside the create request, so the CLI's next read sees what ``fn`` did
  (e.g. pods started and failed, a pod unschedulable);
* ``wait_follows(pod, n)``: returns once the ``n``-th ``follow=true`` log stream of ``pod`` has been
  attached to the container instance that was current then (its backlog, possibly empty, sent): lines
  appended from then on reach that stream;
* ``drop_log_streams(pod)``: ends the open follow streams of ``pod``'s current container instance,
  which keeps running (the CLI must follow it again without losing or repeating lines);
* ``wait_watches(resource, n)``: returns once ``n`` watch requests for ``resource`` have arrived
  (a watch from a resourceVersion replays everything after it, so what happens next is seen).

Timeouts on these waits are bounds that turn a hang into a failure, never a synchronisation device.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .server import KubeApiDouble

BOUND = 20.0  # seconds: the most a test waits for the CLI to reach a point


class ScriptedDouble(KubeApiDouble):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._hooks: dict[str, list[Callable[[Any, dict], None]]] = {}
        self._seen = threading.Condition()
        self.follows: Counter = Counter()
        self.watches: Counter = Counter()

    # -------------------------------------------------------------- after_create

    def after_create(self, kind: str, fn: Callable[[ScriptedDouble, dict], None]) -> None:
        self._hooks.setdefault(self.rt(kind).kind, []).append(fn)

    def on_created(self, rt, obj):  # type: ignore[override]
        super().on_created(rt, obj)
        for fn in self._hooks.get(rt.kind, []):
            fn(self, obj)

    # -------------------------------------------------------------- streams the CLI opened

    def _chunk(self, h, data: bytes) -> None:  # type: ignore[override]
        KubeApiDouble._chunk(h, data)  # a follow stream's first call, with its backlog, comes even when that is empty
        url = urlsplit(h.path)
        query = parse_qs(url.query)
        if url.path.endswith("/log") and query.get("follow", [""])[-1] in ("true", "1", "True"):
            key = ("log", url.path)
            if key not in getattr(h, "_ddpctl_seen", set()):
                h._ddpctl_seen = getattr(h, "_ddpctl_seen", set()) | {key}
                pod = url.path.rsplit("/", 2)[-2]
                with self._seen:
                    self.follows[pod] += 1
                    self._seen.notify_all()

    def _watch(self, h, rec, route):  # type: ignore[override]
        with self._seen:
            self.watches[route.plural] += 1
            self._seen.notify_all()
        return super()._watch(h, rec, route)

    def drop_log_streams(self, pod: str, namespace: str = "default", container: str | None = None) -> None:
        with self.store.cond:
            c = self._cname(self._pod(pod, namespace), container)
            self.logbook.current(namespace, pod, c).drops += 1
            self.store.cond.notify_all()

    def wait_follows(self, pod: str, n: int = 1, timeout: float = BOUND) -> None:
        with self._seen:
            if not self._seen.wait_for(lambda: self.follows[pod] >= n, timeout):
                raise AssertionError(f"the CLI did not follow the logs of {pod} {n} time(s) (got {self.follows[pod]})")

    def wait_watches(self, plural: str, n: int = 1, timeout: float = BOUND) -> None:
        with self._seen:
            if not self._seen.wait_for(lambda: self.watches[plural] >= n, timeout):
                raise AssertionError(f"the CLI did not watch {plural} {n} time(s) (got {self.watches[plural]})")


def install_runtime(double: KubeApiDouble) -> None:
    """The torch-distributed ClusterTrainingRuntime (Kubeflow Trainer v2 installs it)."""
    import yaml

    from .validation import default_crd_dir

    path = default_crd_dir().parent / "torch_distributed_runtime.yaml"  # vendored: a missing file is an error
    obj = yaml.safe_load(path.read_text())
    double.store.put(double.rt("ClusterTrainingRuntime"), obj)


class Scenario:
    """A test thread that runs `steps` while the CLI runs in the test's thread; re-raises failures."""

    def __init__(self, steps: Callable[[], None]) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(steps,), daemon=True)

    def _run(self, steps: Callable[[], None]) -> None:
        try:
            steps()
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc

    def __enter__(self) -> Scenario:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.thread.join(BOUND)
        if self.error is not None and exc[0] is None:
            raise self.error


__all__ = ["BOUND", "Scenario", "ScriptedDouble", "install_runtime"]
