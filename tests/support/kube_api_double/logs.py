"""Container log buffers: one buffer per container *instance*, so a restart keeps the
previous instance's lines for ``previous=true`` (as the kubelet keeps the last one)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field


@dataclass
class Instance:
    lines: list[tuple[dt.datetime, str]] = field(default_factory=list)
    terminated: bool = False
    drops: int = 0  # bumped to end the follow streams open on this instance while it keeps running


def since_time(text: str | None) -> dt.datetime | None:
    """``sinceTime`` as the kubelet sees it: kube-apiserver re-encodes the query's metav1.Time for the
    kubelet with RFC3339 (whole seconds), so the fraction is dropped and lines from that second on come."""
    if not text:
        return None
    t = dt.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")
    return t.replace(tzinfo=dt.UTC)


class LogBook:
    """Guarded by the store's lock; writers notify the store's condition."""

    def __init__(self) -> None:
        self._by_container: dict[tuple[str, str, str], list[Instance]] = {}

    def instances(self, ns: str, pod: str, container: str) -> list[Instance]:
        return self._by_container.setdefault((ns, pod, container), [])

    def current(self, ns: str, pod: str, container: str, create: bool = True) -> Instance | None:
        inst = self.instances(ns, pod, container)
        if not inst and create:
            inst.append(Instance())
        return inst[-1] if inst else None

    def previous(self, ns: str, pod: str, container: str) -> Instance | None:
        inst = self.instances(ns, pod, container)
        return inst[-2] if len(inst) >= 2 else None

    def new_instance(self, ns: str, pod: str, container: str) -> Instance:
        inst = self.instances(ns, pod, container)
        if inst:
            inst[-1].terminated = True
        inst.append(Instance())
        # the kubelet keeps only the current and the previous instance
        del inst[:-2]
        return inst[-1]

    def drop_pod(self, ns: str, pod: str) -> None:
        for key in [k for k in self._by_container if k[:2] == (ns, pod)]:
            for i in self._by_container[key]:
                i.terminated = True
            del self._by_container[key]


def format_line(ts: dt.datetime, text: str, timestamps: bool) -> bytes:
    if timestamps:
        stamp = ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond:06d}000Z"
        return f"{stamp} {text}\n".encode()
    return f"{text}\n".encode()
