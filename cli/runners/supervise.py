"""Supervising a job's children (torchrun agents, or `docker run` clients) and reading their output.

`supervise` starts the children, streams their lines, stops the rest when the first one fails (as a
Job with backoffLimit 0 would) or on --timeout, and leaves no process behind. `run_with_restarts`
starts the whole group again after a failed node, as the target's rules say (`ddpctl.runners.restarts`),
for `run --local` and `run --docker` alike. `JobState` is what the output tells about the job (its
phase, progress, torchrun's failure reports, a preempted node); `describe_failure` names the rank
that failed first; `finish_note` is a successful run's last line. Nothing here imports torch.
"""

from __future__ import annotations

import errno
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl.console import Console, plural, relative_path
from ddpctl.errors import RuntimeFailure, UsageError
from ddpctl.runners.restarts import latest_step, restart_limit, retriable, what_happened
from ddpctl.runners.stall import stall_reason
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.plan import Plan
    from ddpctl.runners.procs import Child

_PROGRESS = re.compile(r"epoch (\d+)/(\d+) step (\d+)/(\d+)(?: loss (\S+))?")
_FAIL_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
_FAIL_CODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_FAIL_TIME = re.compile(r"^\s*time\s*:\s*(\S+)")
_ROOT_CAUSE = "Root Cause (first observed failure)"
_AGENT_FAILED = re.compile(r"\] failed \(exitcode: -?\d+\) local_rank: \d+")
_BLOCK_EDGE = re.compile(r"^=+$")
_PEER_FAILURE = "a collective failed"
# The trainer's line on a rerun of a finished job (ddpctl_trainer.trainer, which imports torch).
ALREADY_COMPLETE = re.compile(re.escape(protocol.ALREADY_COMPLETE) + r" at step (\d+) .*checkpoint (\S+?);")
# A rank's error: an exception line (torch may prefix `[rankN]: `), the trainer's one-line error,
# or a C++ runtime's last words.
_ERROR_LINE = re.compile(
    rf"^(?:\[rank\d+\]: )?(?:[\w.]*(?:Error|Exception|Interrupt)\b|{re.escape(protocol.ERROR_TAG)}|terminate called)"
)
# What a C++ runtime prints before SIGABRT when a process exits with threads still running; with
# torch.distributed, a script that ends without destroy_process_group() (gloo's threads).
_UNJOINED_THREAD = "terminate called without an active exception"
# torchrun's banner when it sets OMP_NUM_THREADS=1 for its workers: printed by every agent.
_TORCH_LOG_PREFIX = re.compile(r"^[DIWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\] ")
_OMP_BANNER = ("*****************************************", "Setting OMP_NUM_THREADS environment variable")
# What ddpctl_trainer.launch prints when its agent was sent SIGTERM (the node was preempted: a
# kubelet, `docker stop` or a user's kill sent it to the agent, the container's PID 1).
PREEMPTED_AGENT = f"{protocol.LAUNCHER_STOPPED_BY}SIGTERM"
# What the store host's agent says when its rendezvous port was taken before it could bind it
# (torch's DistNetworkError names the errno): the runner's own problem, not the job's.
_PORT_TAKEN = re.compile(r"EADDRINUSE|address already in use", re.IGNORECASE)
# A rank's error that says only that its peer went away: the connection to it broke (gloo, c10d).
_LOST_PEER_ERROR = re.compile(
    r"connection reset by peer|connection closed by peer|broken pipe|got 0 bytes", re.IGNORECASE
)
# Deaths at interpreter exit after the work was done: gloo's teardown can abort (pytorch/pytorch#179291).
_TEARDOWN_SIGNALS = (-6, -11)  # SIGABRT, SIGSEGV
# Starts of the group that do not count against the restart limit (preemptions, lost nodes, a
# port taken before it was bound) are still capped, so that a machine that keeps killing the job
# does not restart it forever.
MAX_FREE_STARTS = 10

# How long the other nodes may go on reporting their own errors after the first node failed,
# before they are stopped (as the Job controller would delete their pods).
PEER_GRACE_S = 5.0
STOP_GRACE_S = 10.0


