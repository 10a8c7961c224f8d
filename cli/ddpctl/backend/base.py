"""The `Backend` interface and what every backend answers: `JobStatus`, `JobSummary`.

The shape follows TorchX's schedulers (dryrun, schedule, describe, log_iter, list, cancel) and the
Kubeflow SDK's runtime backends: one object per place a job can run, constructed with that place's
own options (a kubeconfig and namespace; a run directory; a container engine), and the same
methods on each. Nothing here imports kubernetes, torch or Docker.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import field
from enum import Enum
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ddpctl.backend.stragglers import straggler_data
from ddpctl.records import record
from ddpctl_trainer.protocol import Progress, preflight_line

if TYPE_CHECKING:
    from ddpctl.spec.sources import SpecInput

Say = Callable[[str], None]


class Where(str, Enum):
    """The backends, as `--on` names them."""

    cluster = "cluster"
    local = "local"
    docker = "docker"


@record
class NodeRow:
    """One node of a job (a pod, a container, a torchrun agent), as the status table shows it."""

    node: int | None  # the node rank (None: not known yet, e.g. a pod of an elastic job)
    name: str  # the pod, the container or the node's hostname
    phase: str
    restarts: int = 0
    reason: str = ""
    last: str = ""  # how its previous instance ended: `OOMKilled (exit code 137)`


@record
class JobStatus:
    """What `ddpctl status NAME` says of a job, the same for every backend.

    `head` and `lines` are the backend's own facts around the common ones (a cluster's namespace,
    target, admission and age; a local run's starts, checkpoint and logs); `data` is the
    machine-readable form (`-o json|yaml`), to which the backend and the progress are added."""

    name: str
    backend: Where
    where: str  # `namespace team, context kind-ddp at https://...` or `ddp-runs/NAME`
    state: str
    nodes: str  # `2  node: 1 Running, 1 Pending` or `2 nodes x 2 processes = world size 4`
    progress: Progress | None = None
    progress_age_s: float | None = None  # how long ago rank 0 printed `progress`
    head: Sequence[tuple[str, str]] = ()  # shown before the state (a namespace, a target)
    lines: Sequence[tuple[str, str]] = ()  # shown after the progress
    rows: Sequence[NodeRow] = ()
    preflight: Sequence[str] = ()  # rank 0's preflight report, its lines as printed (`protocol.preflight_line`)
    stragglers: Sequence[str] = ()  # rank 0's straggler lines as printed (`protocol.straggler_line`)
    name_column: str = "POD"  # what a row's name is: a pod, a container, a host
    no_rows: str = "No pods yet."  # what the table says when there are no rows
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def eta_s(self) -> float | None:
        """The time left now: rank 0's estimate less the time since it printed it."""
        if self.progress is None or self.progress.eta_s is None:
            return None
        return max(self.progress.eta_s - (self.progress_age_s or 0.0), 0.0)

    def as_dict(self) -> dict[str, Any]:
        """The machine-readable form: the backend's data, with `backend` and `progress` (null when
        rank 0 has printed none), and rank 0's preflight report and straggler lines when it printed any."""
        progress: dict[str, Any] | None = None
        if self.progress is not None:
            p = self.progress
            progress = {
                "epoch": p.epoch,
                "epochs": p.epochs,
                "step": p.step,
                "steps": p.steps,
                "percent": round(p.percent, 1),
                "loss": p.loss,
                "samplesPerSecond": p.samples_per_s,
                "etaSeconds": None if self.eta_s is None else round(self.eta_s),
                "ageSeconds": None if self.progress_age_s is None else round(self.progress_age_s),
            }
        out = {"name": self.name, "backend": self.backend.value, **self.data, "progress": progress}
        if self.preflight:
            out["preflight"] = preflight_data(self.preflight)
        if self.stragglers:
            out["stragglers"] = straggler_data(self.stragglers)
        return out


def preflight_data(lines: Sequence[str]) -> dict[str, Any]:
    """The preflight report's machine-readable form: its verdict, its findings, its lines."""
    parsed = [found for found in map(preflight_line, lines) if found is not None]
    verdict = next((body for kind, body in reversed(parsed) if kind == "verdict"), None)
    return {
        "verdict": verdict,
        "findings": [body for kind, body in parsed if kind == "finding"],
        "report": [body for kind, body in parsed if kind == "report"],
    }


