"""What a job's output tells: `JobState` reads every line of every node of a local run (the
ranks' lines, the torchrun agents' own lines and their failure reports, a container's output),
and `show_line` routes each line to it and to the console, for `run --local` and `run --docker`
alike. What the lines mean when the job fails is `ddpctl.runners.failures`'. Nothing here imports
torch.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ddpctl.console import Console, plural
from ddpctl.runners.procs import split_rank_line
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.plan import Plan

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
# torchrun's banner when it sets OMP_NUM_THREADS=1 for its workers: printed by every agent.
_TORCH_LOG_PREFIX = re.compile(r"^[DIWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\] ")
_OMP_BANNER = ("*****************************************", "Setting OMP_NUM_THREADS environment variable")
# What ddpctl_trainer.launch prints when its agent was sent SIGTERM (the node was preempted: a
# kubelet, `docker stop` or a user's kill sent it to the agent, the container's PID 1).
PREEMPTED_AGENT = f"{protocol.LAUNCHER_STOPPED_BY}SIGTERM"
# What the store host's agent says when its rendezvous port was taken before it could bind it
# (torch's DistNetworkError names the errno): the runner's own problem, not the job's.
_PORT_TAKEN = re.compile(r"EADDRINUSE|address already in use", re.IGNORECASE)


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
    progress: protocol.Progress | None = None  # rank 0's newest progress line
    progress_at: float | None = None  # when it was printed (time.time())
    already_complete: tuple[int, str] | None = None  # (step, checkpoint) of a rerun of a finished job
    preflight: list[str] = field(default_factory=list)  # rank 0's preflight report, its lines as printed
    stragglers: list[str] = field(default_factory=list)  # rank 0's straggler lines (named, recovered), as printed
    # pod recovery: each node started again alone (`node`, `reason`; `step` and `seconds` once the
    # group has formed again: the step training went on from, the seconds since the node failed)
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    # node -> the global rank of its torchrun's rank 0, where that torchrun runs the node alone
    # (pod recovery): the ranks its failure report names are counted from there
    rank_bases: dict[int, int] = field(default_factory=dict)
    left_ranks: set[int] = field(default_factory=set)  # pod recovery: ranks that alone got SIGTERM and left
    failures: list[Failure] = field(default_factory=list)
    peer_failed_ranks: set[int] = field(default_factory=set)
    last_error: dict[int, str] = field(default_factory=dict)
    agent_errors: dict[int, str] = field(default_factory=dict)  # node -> the agent's own exception
    in_traceback: set[int] = field(default_factory=set)
    preempted: set[int] = field(default_factory=set)  # nodes whose agent said it got SIGTERM
    stopped: set[int] = field(default_factory=set)  # nodes the supervisor stopped (SIGTERM too, but not preempted)
    stall_lines: list[str] = field(default_factory=list)  # the trainer watchdog's summary
    node_codes: dict[int, int] = field(default_factory=dict)  # node -> its agent's exit status (Popen's)
    node_ranks: dict[int, range] = field(default_factory=dict)  # node -> its global ranks
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
        progress = protocol.parse_progress(text) if rank == 0 else None
        if progress is not None:
            self.progress, self.progress_at = progress, time.time()
        if _PEER_FAILURE in text:
            self.peer_failed_ranks.add(rank)
        if _ERROR_LINE.match(text):
            self.last_error[rank] = text
        if protocol.LEFT_ALONE in text:
            self.left_ranks.add(rank)
        if protocol.STALL_SUMMARY_TAG in text:
            self.stall_lines.append(text)
        if rank == 0 and protocol.preflight_line(text) is not None:
            self.preflight.append(text)
        if rank == 0 and protocol.straggler_line(text) is not None:
            self.stragglers.append(text)
        step = protocol.recovery_step(text)
        pending = [r for r in self.recoveries if r.get("step") is None]
        if step is not None and pending:
            pending[0].update(step=step, seconds=round(time.monotonic() - pending[0].pop("_since"), 1))
        done = ALREADY_COMPLETE.search(text) if rank == 0 else None
        if done:
            self.already_complete = (int(done.group(1)), done.group(2))

    def on_replaced(self, node: int, reason: str) -> None:
        """Node `node` failed and is started again alone (pod recovery)."""
        self.recoveries.append({"node": node, "reason": reason, "step": None, "_since": time.monotonic()})

    def is_progress(self, rank: int, text: str) -> bool:
        """Rank 0's progress lines: a live status line shows them instead, on a terminal."""
        return rank == 0 and protocol.parse_progress(text) is not None

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
            self._pending[node] = (self.rank_bases.get(node, 0) + int(match.group(1)), int(match.group(2)))
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
            p = self.progress
            step = f"step {p.step}/{p.steps}"
            if bar_width and p.steps:
                filled = round(bar_width * min(p.step, p.steps) / p.steps)
                step = f"[{'#' * filled}{'.' * (bar_width - filled)}] {step}"
            parts.append(f"epoch {p.epoch}/{p.epochs} {step}" + (f" loss {p.loss:.4f}" if p.loss is not None else ""))
            if p.eta_s is not None:
                parts.append(f"ETA {protocol.duration_text(p.eta_s)}")
        return " | ".join(parts)


def show_line(
    console: Console, state: JobState, node: int, text: str, *, stopping: bool = False, rank_base: int = 0
) -> None:
    """One line of node `node`'s output: a rank's line (behind the marker torchrun adds in a local
    run, or the trainer's own `[rank R] `) goes to the console with its rank, and the rest is the
    agent's or the container's own, shown unless it is noise (torchrun's failure report, its
    banner after the first node, an agent's traceback, blank lines of a node being stopped)."""
    if rank_base:
        state.rank_bases[node] = rank_base
    found = split_rank_line(text, rank_base) or protocol.parse_rank_line(text)
    if found:
        rank, rest = found
        state.on_rank_line(rank, rest)
        console.rank_line(rank, rest, progress=state.is_progress(rank, rest))
        return
    if text.startswith(protocol.ERROR_TAG):  # a usage error, printed without a rank (every rank finds it)
        for rank in state.node_ranks.get(node, ()):
            state.last_error.setdefault(rank, text)
    if not state.on_node_line(node, text):
        return
    if _agent_traceback(state, node, text):
        return
    if stopping and not text.strip():
        return
    console.node_line(node, text)


def _agent_traceback(state: JobState, node: int, text: str) -> bool:
    """True for the lines of an agent's own Python traceback (torchrun's ChildFailedError, or the
    SignalException of an agent we stopped): they say nothing the failure summary does not, and
    they stay in the node's log file. Tracebacks of the training code come as rank lines."""
    if text.startswith("Traceback (most recent call last):"):
        state.in_traceback.add(node)
        return True
    if node not in state.in_traceback:
        return False
    if text.startswith((" ", "\t")):
        return True
    state.in_traceback.discard(node)  # the exception line ends the traceback
    if not text.startswith(
        (
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
            "torch.distributed.elastic.multiprocessing.api.SignalException",
        )
    ):
        state.agent_errors[node] = text  # why an agent died before its workers could fail
    return True
