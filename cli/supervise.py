"""Supervising a job's children (torchrun agents, or `docker run` clients) and reading their output.

`supervise` starts the children, streams their lines, stops the rest when the first one fails (as a
Job with backoffLimit 0 would) or on --timeout, and leaves no process behind. `JobState` is what
the output tells about the job (its phase, progress, torchrun's failure reports); `describe_failure`
names the rank that failed first; `finish_note` is a successful run's last line. Nothing here
imports torch.
"""

from __future__ import annotations

import errno
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl.console import Console, relative_path
from ddpctl.errors import RuntimeFailure, UsageError

if TYPE_CHECKING:
    from ddpctl.procs import Child

_PROGRESS = re.compile(r"epoch (\d+)/(\d+) step (\d+)/(\d+)")
_FAIL_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_FAIL_CODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_PEER_FAILURE = "a collective failed"

# How long the other nodes may go on reporting their own errors after the first node failed,
# before they are stopped (as the Job controller would delete their pods).
PEER_GRACE_S = 5.0
STOP_GRACE_S = 10.0


class JobFailed(RuntimeFailure):
    """The job ran and failed: the exit code is the failing node's."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code if exit_code > 0 else 1


@dataclass
class Failure:
    node: int
    rank: int | None
    local_rank: int | None
    code: int


@dataclass
class JobState:
    """What the output tells about the job; drives the status line and the final message."""

    name: str
    nodes: int
    world: int
    started: float = field(default_factory=time.monotonic)
    phase: str = "starting"
    ranks_seen: set[int] = field(default_factory=set)
    progress: tuple[int, int, int, int] | None = None
    nodes_done: int = 0
    failures: list[Failure] = field(default_factory=list)
    peer_failed_ranks: set[int] = field(default_factory=set)
    in_traceback: set[int] = field(default_factory=set)
    _pending: dict[int, tuple[int, int]] = field(default_factory=dict)

    def on_rank_line(self, rank: int, text: str) -> None:
        self.ranks_seen.add(rank)
        if self.phase == "starting":
            self.phase = "training"
        match = _PROGRESS.search(text)
        if match and rank == 0:
            epoch, epochs, step, steps = (int(g) for g in match.groups())
            self.progress = (epoch, epochs, step, steps)
        if _PEER_FAILURE in text:
            self.peer_failed_ranks.add(rank)

    def on_node_line(self, node: int, text: str) -> None:
        """torchrun's failure report: `rank : 3 (local_rank: 1)` then `exitcode : -9 (pid: ...)`."""
        match = _FAIL_RANK.match(text)
        if match:
            self._pending[node] = (int(match.group(1)), int(match.group(2)))
            return
        match = _FAIL_CODE.match(text)
        if match and node in self._pending:
            rank, local = self._pending.pop(node)
            if not any(f.rank == rank for f in self.failures):
                self.failures.append(Failure(node, rank, local, int(match.group(1))))

    def status(self) -> str:
        elapsed = time.monotonic() - self.started
        parts = [
            f"{self.name}: {self.phase}",
            f"{elapsed:.0f}s",
            f"nodes {self.nodes}",
            f"ranks seen {len(self.ranks_seen)}/{self.world}",
        ]
        if self.progress:
            e, ne, s, ns = self.progress
            parts.append(f"epoch {e}/{ne} step {s}/{ns}")
        return " | ".join(parts)


def _signal_name(code: int) -> str:
    import signal

    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def describe_failure(state: JobState, node: int, node_code: int, nproc: int) -> str:
    """One line naming the rank that failed first (not the ranks that stopped because of it).

    torchrun's failure report names ranks; a node that died as a whole (a killed agent or
    container) reports nothing, so then the node and the ranks it ran are named."""

    def secondary(f: Failure) -> bool:
        return f.rank in state.peer_failed_ranks or f.code in (-15, 143)

    primary = next((f for f in state.failures if f.code < 0 and not secondary(f)), None)
    primary = primary or next((f for f in state.failures if not secondary(f)), None)
    if primary is None and not any(f.node == node for f in state.failures):
        first, last = node * nproc, node * nproc + nproc - 1
        ranks = f"rank {first}" if first == last else f"ranks {first}-{last}"
        if node_code > 128:
            how = f"was killed by {_signal_name(128 - node_code)}"
        elif node_code < 0:
            how = f"was killed by {_signal_name(node_code)}"
        else:
            how = f"exited with code {node_code}"
        return f"job {state.name} failed: node {node} ({ranks}) {how}"
    primary = primary or (state.failures[0] if state.failures else None)
    if primary is None or primary.rank is None:
        return f"job {state.name} failed: node {node} exited with code {node_code}"
    how = f"was killed by {_signal_name(primary.code)}" if primary.code < 0 else f"exited with code {primary.code}"
    others = sorted({f.rank for f in state.failures if f.rank is not None and f.rank != primary.rank})
    tail = f"; ranks {', '.join(map(str, others))} stopped after it" if others else ""
    return (
        f"job {state.name} failed: rank {primary.rank} (node {primary.node}, local rank {primary.local_rank}) "
        f"{how}{tail}"
    )


