"""What a failed start of a local job means: which rank failed first and why (`describe_failure`,
from torchrun's reports and the ranks' errors in `JobState`), which node caused it, whether two
failures are the same one, and the one-line notes a run ends with. Nothing here imports torch.
"""

from __future__ import annotations

import errno
import re
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ddpctl.backend.stragglers import stopped_for, stopping_note
from ddpctl.console import Console, relative_path
from ddpctl.errors import RuntimeFailure, UsageError
from ddpctl.records import record
from ddpctl.runners.restarts import latest_step
from ddpctl.runners.stall import stall_reason
from ddpctl.runners.state import PREEMPTED_AGENT, Failure, JobState
from ddpctl_trainer import protocol

if TYPE_CHECKING:
    from ddpctl.plan import Plan

# What a C++ runtime prints before SIGABRT when a process exits with threads still running; with
# torch.distributed, gloo's threads of a process group still alive at interpreter exit: never
# destroyed, or held by a DDP model that is a module global (its reducer keeps the group).
_UNJOINED_THREAD = "terminate called without an active exception"
# A rank's error that says only that its peer went away: the connection to it broke (gloo, c10d).
_LOST_PEER_ERROR = re.compile(
    r"connection reset by peer|connection closed by peer|broken pipe|got 0 bytes", re.IGNORECASE
)
# torch's own prefix of a rank's traceback line (`[rank3]: `), not the trainer's `[rank 3] `.
_TORCH_RANK = re.compile(r"^\[rank\d+\]: ")
# Deaths at interpreter exit after the work was done: gloo's teardown can abort (pytorch/pytorch#179291).
_TEARDOWN_SIGNALS = (-6, -11)  # SIGABRT, SIGSEGV


def signal_name(code: int) -> str:
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
    """The rank printed an error of its own (not that it lost a peer, nor the trainer's line that
    SIGTERM stopped it): it failed by itself, even if torchrun then stopped it with SIGTERM before it
    could exit with its own code."""
    error = state.last_error.get(f.rank) if f.rank is not None else None
    return (
        error is not None
        and not _lost_peer(state, f)
        and PREEMPTED_AGENT not in error
        and not _short_error(error).startswith((protocol.STOPPED_BY_SIGTERM, protocol.STOPPED_BY_SECOND_SIGTERM))
    )


def _secondary(state: JobState, f: Failure) -> bool:
    """A rank that stopped because of another's fate: it lost its peer (`_lost_peer`), or it took
    part in the agreed SIGTERM stop (143, -15 from Popen) without an error of its own."""
    return _lost_peer(state, f) or (f.code in (-15, protocol.EXIT_PREEMPTED) and not _own_error(state, f))


def root_cause(state: JobState) -> Failure | None:
    """The rank failure that explains the others, from torchrun's reports: a rank killed by a
    signal first, then torchrun's root cause, the earliest; None when no report names one. A rank
    SIGTERMed with an error of its own was stopped by torchrun on its way out, after another's
    failure: it is weighed by its error, not as a kill. A failed preflight ends every rank alike,
    and only rank 0 says why: its failure comes first."""
    candidates = [f for f in state.failures if not _secondary(state, f)]

    def killed(f: Failure) -> bool:
        return f.code < 0 and f.code != -signal.SIGTERM

    def unsaid_preflight(f: Failure) -> bool:
        return f.code == protocol.EXIT_PREFLIGHT and f.rank not in state.last_error

    candidates.sort(
        key=lambda f: (
            not killed(f),
            unsaid_preflight(f),
            not f.root_cause,
            f.time,
            f.rank if f.rank is not None else 0,
        )
    )
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
    cause = root_cause(state)
    if cause is not None:
        return cause.node, cause.code, False
    return node, node_code, False