class JobFailed(RuntimeFailure):
    """The job ran and failed: the exit code is the failing node's."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code if exit_code > 0 else 1


def layout_phrase(plan: Plan, unit: str) -> str:
    """`2 nodes x 2 processes`, `1 node x 1 process`, `1:4 nodes x 2 processes` (elastic); with node
    groups `1 node x 2 processes + 1 node x 1 process`."""
    if plan.spec.node_groups:
        return " + ".join(
            f"{plural(g.nodes, unit)} x {plural(g.nproc, 'process', 'processes')}" for g in plan.spec.groups
        )
    nodes = f"{plan.nnodes} {unit if plan.nnodes == '1' else unit + 's'}"
    return f"{nodes} x {plural(plan.nproc_per_node, 'process', 'processes')}"


@dataclass
class Failure:
    node: int
    rank: int | None
    local_rank: int | None
    code: int
    time: str = ""  # torchrun's time of the failure (to the second)
    root_cause: bool = False  # torchrun's first observed failure on its node


@dataclass
class JobState:
    """What the output tells about the job; drives the status line and the final message."""

    name: str
    nodes: int
    world: int
    started: float = field(default_factory=time.monotonic)
    attempt: int = 0  # 0 for the first start, N for the Nth restart of the whole group
    phase: str = "starting"
    nodes_running: int = 0
    ranks_spoke: bool = False  # some rank printed a line (a container that never started prints none)
    progress: tuple[int, int, int, int] | None = None
    loss: str | None = None
    already_complete: tuple[int, str] | None = None  # (step, checkpoint) of a rerun of a finished job
    failures: list[Failure] = field(default_factory=list)
    peer_failed_ranks: set[int] = field(default_factory=set)
    last_error: dict[int, str] = field(default_factory=dict)
    agent_errors: dict[int, str] = field(default_factory=dict)  # node -> the agent's own exception
    in_traceback: set[int] = field(default_factory=set)
    preempted: set[int] = field(default_factory=set)  # nodes whose agent said it got SIGTERM
    stopped: set[int] = field(default_factory=set)  # nodes the supervisor stopped (SIGTERM too, but not preempted)
    stall_lines: list[str] = field(default_factory=list)  # the trainer watchdog's summary
    node_codes: dict[int, int] = field(default_factory=dict)  # node -> its agent's exit status (Popen's)
    port_taken: bool = False  # node 0 could not bind the rendezvous port: another process took it
    finished_nodes: set[int] = field(default_factory=set)  # stopped while in torchrun's exit barrier: all workers done
    _pending: dict[int, tuple[int, int]] = field(default_factory=dict)
    _pending_time: dict[int, str] = field(default_factory=dict)
    _in_root: set[int] = field(default_factory=set)
    _in_report: set[int] = field(default_factory=set)
    _banner_from: int | None = None

    def on_rank_line(self, rank: int, text: str) -> None:
        self.ranks_spoke = True
        if self.phase == "starting":
            self.phase = "training"
        match = _PROGRESS.search(text)
        if match and rank == 0:
            epoch, epochs, step, steps = (int(g) for g in match.groups()[:4])
            self.progress = (epoch, epochs, step, steps)
            self.loss = match.group(5)
        if _PEER_FAILURE in text:
            self.peer_failed_ranks.add(rank)
        if _ERROR_LINE.match(text):
            self.last_error[rank] = text
        if protocol.STALL_SUMMARY_TAG in text:
            self.stall_lines.append(text)
        done = ALREADY_COMPLETE.search(text) if rank == 0 else None
        if done:
            self.already_complete = (int(done.group(1)), done.group(2))

    def is_progress(self, rank: int, text: str) -> bool:
        """Rank 0's progress lines: a live status line shows them instead, on a terminal."""
        return rank == 0 and bool(_PROGRESS.match(text))

    def on_node_line(self, node: int, text: str) -> bool:
        """Read an agent's line; returns whether it is worth showing. torchrun's failure report
        (`time : ...`, `rank : 3 (local_rank: 1)`, `exitcode : -9 (pid: ...)`, its first observed
        failure under "Root Cause") is read here and summarised by `describe_failure`: the block
        itself, and the agent's `failed (exitcode: N)` log line, stay in the node's log file.
        torchrun's OMP_NUM_THREADS banner is shown for the first node that prints it only."""
        if PREEMPTED_AGENT in text:
            self.preempted.add(node)
        if node == 0 and _PORT_TAKEN.search(text):
            self.port_taken = True
        if _BLOCK_EDGE.match(text):
            if node in self._in_report:
                self._in_report.discard(node)
                self._in_root.discard(node)
            else:
                self._in_report.add(node)
            return False
        if node in self._in_report:
            self._read_report(node, text)
            return False
        if _AGENT_FAILED.search(text):
            return False
        body = _TORCH_LOG_PREFIX.sub("", text)  # torch may log the banner as `W1201 10:26:24.8 1 run.py:874] ...`
        if (not body.strip() or body.startswith(_OMP_BANNER)) and self.phase == "starting":
            if self._banner_from is None:
                self._banner_from = node
            return self._banner_from == node
        return True

    def _read_report(self, node: int, text: str) -> None:
        if text.startswith(_ROOT_CAUSE):
            self._in_root.add(node)
            return
        if text.startswith("Failures:"):
            self._in_root.discard(node)
            return
        match = _FAIL_TIME.match(text)
        if match:
            self._pending_time[node] = match.group(1)
            return
        match = _FAIL_RANK.match(text)
        if match:
            self._pending[node] = (int(match.group(1)), int(match.group(2)))
            return
        match = _FAIL_CODE.match(text)
        if match and node in self._pending:
            rank, local = self._pending.pop(node)
            when = self._pending_time.pop(node, "")
            if not any(f.rank == rank for f in self.failures):
                self.failures.append(Failure(node, rank, local, int(match.group(1)), when, node in self._in_root))

    def status(self, bar_width: int = 0) -> str:
        """`ddp-train: training | 12s | 2/2 nodes running, world size 4 | epoch 1/2 step 3/8 loss 2.29`;
        with `bar_width`, the step is drawn as a bar of that many cells."""
        elapsed = time.monotonic() - self.started
        parts = [
            f"{self.name}: {self.phase}",
            f"{elapsed:.0f}s",
            f"{self.nodes_running}/{plural(self.nodes, 'node')} running, world size {self.world}",
        ]
        if self.progress:
            e, ne, s, ns = self.progress
            step = f"step {s}/{ns}"
            if bar_width and ns:
                filled = round(bar_width * min(s, ns) / ns)
                step = f"[{'#' * filled}{'.' * (bar_width - filled)}] {step}"
            parts.append(f"epoch {e}/{ne} {step}" + (f" loss {self.loss}" if self.loss else ""))
        return " | ".join(parts)