def start_failure(argv: Sequence[str], exc: OSError, *, user_command: bool, what: str) -> RuntimeFailure | UsageError:
    """One line for a process that could not be started: the user's --command naming a missing or
    non-executable program is their input (exit 2); anything else is a runtime failure."""
    from ddpctl.errors import printable

    program = printable(str(argv[0])) if argv else "?"
    reason = printable(exc.strerror or str(exc))
    if user_command and (
        isinstance(exc, (FileNotFoundError, PermissionError, NotADirectoryError)) or exc.errno == errno.ENOEXEC
    ):
        found = "was not found" if isinstance(exc, (FileNotFoundError, NotADirectoryError)) else "is not executable"
        return UsageError(f"command: {program} {found} ({reason}); give an executable on PATH or its path in --command")
    return RuntimeFailure(f"could not start {what} ({program}): {reason}")


def supervise(
    start: Callable[[], Iterable[Child]],
    state: JobState,
    console: Console,
    *,
    show: Callable[[Child, str], None],
    stop: Callable[[list[Child]], None],
    timeout: float | None,
) -> tuple[Child | None, bool]:
    """Start the children, stream their lines, stop the rest when one fails (after a grace for
    their own reports) or on --timeout, and wait for all. Returns (first failed child, timed out).
    `start` yields each child as soon as it runs, so one that fails to start (or a Ctrl-C while
    starting) leaves none of the earlier ones untracked. On Ctrl-C/SIGTERM every child is stopped
    before KeyboardInterrupt goes on. Whatever happens, no child process (nor a child's child) is
    left running."""
    from ddpctl import procs

    children: list[Child] = []
    reaper = procs.set_child_subreaper(True)
    failed: Child | None = None
    stop_at: float | None = None
    deadline = time.monotonic() + timeout if timeout else None
    timed_out = False
    try:
        with procs.interrupt_on_signals():
            for child in start():
                children.append(child)
            mux = procs.LineMux(children)
            console.status(state)
            while mux.open or any(c.poll() is None for c in children):
                item = mux.get(timeout=0.5)
                if item is not None and item[1] is not None:
                    show(item[0], item[1])
                procs.remember_trees(children)  # at most once a second: it reads all of /proc
                for child in children:
                    code = child.poll()
                    if code is not None and code != 0 and failed is None and not child.stopping:
                        failed = child
                        state.phase = "failing"
                        stop_at = time.monotonic() + PEER_GRACE_S
                now = time.monotonic()
                if stop_at is not None and now >= stop_at:
                    stop_at = None
                    _announce_stop(children, console)
                    stop(children)
                if deadline is not None and now >= deadline and not timed_out:
                    timed_out = True
                    state.phase = "timed out"
                    _announce_stop(children, console)
                    stop(children)
                if all(c.poll() is not None for c in children) and state.phase in ("starting", "training"):
                    state.phase = "finishing"
                console.status(state)
            mux.join(timeout=5)
    except KeyboardInterrupt:
        console.done()
        console.note(f"stopping {state.name}: interrupted")
        for child in children:
            child.stopping = True
        stop(children)
        raise
    finally:
        procs.kill_leftovers(children)
        if reaper:
            procs.set_child_subreaper(False)
        console.done()
    if failed is None:
        failed = next((c for c in children if c.returncode and not c.stopping), None)
    return failed, timed_out


def _announce_stop(children: Sequence[Child], console: Console) -> None:
    running = [c for c in children if c.poll() is None]
    if running:
        console.note(f"stopping {', '.join(c.label for c in running)}")
    for child in running:
        child.stopping = True


def _latest_checkpoint(directory: Path | None) -> Path | None:
    if directory is None or not directory.is_dir():
        return None
    found = sorted(p for p in directory.glob("ckpt-*") if not p.name.startswith("."))
    return found[-1] if found else None


def finish_note(console: Console, state: JobState, checkpoint_dir: Path | None, cwd: Path) -> None:
    elapsed = time.monotonic() - state.started
    latest = _latest_checkpoint(checkpoint_dir)
    where = (
        f"; checkpoint {relative_path(latest, cwd)}"
        if latest
        else (f"; checkpoints in {relative_path(checkpoint_dir, cwd)}" if checkpoint_dir else "")
    )
    console.note(f"{state.name} succeeded in {elapsed:.1f}s{where}")