@record
class JobSummary:
    """One line of `ddpctl list`: the columns every backend fills, and the record it came from."""

    name: str
    target: str
    nodes: str
    state: str
    age: str
    namespace: str = ""
    admission: str | None = None  # Kueue's word, when the job is queued
    recoveries: int | None = None  # nodes started again alone (pod recovery), where it is counted
    ref: str = ""  # `job.batch/NAME`, a run directory: what `-o name` and `-o wide` show
    image: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)  # the object or record, for -o json|yaml


@record
class Listing:
    """What `list` found, and the place it looked in words (`namespace "team"`, `./ddp-runs`)."""

    jobs: list[JobSummary]
    looked_in: str


@record
class LogOptions:
    """What `ddpctl logs` asks of a backend (kubectl's flags)."""

    follow: bool = False
    rank: int | None = None  # a node rank
    previous: bool = False
    tail: int | None = None
    timestamps: bool = False
    prefix: bool | None = None  # None: `[node N] ` unless one node is asked for

    @property
    def with_prefix(self) -> bool:
        return self.rank is None if self.prefix is None else self.prefix


class Request(Protocol):
    """What a backend's `prepare` makes: `show` prints it as `--dry-run` does."""

    def show(self, out: Say, say: Say) -> None: ...


RequestT = TypeVar("RequestT", bound=Request)


class Backend(ABC, Generic[RequestT]):
    """Where a job runs. Each backend is built with its own options; a method that cannot find
    the job raises `ddpctl.errors.NotFound`, and one that cannot reach its place `Unreachable`, so
    that a command may look elsewhere; any other error (a cluster that answered 401, 403 or 500)
    is the answer."""

    where: Where

    @abstractmethod
    def describe(self) -> str:
        """Where this backend looks, for messages: `the cluster (KUBECONFIG)`, `./ddp-runs`."""

    @abstractmethod
    def prepare(self, spec_input: SpecInput, say: Say, *, dry_run: bool = False) -> AbstractContextManager[RequestT]:
        """The first phase: what `start` will carry out (the objects, the processes, the
        containers), made and checked with nothing started; it holds what it needs (a packed
        workspace, a connection) while the context lasts. `dry_run`: only to be shown, so nothing
        is made for it that only a start needs (a run directory, a connection)."""

    @abstractmethod
    def start(self, request: RequestT, out: Say, say: Say) -> int:
        """The second phase: carry out a prepared request (and, as this backend's options say,
        wait for it); returns the exit code."""

    def dry_run(self, spec_input: SpecInput, out: Say, say: Say) -> None:
        """Print what `start` would do; start nothing."""
        with self.prepare(spec_input, say, dry_run=True) as request:
            request.show(out, say)

    def run(self, spec_input: SpecInput, out: Say, say: Say) -> int:
        """Both phases: prepare the job, then start it."""
        with self.prepare(spec_input, say) as request:
            return self.start(request, out, say)

    def has(self, name: str) -> bool:
        """Whether this backend may have the job, asked before it is shown in another's place (a
        local run when the cluster has none): True unless it knows cheaply that it has not."""
        return True

    @abstractmethod
    def status(self, name: str) -> JobStatus:
        """The job's state, nodes and rank 0's progress."""

    @abstractmethod
    def wait(self, name: str, timeout: float | None, say: Say) -> None:
        """Wait until the job ends: return when it succeeded, raise when it failed or at `timeout`."""

    @abstractmethod
    def logs(self, name: str, options: LogOptions, out: Say, say: Say) -> None:
        """Print every node's logs (or one node's), following them with `options.follow`."""

    @abstractmethod
    def list(self, all_namespaces: bool = False) -> Listing:
        """The jobs this backend knows, sorted by namespace and name."""

    @abstractmethod
    def delete(
        self, names: Sequence[str], *, ignore_not_found: bool, wait: bool, timeout: float | None, out: Say
    ) -> None:
        """Delete the jobs and what they made (stopping a running local job first)."""