def blamed_node(state: JobState, first: int, failed: Sequence[int]) -> int:
    """Which of the `failed` nodes (each ended with a code of its own, none stopped by the
    supervisor) to blame: `first`, the first seen to fail, unless every failure it reported only
    followed another's (it lost a peer) while another failed node reported nothing (it died whole:
    a killed container or agent) or a failure of its own. The supervisor looks at the nodes in
    turn, so the node that lost a peer can be seen to fail before the node that caused it."""

    def followed(node: int) -> bool:
        reported = [f for f in state.failures if f.node == node]
        return bool(reported) and all(_secondary(state, f) for f in reported)

    if not followed(first):
        return first
    return next((node for node in sorted(failed) if node != first and not followed(node)), first)


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
    barrier for the failed one) counts as having exited 0, and so does a rank that torchrun
    SIGTERMed on an aborting rank's node after that abort (torchrun stops a failed worker's
    siblings): the others completed every collective with it too."""
    failures = [f for f in state.failures if f.rank is not None]
    if not failures or len(failures) >= state.world or state.stall_lines:
        return []
    aborted = [f for f in failures if f.code in _TEARDOWN_SIGNALS]
    if not aborted or any(not _stopped_by_torchrun(f, aborted) for f in failures if f not in aborted):
        return []
    failed_nodes = {f.node for f in failures}
    others = {n: code for n, code in state.node_codes.items() if n not in failed_nodes}
    if any(code != 0 and n not in state.finished_nodes for n, code in others.items()):
        return []
    if state.stopped - state.finished_nodes:
        return []
    return aborted


def _stopped_by_torchrun(f: Failure, aborted: list[Failure]) -> bool:
    """A rank SIGTERMed on the node of a rank that aborted, not the first failure torchrun saw there."""
    return f.code == -15 and not f.root_cause and any(a.node == f.node for a in aborted)


def describe_failure(state: JobState, node: int, node_code: int, ranks: range) -> str:
    """One line naming the rank that failed first, with its error (not the ranks that stopped
    because of it): as torchrun's root cause, the earliest failure by time, across all nodes.

    torchrun's failure report names ranks; a node that died as a whole (a killed agent or
    container) reports nothing, so then the node and the ranks it ran are named. A job the
    trainer's watchdog stopped is described by its summary: who stopped, where, who waited; one that
    --stragglers fail stopped, by the node rank 0 named and what to do about it."""
    stalled = stall_reason(state.stall_lines)
    if stalled is not None:
        return f"job {state.name} stalled: {stalled}"
    straggler = straggler_stop(state, node_code)
    if straggler is not None:
        return f"job {state.name} {straggler}"

    def secondary(f: Failure) -> bool:
        return _secondary(state, f)

    primary = root_cause(state)
    whole_node = node in lost_nodes(state) or node in state.agent_errors
    if (primary is None or whole_node) and not any(f.node == node for f in state.failures):
        first, last = ranks[0], ranks[-1]
        ranks_text = f"rank {first}" if first == last else f"ranks {first}-{last}"
        if node_code > 128:
            how = f"was killed by {signal_name(128 - node_code)}"
        elif node_code < 0:
            how = f"was killed by {signal_name(node_code)}"
        else:
            how = f"exited with code {node_code}"
        agent_error = state.agent_errors.get(node)
        if agent_error:
            how += f": {_short_error(agent_error)}"
        return f"job {state.name} failed: node {node} ({ranks_text}) {how}"
    primary = primary or (state.failures[0] if state.failures else None)
    if primary is None or primary.rank is None:
        return f"job {state.name} failed: node {node} exited with code {node_code}"
    how = f"was killed by {signal_name(primary.code)}" if primary.code < 0 else f"exited with code {primary.code}"
    error = state.last_error.get(primary.rank)
    if error and primary.code == -15 and _own_error(state, primary):  # torchrun stopped it on its way out
        how = f"failed: {_short_error(error)} (then stopped by SIGTERM)"
    elif error and primary.code > 0:
        how += f": {_short_error(error)}"
    elif error and _UNJOINED_THREAD in error:
        how += (
            f' ("{_UNJOINED_THREAD}" at exit: the process group was still alive; '
            "end the script with torch.distributed.destroy_process_group(), with the DDP model already "
            "gone: train inside a function, as PyTorch's DDP tutorial does)"
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


def straggler_stop(state: JobState, node_code: int) -> str | None:
    """How --stragglers fail stopped the job (every rank exits EXIT_STRAGGLER after the same step),
    from rank 0's straggler line (else a rank's error line): the node, and what to do about it;
    None when the job did not stop for a straggler."""
    if node_code != protocol.EXIT_STRAGGLER and all(f.code != protocol.EXIT_STRAGGLER for f in state.failures):
        return None
    note = stopping_note(state.stragglers, state.last_error.values())
    return None if note is None else stopped_for(note)


def _ranks(ranks: Sequence[int | None]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _short_error(line: str) -> str:
    """The error a rank printed, without torch's `[rankR]: ` or the trainer's `ddpctl-trainer: error: [rank R] `
    (read by protocol.parse_rank_line)."""
    line = _TORCH_RANK.sub("", line.strip())
    ours = protocol.parse_rank_line(line)
    line = (ours[1] if ours else line).removeprefix(protocol.ERROR_TAG)
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


@record
class NodeFailed:
    """How one start of the group ended when a node failed: the node that caused it, the exit code
    the restart rules decide on (and the job ends with if it is not restarted), the one-line error
    it ends with (the runner's own details in it: logs, container, out of memory), and `cause`,
    that error's failure part for the restart line. `again`: the runner's own reason to start the
    group again without counting a restart (a rendezvous port taken before node 0 bound it).
    `final`: the job ends here, whatever restarts are left (a node started again alone as often as
    the limit allows, under pod recovery)."""

    node: int
    code: int
    message: str
    cause: str = ""
    again: str | None = None
    final: bool = False


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
    ranks = ", ".join(f"rank {f.rank} (node {f.node}) by {signal_name(f.code)}" for f in finished)
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
    primary = root_cause(state)
    if primary is not None and primary.rank is not None:
        error = state.last_error.get(primary.rank)
        # with its error line, not its exit code: a rank that crashed may be SIGTERMed by torchrun
        # before it can exit with its own code, so one crash can end with either
        return ("rank", primary.rank, error) if error else ("rank", primary.rank, primary.code)
    return ("node", node, code, state.agent_errors.get(node))


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