def _signal_name(code: int) -> str:
    import signal

    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def failure_code(state: JobState, node_code: int) -> int:
    """The job's exit code: the trainer's stall code when its watchdog stopped the job (torchrun
    itself exits 1), else the failing node's."""
    return protocol.EXIT_STALLED if stall_reason(state.stall_lines) is not None else node_code


def _lost_peer(state: JobState, f: Failure) -> bool:
    """A rank whose collective failed because another went away: the trainer's 138 and "a
    collective failed", or a script's gloo/c10d error that its connection to a peer broke."""
    error = state.last_error.get(f.rank) if f.rank is not None else None
    return (
        f.rank in state.peer_failed_ranks
        or f.code == protocol.EXIT_PEER_LOST
        or (error is not None and bool(_LOST_PEER_ERROR.search(error)))
    )


def _own_error(state: JobState, f: Failure) -> bool:
    """The rank printed an error of its own (not that it lost a peer): it failed by itself, even if
    torchrun then stopped it with SIGTERM before it could exit with its own code."""
    error = state.last_error.get(f.rank) if f.rank is not None else None
    return error is not None and not _lost_peer(state, f) and PREEMPTED_AGENT not in error


def _secondary(state: JobState, f: Failure) -> bool:
    """A rank that stopped because of another's fate: it lost its peer (`_lost_peer`), or it took
    part in the agreed SIGTERM stop (143, -15 from Popen) without an error of its own."""
    return _lost_peer(state, f) or (f.code in (-15, protocol.EXIT_PREEMPTED) and not _own_error(state, f))


