"""The one supervisor of a local job's nodes, torchrun agents (`run --local`) or containers (`run
--docker`): start the group, stream its lines, stop it when a node fails, and start it again as
the target's rules say, recording the job in its run directory for `ddpctl status` and `logs`.

What differs between the two is a `Launcher`: how a node starts and stops, what a failed node
means, what to set up and clean up. `supervise` runs one start of the group and leaves no process
behind; `run_with_restarts` decides on restarts as the target's controller would (restarts.py);
`run_job` is both, with the notes a run begins and ends with. Nothing here imports torch.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl.console import Console, plural
from ddpctl.errors import Interrupted, RuntimeFailure, WaitTimeout
from ddpctl.runners.failures import (
    NodeFailed,
    blamed_node,
    cause_of_failure,
    failure_signature,
    finish_note,
    interrupted_note,
    lost_nodes,
    signal_name,
)
from ddpctl.runners.restarts import latest_step, restart_limit, retriable, what_happened
from ddpctl.runners.state import JobState, show_line

if TYPE_CHECKING:
    from ddpctl.plan import Plan
    from ddpctl.runners.procs import Child
    from ddpctl.runners.runs import RunRecord

# Starts of the group that do not count against the restart limit (preemptions, lost nodes, a
# port taken before it was bound) are still capped, so that a machine that keeps killing the job
# does not restart it forever.
MAX_FREE_STARTS = 10

# How long the other nodes may go on reporting their own errors after the first node failed,
# before they are stopped (as the Job controller would delete their pods).
PEER_GRACE_S = 5.0
STOP_GRACE_S = 10.0
# a failed child is judged once its last lines were read (they may say why: "left alone"), or this
# long after it exited when its output stays open (a worker of its own still holds the pipe)
DRAIN_S = 2.0
MAX_LINES_A_TURN = 1000  # lines shown between two looks at the children, however much is queued


class JobFailed(RuntimeFailure):
    """The job ran and failed: the exit code is the failing node's."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code if exit_code > 0 else 1


def supervise(
    start: Callable[[], Iterable[Child]],
    state: JobState,
    console: Console,
    *,
    show: Callable[[Child, str], None],
    stop: Callable[[list[Child]], None],
    timeout: float | None,
    tick: Callable[[JobState, list[Child]], None] | None = None,
    replace: Callable[[Child, JobState], Child | None] | None = None,
) -> tuple[Child | None, bool]:
    """Start the children, stream their lines, stop the rest when one fails (after a grace for
    their own reports) or on --timeout, and wait for all. Returns (first failed child, timed out).
    `tick` sees the state about twice a second (the run record follows the job with it).
    `start` yields each child as soon as it runs, so one that fails to start (or a Ctrl-C while
    starting) leaves none of the earlier ones untracked. On Ctrl-C/SIGTERM every child is stopped
    before KeyboardInterrupt goes on. `replace(failed, state)` may start a failed child again alone
    (pod recovery): the others go on, and the new child takes the failed one's place. Whatever
    happens, no child process (nor a child's child) is left running."""
    from ddpctl.runners import procs

    children: list[Child] = []
    replaced: list[Child] = []
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
            closed: set[int] = set()  # children whose output was read to its end
            exited: dict[int, float] = {}  # when a failed child's exit was first seen
            while mux.open or any(c.poll() is None for c in children):
                item, taken = mux.get(timeout=0.5), 1
                while item is not None:  # all that is queued: a slow turn leaves no backlog
                    if item[1] is None:
                        closed.add(id(item[0]))
                    else:
                        show(item[0], item[1])
                    item, taken = (mux.get(timeout=0), taken + 1) if taken < MAX_LINES_A_TURN else (None, taken)
                procs.remember_trees(children)  # at most once a second: it reads all of /proc
                for position, child in enumerate(children):
                    code = child.poll()
                    if code is not None and code != 0 and failed is None and not child.stopping:
                        seen = exited.setdefault(id(child), time.monotonic())
                        if id(child) not in closed and time.monotonic() - seen < DRAIN_S:
                            continue  # its last lines first
                        again = replace(child, state) if replace is not None else None
                        if again is not None:
                            children[position] = again
                            replaced.append(child)
                            mux.add(again)
                            continue
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
                if tick is not None:
                    tick(state, children)
            mux.join(timeout=5)
    except KeyboardInterrupt:
        console.done()
        console.note(f"stopping {state.name}: interrupted")
        for child in children:
            child.stopping = True
        stop(children)
        raise
    finally:
        procs.kill_leftovers(children + replaced)
        if reaper:
            procs.set_child_subreaper(False)
        console.done()
    state.node_codes = {c.index: c.returncode for c in children if c.returncode is not None}
    by_itself = [c for c in children if c.returncode and not c.stopping]  # not stopped by us
    if failed is None:
        failed = next(iter(by_itself), None)
    elif not timed_out:
        blamed = blamed_node(state, failed.index, [c.index for c in by_itself])
        failed = next((c for c in by_itself if c.index == blamed), failed)
    return failed, timed_out


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
        state.node_ranks = {n.index: n.ranks for n in plan.nodes}
        left = None if deadline is None else max(deadline - time.monotonic(), 1.0)
        failed = start_group(state, left)
        if failed is None:
            return state
        if failed.final:
            raise JobFailed(failed.message, failed.code)
        if failed.again and free < MAX_FREE_STARTS:
            free += 1
            console.note(f"{failed.again}; starting all {plural(nodes, 'node')} again (not counted as a restart)")
            continue
        node, code, preempted = cause_of_failure(state, failed.node, failed.code)
        lost = node in lost_nodes(state)
        what = what_happened(node, code, preempted) if preempted or lost or not failed.cause else failed.cause
        if lost:
            what = f"node {node} was lost (its agent was killed by {signal_name(state.node_codes[node])})"
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


