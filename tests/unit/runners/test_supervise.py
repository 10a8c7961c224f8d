"""ddpctl.runners.supervise: the restart loop `run --local` and `run --docker` share
(`run_with_restarts`), driven by scripted starts of the group (no processes): what is restarted,
how often, what the console says, and what ends the job; and `run_job` with a launcher of plain
`sh` children (no torchrun): streaming, logs, the run record, restarts, --timeout and Ctrl-C. The
real runs are in test_run_local.py and test_run_docker.py."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ddpctl.backend import Where
from ddpctl.console import make_console
from ddpctl.engines import plan_for
from ddpctl.errors import Interrupted, WaitTimeout
from ddpctl.plan import Plan
from ddpctl.runners import procs
from ddpctl.runners.failures import NodeFailed, node_failed
from ddpctl.runners.procs import RANK_MARK, Child
from ddpctl.runners.runs import RunRecord, node_log
from ddpctl.runners.state import Failure, JobState
from ddpctl.runners.supervise import MAX_LINES_A_TURN, JobFailed, Launcher, run_job, run_with_restarts, supervise
from ddpctl.spec.model import JobSpec


@dataclass(frozen=True)
class Start:
    """One scripted start of the group: how it ends, and what its output told (preempted nodes,
    nodes the supervisor stopped itself)."""

    failed: NodeFailed | None
    preempted: frozenset[int] = frozenset()
    stopped: frozenset[int] = frozenset()
    reports: tuple[Failure, ...] = ()  # torchrun's failure reports
    peer_failed_ranks: frozenset[int] = frozenset()  # ranks that said "a collective failed"
    node_codes: tuple[tuple[int, int], ...] = ()  # (node, its agent's exit status) of the nodes that ended
    errors: tuple[tuple[int, str], ...] = ()  # (rank, its error line)


@dataclass
class Script:
    starts: Sequence[Start]
    calls: list[JobState] = field(default_factory=list)

    def __call__(self, state: JobState, timeout: float | None) -> NodeFailed | None:
        start = self.starts[len(self.calls)]
        self.calls.append(state)
        state.preempted |= start.preempted
        state.stopped |= start.stopped
        state.failures.extend(start.reports)
        state.peer_failed_ranks |= start.peer_failed_ranks
        state.node_codes.update(start.node_codes)
        state.last_error.update(start.errors)
        return start.failed


PREEMPTED = Start(NodeFailed(1, 143, "job w failed: node 1 was killed by SIGTERM"), preempted=frozenset({1}))
KILLED = Start(NodeFailed(1, 137, "job w failed: node 1 was killed by SIGKILL"))
USAGE = Start(NodeFailed(0, 2, "job w failed: rank 0 exited with code 2: unknown --model"))
CRASHED = Start(NodeFailed(0, 1, "job w failed: rank 0 exited with code 1: ValueError: x"))
STALLED = Start(NodeFailed(0, 200, "job w stalled: rank 1 waits in all_reduce"))
STRAGGLER = Start(NodeFailed(0, 202, "job w stopped for a straggler (exit 202): node 1 (pod w-1, k8s node h) ..."))
# pod recovery: node 1 failed again once it was started again alone as often as allowed
SPENT = Start(NodeFailed(1, 137, "job w failed: node 1 was killed by SIGKILL; ... not again", final=True))
AGENT_KILLED = Start(NodeFailed(1, -9, "job w failed: node 1 (rank 1) was killed by SIGKILL"))
CRASHED_AGAIN = Start(
    NodeFailed(0, 1, "job w failed: rank 0 exited with code 1: ValueError: y"),
    errors=((0, "ValueError: y"),),
    reports=(Failure(0, 0, 0, 1),),
)
LOST_NODE = Start(NodeFailed(1, -9, "job w failed: node 1 (rank 1) was killed by SIGKILL"), node_codes=((1, -9),))
PORT_TAKEN = Start(NodeFailed(0, 1, "", again="node 0 could not bind rendezvous port 5: another process took it first"))
OK = Start(None)
LEFT = "; --backoff-limit 0 turns restarts off)"


def _run(spec: JobSpec, script: Script, checkpoints: Path | None = None) -> str:
    err = io.StringIO()
    run_with_restarts(
        plan_for(spec),
        make_console(io.StringIO(), err, False),
        script,
        nodes=2,
        checkpoint_dir=checkpoints,
        timeout=None,
    )
    return err.getvalue()


def _notes(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("ddpctl: ")]


@pytest.mark.parametrize(
    ("starts", "notes"),
    [
        ([OK], []),
        (
            # a preemption does not count (as a disruption on the cluster)
            [PREEMPTED, OK],
            [
                "ddpctl: node 1 was preempted (SIGTERM); restarting all 2 nodes from scratch (no checkpoint yet) "
                "(not counted: a preemption; 3 of 3 restarts left)"
            ],
        ),
        (
            # a node whose agent was killed from outside is lost as a whole: not counted either
            [LOST_NODE, OK],
            [
                "ddpctl: node 1 was lost (its agent was killed by SIGKILL); restarting all 2 nodes from scratch "
                "(no checkpoint yet) (not counted: a lost node; 3 of 3 restarts left)"
            ],
        ),
        (
            # the runner's own failure (a port taken before node 0 bound it): started again, not counted
            [PORT_TAKEN, OK],
            [
                "ddpctl: node 0 could not bind rendezvous port 5: another process took it first; starting all "
                "2 nodes again (not counted as a restart)"
            ],
        ),
        (
            [KILLED, CRASHED, OK],
            [
                "ddpctl: node 1 was killed (SIGKILL); restarting all 2 nodes from scratch (no checkpoint yet) "
                "(restart 1 of 3, 2 left" + LEFT,
                "ddpctl: node 0 failed (exit code 1); restarting all 2 nodes from scratch (no checkpoint yet) "
                "(restart 2 of 3, 1 left" + LEFT,
            ],
        ),
        (
            # node 0 said "stopped by SIGTERM" because the supervisor stopped it: node 1's kill is the cause
            [Start(NodeFailed(1, 137, "x"), preempted=frozenset({0}), stopped=frozenset({0})), OK],
            [
                "ddpctl: node 1 was killed (SIGKILL); restarting all 2 nodes from scratch (no checkpoint yet) "
                "(restart 1 of 3, 2 left" + LEFT
            ],
        ),
        (
            # the runner names the cause in `NodeFailed.cause`: the restart line says what the final line would
            [
                Start(NodeFailed(1, 1, "x", cause="rank 1 (node 1, local rank 0) exited with code 1: E (exit code 1)")),
                OK,
            ],
            [
                "ddpctl: rank 1 (node 1, local rank 0) exited with code 1: E (exit code 1); restarting all 2 nodes "
                "from scratch (no checkpoint yet) (restart 1 of 3, 2 left" + LEFT
            ],
        ),
        (
            # node 0 lost its peer first (138); torchrun's report on node 1 names the rank SIGKILL ended
            [
                Start(
                    NodeFailed(0, 138, "x"),
                    reports=(Failure(0, 0, 0, 138), Failure(1, 1, 0, -9)),
                    peer_failed_ranks=frozenset({0}),
                ),
                OK,
            ],
            [
                "ddpctl: node 1 was killed (SIGKILL); restarting all 2 nodes from scratch (no checkpoint yet) "
                "(restart 1 of 3, 2 left" + LEFT
            ],
        ),
        (
            # a lost peer and nothing else known (the other node's report never came)
            [Start(NodeFailed(0, 138, "x")), OK],
            [
                "ddpctl: node 0 lost a peer (exit code 138); restarting all 2 nodes from scratch (no checkpoint "
                "yet) (restart 1 of 3, 2 left" + LEFT
            ],
        ),
        (
            # node 0's ranks stopped first (exit 143 after the agreed stop); node 1 is the preempted one
            [Start(NodeFailed(0, 143, "x"), preempted=frozenset({1})), OK],
            [
                "ddpctl: node 1 was preempted (SIGTERM); restarting all 2 nodes from scratch (no checkpoint yet) "
                "(not counted: a preemption; 3 of 3 restarts left)"
            ],
        ),
    ],
)
def test_a_failed_node_restarts_the_whole_group_until_it_succeeds(starts: list[Start], notes: list[str]) -> None:
    script = Script(starts)
    err = _run(JobSpec(name="w", backoff_limit=3), script)
    assert len(script.calls) == len(starts)
    assert _notes(err) == notes
    assert len({id(state) for state in script.calls}) == len(starts)  # every start reads its own output


@pytest.mark.parametrize(
    ("spec", "starts", "code", "restarts"),
    [
        (JobSpec(name="w", backoff_limit=3), [USAGE], 2, 0),  # a usage error: never retried
        (JobSpec(name="w", backoff_limit=3), [KILLED, USAGE], 2, 1),
        (JobSpec(name="w", backoff_limit=0), [PREEMPTED], 143, 0),  # the default: no retries
        (JobSpec(name="w", backoff_limit=1), [KILLED, CRASHED_AGAIN], 1, 1),  # the limit spent
        (JobSpec(name="w", target="trainjob", backoff_limit=3), [KILLED], 137, 0),  # left to its runtime
        # pytorchjob running the launcher: restartPolicy ExitCode, Kubeflow retries 130/137/138/143 only
        (JobSpec(name="w", target="pytorchjob", backoff_limit=3), [KILLED, CRASHED], 1, 1),
        (JobSpec(name="w", target="pytorchjob", backoff_limit=3), [PREEMPTED, STALLED], 200, 1),
        (JobSpec(name="w", target="pytorchjob", backoff_limit=3), [AGENT_KILLED, CRASHED], 1, 1),  # -9 is 137
        (JobSpec(name="w", backoff_limit=3), [STALLED, CRASHED, AGENT_KILLED, KILLED], 137, 3),  # job: all count
        (JobSpec(name="w", backoff_limit=0), [LOST_NODE], 1, 0),  # a lost node needs a restart to be allowed
        # --stragglers fail: ends the job at once on every target, like a usage error
        (JobSpec(name="w", backoff_limit=3), [STRAGGLER], 202, 0),
        (JobSpec(name="w", backoff_limit=3), [SPENT], 137, 0),  # no whole-group restart after it either
        (JobSpec(name="w", backoff_limit=3), [KILLED, STRAGGLER], 202, 1),
        (JobSpec(name="w", target="jobset", backoff_limit=3), [STRAGGLER], 202, 0),
        (JobSpec(name="w", target="pytorchjob", backoff_limit=3), [STRAGGLER], 202, 0),
    ],
)
def test_what_ends_the_job(spec: JobSpec, starts: list[Start], code: int, restarts: int) -> None:
    script = Script(starts)
    with pytest.raises(JobFailed) as failed:
        _run(spec, script)
    assert failed.value.exit_code == code
    assert len(script.calls) == restarts + 1 == len(starts)
    assert str(failed.value) == starts[-1].failed.message  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "starts",
    [
        [CRASHED_AGAIN, CRASHED_AGAIN],  # the same rank, code and error line
        [KILLED, KILLED],  # the same node killed the same way
        [STALLED, STALLED],  # the same stall (the runners add the summary's location)
    ],
)
def test_the_same_failure_twice_is_not_retried(starts: list[Start]) -> None:
    script = Script(starts)
    with pytest.raises(JobFailed) as failed:
        _run(JobSpec(name="w", backoff_limit=3), script)
    assert len(script.calls) == 2
    assert str(failed.value) == f"{starts[-1].failed.message}; the same failure twice: not retried"  # type: ignore[union-attr]


def test_a_different_failure_after_a_restart_is_retried() -> None:
    script = Script([CRASHED, CRASHED_AGAIN, OK])
    _run(JobSpec(name="w", backoff_limit=3), script)
    assert len(script.calls) == 3


def test_free_starts_are_capped() -> None:
    from ddpctl.runners.supervise import MAX_FREE_STARTS

    script = Script([PREEMPTED] * (MAX_FREE_STARTS + 2))
    with pytest.raises(JobFailed):
        _run(JobSpec(name="w", backoff_limit=1), script)
    assert len(script.calls) == MAX_FREE_STARTS + 2  # then one counted restart, then the same failure twice


def test_the_restart_note_names_the_step_of_the_newest_checkpoint(tmp_path: Path) -> None:
    for name in ("ckpt-00000003.pt", "ckpt-00000005.pt", ".ckpt-00000006.pt.tmp.7", "final.pt", "held"):
        (tmp_path / name).write_bytes(b"")
    err = _run(JobSpec(name="w", backoff_limit=3), Script([PREEMPTED, OK]), checkpoints=tmp_path)
    assert _notes(err) == [
        "ddpctl: node 1 was preempted (SIGTERM); restarting all 2 nodes from step 5 (not counted: a preemption; "
        "3 of 3 restarts left)"
    ]


def test_the_clock_of_the_job_starts_with_its_first_start() -> None:
    script = Script([KILLED, OK])
    _run(JobSpec(name="w", backoff_limit=3), script)
    assert script.calls[0].started == script.calls[1].started


def test_the_timeout_left_is_handed_to_each_start() -> None:
    seen: list[float | None] = []
    outcomes = iter([KILLED.failed, None])

    def start_group(state: JobState, timeout: float | None) -> NodeFailed | None:
        seen.append(timeout)
        return next(outcomes)

    run_with_restarts(
        plan_for(JobSpec(name="w", backoff_limit=3)),
        make_console(io.StringIO(), io.StringIO(), False),
        start_group,
        nodes=2,
        checkpoint_dir=None,
        timeout=600,
    )
    assert len(seen) == 2 and all(t is not None and 1.0 <= t <= 600 for t in seen)
    assert seen[1] <= seen[0]  # type: ignore[operator]


def test_restarts_phrase() -> None:
    from ddpctl.runners.supervise import restarts_phrase

    assert restarts_phrase(1, 3) == "restart 1 of 3, 2 left; --backoff-limit 0 turns restarts off"
    assert restarts_phrase(3, 3).startswith("restart 3 of 3, 0 left")


@pytest.mark.parametrize(("code", "exit_code"), [(2, 2), (137, 137), (0, 1), (-9, 1)])
def test_a_failed_job_never_exits_0_or_with_a_negative_code(code: int, exit_code: int) -> None:
    assert JobFailed("x", code).exit_code == exit_code


# ------------------------------------------------------------------------------ run_job with real children


class Shell(Launcher):
    """Each node a `sh -c SCRIPT` child started as the runners start theirs (procs.start_child):
    real processes and pipes, no torchrun. `scripts[attempt][node]` is the script of that start of
    node `node`; `INTERRUPT` raises a Ctrl-C while the group starts."""

    def __init__(self, plan: Plan, run_dir: Path, scripts: list[list[str]]) -> None:
        self.plan, self.run_dir, self.scripts = plan, run_dir, scripts
        self.calls: list[str] = []
        self.children: list[Child] = []

    def setup(self) -> None:
        self.calls.append("setup")

    def teardown(self) -> list[str]:
        self.calls.append("teardown")
        return []

    def start_node(self, index: int, attempt: int) -> Child:
        script = self.scripts[attempt][index]
        if script == INTERRUPT:
            raise KeyboardInterrupt
        child = procs.start_child(
            index,
            f"node {index}",
            ["sh", "-c", script],
            {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            log_path=node_log(self.run_dir, index, attempt),
        )
        self.children.append(child)
        return child

    def stop(self, children: list[Child]) -> None:
        procs.stop_children([c for c in children if c.poll() is None], grace_s=5)

    def after_start(self) -> None:
        self.calls.append("after_start")

    def node_failed(self, state: JobState, failed: Child) -> NodeFailed | None:
        return node_failed(state, failed.index, failed.returncode or 1, self.plan, "logs in here")

    def timed_out(self, timeout: float | None) -> WaitTimeout:
        return WaitTimeout(f"job w was still running after --timeout {timeout}")


INTERRUPT = "<ctrl-c>"
SAY = "echo '" + RANK_MARK + "{rank}@@{text}'"
# what ddpctl's launcher prints when its worker failed (torchrun's failure report), then its exit
REPORT = (
    "printf '%s\\n' ===== 'Root Cause (first observed failure):' '  rank : {rank} (local_rank: 0)' "
    "'  exitcode : {code} (pid: 1)' =====; exit {code}"
)


def _run_job(tmp_path: Path, scripts: list[list[str]], *, backoff_limit: int = 0, timeout: float | None = None):
    plan = plan_for(JobSpec(name="w", nodes=2, procs_per_node=1, backoff_limit=backoff_limit))
    run_dir = tmp_path / "ddp-runs" / "w"
    launcher = Shell(plan, run_dir, scripts)
    out, err = io.StringIO(), io.StringIO()
    record = RunRecord(run_dir, plan, Where.local, "2 nodes x 1 process", None)
    outcome: BaseException | int
    try:
        outcome = run_job(
            plan,
            launcher,
            make_console(out, err, False),
            record=record,
            checkpoint_dir=None,
            cwd=tmp_path,
            logs=run_dir / "logs",
            timeout=timeout,
        )
    except (JobFailed, WaitTimeout, Interrupted) as exc:
        outcome = exc
    recorded = json.loads((run_dir / "run.json").read_text())
    return outcome, launcher, out.getvalue(), err.getvalue(), recorded


def test_run_job_streams_every_ranks_lines_logs_them_and_records_the_success(tmp_path: Path) -> None:
    scripts = [[SAY.format(rank=0, text="hello from 0"), SAY.format(rank=1, text="hello from 1") + "; echo agent"]]
    outcome, launcher, out, err, recorded = _run_job(tmp_path, scripts)
    assert outcome == 0
    assert sorted(out.splitlines()) == ["[node 1] agent", "[rank 0] hello from 0", "[rank 1] hello from 1"]
    logs = tmp_path / "ddp-runs" / "w" / "logs"
    assert (logs / "node-1.log").read_text() == "[rank 1] hello from 1\nagent\n"  # the marker as `[rank R] `
    assert launcher.calls == ["setup", "after_start", "teardown"]
    assert recorded["state"] == "succeeded" and recorded["attempt"] == 0
    assert [(n["node"], n["phase"]) for n in recorded["nodeStates"]] == [(0, "Succeeded"), (1, "Succeeded")]
    assert "ddpctl: w succeeded in " in err


def test_every_line_is_shown_when_more_are_queued_than_one_turn_takes() -> None:
    """A turn shows at most MAX_LINES_A_TURN queued lines, and none is dropped at that bound. The
    first line is shown only once the child has exited, so all its output waits in the queue."""
    lines = MAX_LINES_A_TURN * 2 + 7
    child = procs.start_child(0, "node 0", ["seq", str(lines)], {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    shown: list[str] = []

    def show(c: Child, text: str) -> None:
        if not shown:
            c.popen.wait()
        shown.append(text)

    supervise(lambda: [child], JobState("w", 1, 1), make_console(io.StringIO(), io.StringIO(), False), show=show,
              stop=lambda cs: None, timeout=30)  # fmt: skip
    assert shown == [str(i) for i in range(1, lines + 1)]


def test_run_job_restarts_the_group_after_a_failed_node_and_keeps_each_starts_logs(tmp_path: Path) -> None:
    crash = SAY.format(rank=1, text="ValueError: boom") + "; " + REPORT.format(rank=1, code=1)
    scripts = [["exit 0", crash], [SAY.format(rank=0, text="again"), "exit 0"]]
    outcome, launcher, _, err, recorded = _run_job(tmp_path, scripts, backoff_limit=1)
    assert outcome == 0
    assert launcher.calls == ["setup", "after_start", "after_start", "teardown"]
    notes = [line for line in err.splitlines() if "restarting" in line]
    assert notes == [
        "ddpctl: rank 1 (node 1, local rank 0) exited with code 1: ValueError: boom (exit code 1); restarting all 2 "
        "nodes from scratch (no checkpoint yet) (restart 1 of 1, 0 left; --backoff-limit 0 turns restarts off)"
    ]
    logs = tmp_path / "ddp-runs" / "w" / "logs"
    assert (logs / "node-1.log").read_text().startswith("[rank 1] ValueError: boom\n=====\nRoot Cause")
    assert (logs / "node-0.restart-1.log").read_text() == "[rank 0] again\n"
    assert recorded["state"] == "succeeded" and recorded["attempt"] == 1


def test_run_job_records_a_failure_it_does_not_retry(tmp_path: Path) -> None:
    usage = SAY.format(rank=0, text="ddpctl-trainer: error: unknown --model x") + "; " + REPORT.format(rank=0, code=2)
    outcome, launcher, _, _, recorded = _run_job(tmp_path, [[usage, "exit 0"]], backoff_limit=3)
    assert isinstance(outcome, JobFailed) and outcome.exit_code == 2
    assert str(outcome) == (
        "job w failed: rank 0 (node 0, local rank 0) exited with code 2: unknown --model x (exit code 2; logs in here)"
    )
    assert recorded["state"] == "failed" and recorded["message"] == str(outcome)
    assert launcher.calls == ["setup", "after_start", "teardown"]


def test_run_job_stops_the_group_at_its_timeout(tmp_path: Path) -> None:
    outcome, launcher, _, err, recorded = _run_job(tmp_path, [["exec sleep 60", "exec sleep 60"]], timeout=0.2)
    assert isinstance(outcome, WaitTimeout) and str(outcome) == "job w was still running after --timeout 0.2"
    assert "ddpctl: stopping node 0, node 1" in err
    assert all(child.poll() is not None for child in launcher.children)
    assert recorded["state"] == "timed out"


def test_a_ctrl_c_while_the_group_starts_stops_the_nodes_already_started(tmp_path: Path) -> None:
    outcome, launcher, _, err, recorded = _run_job(tmp_path, [["exec sleep 60", INTERRUPT]])
    assert isinstance(outcome, Interrupted)
    assert str(outcome) == "w interrupted before its first checkpoint; run the same command to start it again"
    assert len(launcher.children) == 1 and launcher.children[0].poll() is not None  # node 0 is gone
    assert "ddpctl: stopping w: interrupted" in err
    assert recorded["state"] == "interrupted" and launcher.calls == ["setup", "after_start", "teardown"]


class Replacing(Shell):
    """Node 1 fails once and is started again alone (`replace_node`), as pod recovery does; its
    peer keeps running until the replacement has said its line (a file, not a sleep)."""

    def __init__(self, plan: Plan, run_dir: Path, flag: Path) -> None:
        survivor = f"while [ ! -e {flag} ]; do :; done; " + SAY.format(rank=0, text="still here")
        super().__init__(plan, run_dir, [[survivor, "exit 137"]])
        self.flag = flag
        self.replaced: list[int] = []

    def replace_node(self, failed: Child, state: JobState) -> Child | None:
        if self.replaced:
            return None
        self.replaced.append(failed.index)
        child = procs.start_child(
            failed.index,
            f"node {failed.index}",
            ["sh", "-c", SAY.format(rank=0, text="replacement") + f"; touch {self.flag}"],
            {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        child.rank_base = 1  # its torchrun numbers its ranks from 0: rank 0 there is rank 1 here
        return child


def test_a_node_started_again_alone_takes_the_failed_ones_place(tmp_path: Path) -> None:
    plan = plan_for(JobSpec(name="w", nodes=2, procs_per_node=1))
    run_dir = tmp_path / "ddp-runs" / "w"
    launcher = Replacing(plan, run_dir, tmp_path / "replaced")
    out, err = io.StringIO(), io.StringIO()
    outcome = run_job(
        plan,
        launcher,
        make_console(out, err, False),
        record=RunRecord(run_dir, plan, Where.local, "2 nodes x 1 process", None),
        checkpoint_dir=None,
        cwd=tmp_path,
        logs=run_dir / "logs",
        timeout=60,
    )
    assert outcome == 0, err.getvalue()
    assert launcher.replaced == [1] and launcher.calls == ["setup", "after_start", "teardown"]  # no group restart
    assert sorted(out.getvalue().splitlines()) == ["[rank 0] still here", "[rank 1] replacement"]