def _root_cause(state: JobState) -> Failure | None:
    """The rank failure that explains the others, from torchrun's reports: a rank killed by a
    signal first, then torchrun's root cause, the earliest; None when no report names one."""
    candidates = [f for f in state.failures if not _secondary(state, f)]
    candidates.sort(key=lambda f: (f.code >= 0, not f.root_cause, f.time, f.rank if f.rank is not None else 0))
    return candidates[0] if candidates else None


def cause_of_failure(state: JobState, node: int, node_code: int) -> tuple[int, int, bool]:
    """(node, exit code, preempted) of the node that made this start of the group fail, for the
    restart note: a node whose agent got SIGTERM (not one the supervisor stopped itself), else the
    rank torchrun's reports blame (not ranks that only lost a peer), else the first node to fail."""
    preempted = state.preempted - state.stopped
    if preempted:
        return min(preempted), protocol.EXIT_PREEMPTED, True
    lost = lost_nodes(state)
    if lost:
        return lost[0], state.node_codes[lost[0]], False
    if node in state.agent_errors and not any(f.node == node for f in state.failures):
        return node, node_code, False  # its agent died before any worker could fail
    cause = _root_cause(state)
    if cause is not None:
        return cause.node, cause.code, False
    return node, node_code, False


def lost_nodes(state: JobState) -> list[int]:
    """Nodes whose agent was killed by a signal that the supervisor did not send (a node lost as a
    whole, as a cluster loses a machine or deletes a pod): their workers report nothing."""
    return sorted(
        n
        for n, code in state.node_codes.items()
        if code < 0 and n not in state.stopped and not any(f.node == n for f in state.failures)
    )


def died_after_finishing(state: JobState) -> list[Failure]:
    """The ranks that died of SIGABRT or SIGSEGV while every other rank of the job exited 0: as
    all the others completed every collective with them, their work was done, and the signal came
    at exit (gloo's teardown, pytorch/pytorch#179291). Empty when that cannot be known (any other
    failure, a node stopped while its workers still ran, a job of one rank). A node whose workers
    had all ended when it was stopped (`finished_nodes`: its agent waited in torchrun's exit
    barrier for the failed one) counts as having exited 0."""
    failures = [f for f in state.failures if f.rank is not None]
    if not failures or len(failures) >= state.world or state.stall_lines:
        return []
    if any(f.code not in _TEARDOWN_SIGNALS for f in failures):
        return []
    failed_nodes = {f.node for f in failures}
    others = {n: code for n, code in state.node_codes.items() if n not in failed_nodes}
    if any(code != 0 and n not in state.finished_nodes for n, code in others.items()):
        return []
    if state.stopped - state.finished_nodes:
        return []
    return failures


