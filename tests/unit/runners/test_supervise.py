"""The restart loop `run --local` and `run --docker` share (`supervise.run_with_restarts`), driven
by scripted starts of the group (no processes): what is restarted, how often, what the console
says, and what ends the job. The real runs are in test_run_local.py and test_run_docker.py."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ddpctl.console import make_console
from ddpctl.engines import plan_for
from ddpctl.runners.failures import NodeFailed
from ddpctl.runners.state import Failure, JobState
from ddpctl.runners.supervise import JobFailed, run_with_restarts
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


@pytest.mark.parametrize(
    ("attempt", "name"), [(0, "node-1.log"), (1, "node-1.restart-1.log"), (3, "node-1.restart-3.log")]
)
def test_each_start_of_the_group_logs_to_its_own_file(attempt: int, name: str) -> None:
    """A restart must not overwrite the logs of the start that failed (they say why)."""
    from ddpctl.runners.supervise import attempt_log

    assert attempt_log(Path("logs") / "node-1.log", attempt) == Path("logs") / name


def test_a_rank_that_only_lost_its_peer_is_not_the_cause() -> None:
    """Rank 0 exited 138 a second before rank 3 crashed (its peer's connection broke first): the
    crash is the cause, whatever the times say."""
    from ddpctl.runners.failures import cause_of_failure

    state = JobState("job", 2, 4)
    state.failures += [Failure(0, 0, 0, 138, time="10:00:01", root_cause=True), Failure(1, 3, 1, 1, time="10:00:02")]
    assert cause_of_failure(state, 0, 138) == (1, 1, False)


@pytest.mark.parametrize(
    ("failures", "node_codes", "stopped", "waited", "finished"),
    [
        # rank 2 aborted at exit while ranks 0 and 1 (nodes 0, 1) exited 0: the work was done
        ([Failure(2, 2, 0, -6)], {0: 0, 1: 0, 2: 1}, set(), set(), True),
        ([Failure(2, 2, 0, -11)], {0: 0, 1: 0, 2: 1}, set(), set(), True),  # SIGSEGV the same
        ([Failure(2, 2, 0, 1)], {0: 0, 1: 0, 2: 1}, set(), set(), False),  # an exception: the script's own failure
        ([Failure(2, 2, 0, -6)], {0: 0, 1: 138, 2: 1}, set(), set(), False),  # another node failed
        ([Failure(2, 2, 0, -6)], {0: 0, 1: -15, 2: 1}, {1}, set(), False),  # another node's workers still ran
        # nodes stopped while their agents waited in torchrun's exit barrier, every worker done
        ([Failure(2, 2, 0, -6)], {0: -15, 1: -15, 2: 1}, {0, 1}, {0, 1}, True),
        ([Failure(0, 0, 0, -6)], {0: 1}, set(), set(), False),  # a job of one rank: nobody vouches for its work
    ],
)
def test_a_rank_killed_at_exit_after_every_other_finished(
    failures: list[Failure], node_codes: dict[int, int], stopped: set[int], waited: set[int], finished: bool
) -> None:
    from ddpctl.runners.failures import died_after_finishing

    state = JobState("w", len(node_codes), max(len(node_codes), 1))
    state.failures += failures
    state.node_codes.update(node_codes)
    state.stopped |= stopped
    state.finished_nodes |= waited
    assert bool(died_after_finishing(state)) is finished


@pytest.mark.parametrize(
    ("node", "line", "taken"),
    [
        (
            0,
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
            True,
        ),
        (1, "... name: EADDRINUSE, message: address already in use", False),  # only node 0 binds the port
        (0, "ddpctl-trainer.launch: workers failed; exit 1", False),
    ],
)
def test_node_0_failing_to_bind_its_port_is_the_runners_problem(node: int, line: str, taken: bool) -> None:
    state = JobState("w", 2, 4)
    state.on_node_line(node, line)
    assert state.port_taken is taken


def test_each_start_gets_its_port_and_a_rendezvous_id_of_its_own() -> None:
    from ddpctl.runners.local import plan_local
    from ddpctl.runners.node_env import start_env

    plan = plan_local(JobSpec(name="w", nodes=2, procs_per_node=1, gpus_per_node=0), cwd=Path.cwd())
    env = start_env(plan.nodes[1].env, 40123, "w-abcd-1")
    assert env["PET_MASTER_PORT"] == "40123" and env["PET_RDZV_ID"] == "w-abcd-1"
    assert env["PET_MASTER_ADDR"] == "127.0.0.1"
    elastic = plan_local(JobSpec(name="w", nodes=2, min_nodes=1, max_nodes=2, gpus_per_node=0), cwd=Path.cwd())
    env = start_env(elastic.nodes[0].env, 40124, "w-abcd-0")
    assert env["PET_RDZV_ENDPOINT"] == "127.0.0.1:40124" and env["PET_RDZV_ID"] == "w-abcd-0"


def test_a_crashed_rank_that_torchrun_stopped_on_its_way_out_is_still_the_cause() -> None:
    """Rank 3 raised, then its peer on the same node lost it (138) first and torchrun SIGTERMed rank
    3 before it exited 1: the crash is still named, and it is the same failure as a plain exit 1."""
    from ddpctl.runners.failures import describe_failure, failure_signature

    def state(rank3_code: int) -> JobState:
        s = JobState("w", 2, 4)
        s.failures += [Failure(1, 2, 0, 138, root_cause=True), Failure(1, 3, 1, rank3_code)]
        s.on_rank_line(3, "ddpctl-trainer: error: [rank 3] unexpected ValueError: boom")
        s.on_rank_line(2, "ddpctl-trainer: error: [rank 2] lost a peer during x: a collective failed because y")
        return s

    stopped = state(-15)
    assert describe_failure(stopped, 1, 138, range(2, 4)) == (
        "job w failed: rank 3 (node 1, local rank 1) failed: unexpected ValueError: boom (then stopped by "
        "SIGTERM); rank 2 only lost its peer"
    )
    assert failure_signature(stopped, 1, 138) == failure_signature(state(1), 1, 1)