def _announce_stop(children: Sequence[Child], state: JobState, console: Console) -> None:
    running = [c for c in children if c.poll() is None]
    if running:
        console.note(f"stopping {', '.join(c.label for c in running)}")
    for child in running:
        child.stopping = True
        state.stopped.add(child.index)


class Launcher(ABC):
    """What a runner does its own way; the supervisor does the rest."""

    #: what one node is, in notes: `node` (a torchrun agent) or `container`
    unit = "node"

    def setup(self) -> None:  # noqa: B027 - a hook: most launchers have nothing to set up
        """Before the first start (a container network)."""

    def teardown(self) -> list[str]:
        """After the last start, whatever happened; returns what could not be removed."""
        return []

    @abstractmethod
    def start_node(self, index: int, attempt: int) -> Child:
        """Start node `index` for start `attempt` of the group (0 the first, N the Nth restart)."""

    @abstractmethod
    def stop(self, children: list[Child]) -> None:
        """Stop the running ones: SIGTERM, a grace period, then SIGKILL."""

    def collect(self, state: JobState) -> None:  # noqa: B027 - a hook
        """After a start of the group ended, before `after_start` (read what the containers say)."""

    def after_start(self) -> None:  # noqa: B027 - a hook
        """After each start of the group, whatever happened (remove its containers)."""

    def tend(self, state: JobState) -> None:  # noqa: B027 - a hook
        """About twice a second while a group runs: keep what runs beside the nodes running."""

    def replace_node(self, failed: Child, state: JobState) -> Child | None:
        """Start node `failed` again alone while the others go on (pod recovery), or None: the
        group stops and the target's restart rules decide."""
        return None

    @abstractmethod
    def node_failed(self, state: JobState, failed: Child) -> NodeFailed | None:
        """What node `failed` failing means for this start: None when the job's work was done after all."""

    @abstractmethod
    def timed_out(self, timeout: float | None) -> WaitTimeout:
        """The error for a job still running at --timeout (it was stopped)."""


def run_job(
    plan: Plan,
    launcher: Launcher,
    console: Console,
    *,
    record: RunRecord,
    checkpoint_dir: Path | str | None,
    cwd: Path,
    logs: Path,
    timeout: float | None,
) -> int:
    """Run the job to its end with the target's restarts, keeping its run record; returns 0 or
    raises JobFailed / WaitTimeout / Interrupted (each recorded)."""
    nodes = len(plan.nodes)

    def tick(state: JobState, children: list[Child]) -> None:
        launcher.tend(state)
        record.tick(state, children)

    def start_group(state: JobState, left: float | None) -> NodeFailed | None:
        def starts() -> Iterator[Child]:
            for index in range(nodes):
                yield launcher.start_node(index, state.attempt)

        def show(child: Child, text: str) -> None:
            show_line(console, state, child.index, text, stopping=child.stopping, rank_base=child.rank_base)

        try:
            failed, timed_out = supervise(
                starts,
                state,
                console,
                show=show,
                stop=launcher.stop,
                timeout=left,
                tick=tick,
                replace=launcher.replace_node,
            )
            launcher.collect(state)
        finally:
            launcher.after_start()
            record.ended(state)
        if timed_out:
            raise launcher.timed_out(timeout)
        return None if failed is None else launcher.node_failed(state, failed)

    record.write("running")
    try:
        launcher.setup()
        try:
            state = run_with_restarts(
                plan, console, start_group, nodes=nodes, checkpoint_dir=checkpoint_dir, timeout=timeout
            )
        except KeyboardInterrupt as exc:
            raise Interrupted(interrupted_note(plan.spec.name, str(exc), checkpoint_dir, cwd)) from None
        finally:
            left = launcher.teardown()
            if left:
                console.note(f"could not remove {len(left)} objects of this run: {' '.join(left)}")
    except JobFailed as exc:
        record.write("failed", str(exc))
        raise
    except WaitTimeout as exc:
        record.write("timed out", str(exc))
        raise
    except Interrupted as exc:
        record.write("interrupted", exc.message)
        raise
    except BaseException as exc:
        record.write("failed", str(exc) or type(exc).__name__)
        raise
    finish_note(console, state, checkpoint_dir, cwd, logs)
    record.write("succeeded")
    return 0