def describe_failure(state: JobState, node: int, node_code: int, ranks: range) -> str:
    """One line naming the rank that failed first, with its error (not the ranks that stopped
    because of it): as torchrun's root cause, the earliest failure by time, across all nodes.

    torchrun's failure report names ranks; a node that died as a whole (a killed agent or
    container) reports nothing, so then the node and the ranks it ran are named. A job the
    trainer's watchdog stopped is described by its summary: who stopped, where, who waited."""
    stalled = stall_reason(state.stall_lines)
    if stalled is not None:
        return f"job {state.name} stalled: {stalled}"

    def secondary(f: Failure) -> bool:
        return _secondary(state, f)

    primary = _root_cause(state)
    whole_node = node in lost_nodes(state) or node in state.agent_errors
    if (primary is None or whole_node) and not any(f.node == node for f in state.failures):
        first, last = ranks[0], ranks[-1]
        ranks_text = f"rank {first}" if first == last else f"ranks {first}-{last}"
        if node_code > 128:
            how = f"was killed by {_signal_name(128 - node_code)}"
        elif node_code < 0:
            how = f"was killed by {_signal_name(node_code)}"
        else:
            how = f"exited with code {node_code}"
        agent_error = state.agent_errors.get(node)
        if agent_error:
            how += f": {_short_error(agent_error)}"
        return f"job {state.name} failed: node {node} ({ranks_text}) {how}"
    primary = primary or (state.failures[0] if state.failures else None)
    if primary is None or primary.rank is None:
        return f"job {state.name} failed: node {node} exited with code {node_code}"
    how = f"was killed by {_signal_name(primary.code)}" if primary.code < 0 else f"exited with code {primary.code}"
    error = state.last_error.get(primary.rank)
    if error and primary.code == -15 and _own_error(state, primary):  # torchrun stopped it on its way out
        how = f"failed: {_short_error(error)} (then stopped by SIGTERM)"
    elif error and primary.code > 0:
        how += f": {_short_error(error)}"
    elif error and _UNJOINED_THREAD in error:
        how += (
            f' ("{_UNJOINED_THREAD}" at exit: the process group was still alive; '
            "end the script with torch.distributed.destroy_process_group())"
        )
    others = [f for f in state.failures if f.rank is not None and f.rank != primary.rank]
    lost = sorted({f.rank for f in others if f.rank is not None and _lost_peer(state, f)})
    stopped = sorted({f.rank for f in others if f.rank is not None and secondary(f) and f.rank not in lost})
    failed = sorted({f.rank for f in others if f.rank is not None and not secondary(f)})
    tail = f"; {_ranks(failed)} failed too" if failed else ""
    tail += f"; {_ranks(lost)} only lost {'their' if len(lost) > 1 else 'its'} peer" if lost else ""
    tail += f"; {_ranks(stopped)} stopped after it" if stopped else ""
    return (
        f"job {state.name} failed: rank {primary.rank} (node {primary.node}, local rank {primary.local_rank}) "
        f"{how}{tail}"
    )


def _ranks(ranks: Sequence[int | None]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _short_error(line: str) -> str:
    """The error a rank printed, without torch's `[rankR]: ` or the trainer's `ddpctl-trainer: error: [rank R] `."""
    line = re.sub(rf"^(\[rank\d+\]: )?({re.escape(protocol.ERROR_TAG)})?(\[rank \d+\] )?", "", line.strip())
    return line if len(line) <= 300 else line[:297] + "..."


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
    from ddpctl.runners import procs

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
            state.nodes_running = len(children)
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
                    state.finished_nodes |= {c.index for c in children if c.poll() is None and procs.workers_done(c)}
                    _announce_stop(children, state, console)
                    stop(children)
                if deadline is not None and now >= deadline and not timed_out:
                    timed_out = True
                    state.phase = "timed out"
                    _announce_stop(children, state, console)
                    stop(children)
                state.nodes_running = sum(1 for c in children if c.poll() is None)
                if not state.nodes_running and state.phase in ("starting", "training"):
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
    state.node_codes = {c.index: c.returncode for c in children if c.returncode is not None}
    if failed is None:
        failed = next((c for c in children if c.returncode and not c.stopping), None)
    return failed, timed_out


@dataclass(frozen=True)
class NodeFailed:
    """How one start of the group ended when a node failed: the node that caused it, the exit code
    the restart rules decide on (and the job ends with if it is not restarted), the one-line error
    it ends with (the runner's own details in it: logs, container, out of memory), and `cause`,
    that error's failure part for the restart line. `again`: the runner's own reason to start the
    group again without counting a restart (a rendezvous port taken before node 0 bound it)."""

    node: int
    code: int
    message: str
    cause: str = ""
    again: str | None = None


def node_failed(state: JobState, first: int, first_code: int, plan: Plan, where: str) -> NodeFailed:
    """The NodeFailed of a start in which node `first` was seen to fail first with `first_code`:
    the node that caused it (`cause_of_failure`: not one that only lost a peer), that node's own
    exit code (what the restart rules decide on, as on the cluster), and one line naming its rank
    and error. `where` ends the message (`logs in ...`)."""
    node, _, _ = cause_of_failure(state, first, failure_code(state, first_code))
    code = failure_code(state, state.node_codes.get(node) or first_code)
    text = describe_failure(state, node, code, plan.nodes[node].ranks)
    cause = text.removeprefix(f"job {state.name} failed: ").removeprefix(f"job {state.name} ")
    return NodeFailed(node, code, f"{text} (exit code {code}; {where})", f"{cause} (exit code {code})")


def after_finishing_note(finished: Sequence[Failure]) -> str:
    """The line for ranks that died at exit after every other rank finished (`died_after_finishing`)."""
    ranks = ", ".join(f"rank {f.rank} (node {f.node}) by {_signal_name(f.code)}" for f in finished)
    return (
        f"killed at exit: {ranks}, after every other rank had finished, so the work was done; not restarting. "
        "torch's gloo teardown can abort at interpreter exit (pytorch/pytorch#179291)"
    )


def interrupted_note(name: str, how: str, checkpoint_dir: Path | str | None, cwd: Path) -> str:
    """The last line after Ctrl-C (or SIGTERM/SIGHUP to ddpctl): where the job stopped and how to
    go on from there, or start over. `checkpoint_dir` is a directory, or an object store's URL."""
    signal_name = f" ({how})" if how.startswith("SIG") else ""
    if isinstance(checkpoint_dir, str):
        return (
            f"{name} interrupted{signal_name}; run the same command to resume from the newest checkpoint in "
            f"{checkpoint_dir}, or give a new prefix to start over"
        )
    step = latest_step(checkpoint_dir)
    if step is None or checkpoint_dir is None:
        return f"{name} interrupted{signal_name} before its first checkpoint; run the same command to start it again"
    latest = _latest_checkpoint(checkpoint_dir)
    shown = relative_path(latest, cwd) if latest else relative_path(checkpoint_dir, cwd)
    return (
        f"{name} interrupted{signal_name} at step {step} (checkpoint {shown}); run the same command to resume "
        "there, or add --fresh to start over"
    )


def failure_signature(state: JobState, node: int, code: int) -> tuple[object, ...]:
    """What makes two failures "the same": where the job stalled, else the failing rank, its exit
    code and its error line (or the node, its code and its agent's error)."""
    stalled = stall_reason(state.stall_lines)
    if stalled is not None:
        return ("stalled", stalled)
    primary = _root_cause(state)
    if primary is not None and primary.rank is not None:
        error = state.last_error.get(primary.rank)
        # with its error line, not its exit code: a rank that crashed may be SIGTERMed by torchrun
        # before it can exit with its own code, so one crash can end with either
        return ("rank", primary.rank, error) if error else ("rank", primary.rank, primary.code)
    return ("node", node, code, state.agent_errors.get(node))


def restarts_phrase(restarts: int, limit: int) -> str:
    """`restart 1 of 3, 2 left; --backoff-limit 0 turns restarts off`."""
    left = limit - restarts
    return f"restart {restarts} of {limit}, {left} left; --backoff-limit 0 turns restarts off"


def run_with_restarts(
    plan: Plan,
    console: Console,
    start_group: Callable[[JobState, float | None], NodeFailed | None],
    *,
    nodes: int,
    checkpoint_dir: Path | str | None,
    timeout: float | None,
) -> JobState:
    """Run the whole group until it succeeds, as the target's controller would: after a failed
    node, the group starts again from scratch (torchrun's static rendezvous cannot admit a lone
    replacement) up to the target's limit, and the trainer resumes from its checkpoint.

    What counts, as on the cluster: a preempted node (SIGTERM) and a node lost as a whole (its
    agent killed) restart the group without counting, as do the runner's own failures
    (`NodeFailed.again`); the ranks that only lost a peer never count. A limit of 0 turns every
    restart off, those too. What ends the job at once
    (JobFailed): a code the target does not retry (a usage error, exit 2), the last failure
    allowed, and a failure that repeats the one before it (`failure_signature`): the same failure
    twice is not retried, since a deterministic bug or hang cannot go away by itself.

    `start_group(state, timeout)` is the runner's: start every node, supervise them to their end
    (and leave nothing running), return None on success or the failed node; it raises WaitTimeout
    at `timeout` (what is left of --timeout across all starts). Returns the successful start's
    state (its clock started with the first start)."""
    limit = restart_limit(plan)
    deadline = time.monotonic() + timeout if timeout else None
    first_started = time.monotonic()
    restarts = 0
    free = 0
    previous: tuple[object, ...] | None = None
    while True:
        state = JobState(plan.spec.name, nodes, plan.world_size, started=first_started, attempt=restarts + free)
        left = None if deadline is None else max(deadline - time.monotonic(), 1.0)
        failed = start_group(state, left)
        if failed is None:
            return state
        if failed.again and free < MAX_FREE_STARTS:
            free += 1
            console.note(f"{failed.again}; starting all {plural(nodes, 'node')} again (not counted as a restart)")
            continue
        node, code, preempted = cause_of_failure(state, failed.node, failed.code)
        lost = node in lost_nodes(state)
        what = what_happened(node, code, preempted) if preempted or lost or not failed.cause else failed.cause
        if lost:
            what = f"node {node} was lost (its agent was killed by {_signal_name(state.node_codes[node])})"
        decision = failed.code if failed.cause and not (preempted or lost) else code
        step = latest_step(checkpoint_dir)
        if isinstance(checkpoint_dir, str):
            where = f"from the newest checkpoint in {checkpoint_dir}"
        else:
            where = f"from step {step}" if step is not None else "from scratch (no checkpoint yet)"
        if not retriable(plan, decision):
            raise JobFailed(failed.message, failed.code)
        if (preempted or lost) and limit > 0 and free < MAX_FREE_STARTS:
            free += 1
            console.note(
                f"{what}; restarting all {plural(nodes, 'node')} {where} "
                f"(not counted: {'a preemption' if preempted else 'a lost node'}; {limit - restarts} of {limit} "
                "restarts left)"
            )
            continue
        signature = failure_signature(state, node, decision)
        if signature == previous:
            raise JobFailed(f"{failed.message}; the same failure twice: not retried", failed.code)
        if restarts >= limit:
            raise JobFailed(failed.message, failed.code)
        previous = signature
        restarts += 1
        console.note(f"{what}; restarting all {plural(nodes, 'node')} {where} ({restarts_phrase(restarts, limit)})")


def attempt_log(path: Path, attempt: int) -> Path:
    """Where a node's output goes: `path` for the first start, `<stem>.restart-N<suffix>` for the
    Nth restart of the group, so that the logs of the start that failed are kept."""
    return path if attempt == 0 else path.with_name(f"{path.stem}.restart-{attempt}{path.suffix}")


def _announce_stop(children: Sequence[Child], state: JobState, console: Console) -> None:
    running = [c for c in children if c.poll() is None]
    if running:
        console.note(f"stopping {', '.join(c.label for c in running)}")
    for child in running:
        child.stopping = True
        state.stopped.add(child.index)


def _latest_checkpoint(directory: Path | str | None) -> Path | None:
    if not isinstance(directory, Path) or not directory.is_dir():
        return None
    found = sorted(p for p in directory.iterdir() if protocol.CHECKPOINT_NAME.match(p.name))
    return found[-1] if found else None


def finish_note(console: Console, state: JobState, checkpoint_dir: Path | str | None, cwd: Path, logs: Path) -> None:
    """The last line of a successful run: where its checkpoint and logs are. A rerun of a job
    that was already complete trained nothing: it says so, and how to start over (--fresh)."""
    logs_at = f"logs in {relative_path(logs, cwd)}"
    if state.already_complete:
        step, checkpoint = state.already_complete
        latest = _latest_checkpoint(checkpoint_dir)
        shown = relative_path(latest, cwd) if latest else checkpoint
        again = "give a new prefix" if isinstance(checkpoint_dir, str) else "add --fresh"  # --fresh leaves a store
        console.note(
            f"{state.name} was already complete at step {step} (checkpoint {shown}), so nothing was trained; "
            f"to train it again from the start, {again} ({logs_at})"
        )
        return
    elapsed = time.monotonic() - state.started
    latest = _latest_checkpoint(checkpoint_dir)
    if latest:
        where = f"; checkpoint {relative_path(latest, cwd)}"
    elif isinstance(checkpoint_dir, Path):
        where = f"; checkpoints in {relative_path(checkpoint_dir, cwd)}"
    else:
        where = f"; checkpoints in {checkpoint_dir}" if checkpoint_dir else ""
    console.note(f"{state.name} succeeded in {elapsed:.1f}s{where}; {logs_at}")
