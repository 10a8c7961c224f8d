"""ddpctl.runners.failures: what a failed start of a local job means (which rank or node caused it,
the one line that says so, whether two failures are the same one) and the notes a run ends with,
from `JobState`s filled as the runners fill them."""

from __future__ import annotations

import errno
import io
from pathlib import Path

import pytest

from ddpctl.console import make_console
from ddpctl.engines import plan_for
from ddpctl.errors import RuntimeFailure, UsageError
from ddpctl.runners.failures import (
    after_finishing_note,
    blamed_node,
    cause_of_failure,
    describe_failure,
    died_after_finishing,
    failure_code,
    failure_signature,
    finish_note,
    interrupted_note,
    lost_nodes,
    node_failed,
    root_cause,
    signal_name,
    start_failure,
)
from ddpctl.runners.state import PREEMPTED_AGENT, Failure, JobState
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol

ERROR = protocol.ERROR_TAG
STALL = protocol.STALL_SUMMARY_TAG
STALL_LINES = [
    f"{STALL} no rank made progress for 6 s (--stall-timeout 6); stopping the job (exit code 200)",
    f"{STALL} rank 2 (node 1, local rank 0, host h) stopped 7 s ago in forward of step 3:",
    f"{STALL}     at /m.py:54 in hook: threading.Event().wait()",
    f"{STALL} ranks 0, 1, 3 (nodes 0, 1) wait for it in backward+all-reduce of step 3 (for 7 s)",
]
STALLED = (
    "rank 2 (node 1, local rank 0, host h) stopped 7 s ago in forward of step 3 at /m.py:54 in hook; "
    "ranks 0, 1, 3 (nodes 0, 1) wait for it in backward+all-reduce of step 3 (for 7 s)"
)


def state_of(
    failures: list[Failure] = (),  # type: ignore[assignment]
    errors: dict[int, str] | None = None,
    node_codes: dict[int, int] | None = None,
    nodes: int = 2,
    world: int = 4,
) -> JobState:
    state = JobState("w", nodes, world)
    state.failures += failures
    state.last_error.update(errors or {})
    state.node_codes.update(node_codes or {})
    return state


@pytest.mark.parametrize(
    ("code", "name"), [(-9, "SIGKILL"), (-15, "SIGTERM"), (-6, "SIGABRT"), (-11, "SIGSEGV"), (-99, "signal 99")]
)
def test_signal_name(code: int, name: str) -> None:
    assert signal_name(code) == name


@pytest.mark.parametrize(("lines", "code"), [([], 1), (STALL_LINES, protocol.EXIT_STALLED)])
def test_a_job_the_watchdog_stopped_ends_with_the_stall_code(lines: list[str], code: int) -> None:
    state = state_of()
    state.stall_lines += lines
    assert failure_code(state, 1) == code


def test_lost_nodes_are_those_killed_from_outside_with_no_worker_report() -> None:
    state = state_of(
        failures=[Failure(3, 6, 0, -9)],
        node_codes={0: 0, 1: -9, 2: -15, 3: -9, 4: 1},
        nodes=5,
        world=10,
    )
    state.stopped.add(2)  # the supervisor stopped it: not lost
    assert lost_nodes(state) == [1]  # node 3's workers reported: its failure is known


@pytest.mark.parametrize(
    ("failures", "errors", "rank"),
    [
        ([], {}, None),
        # a rank killed by a signal comes before an exception
        ([Failure(0, 0, 0, 1, time="10:00:01"), Failure(1, 2, 0, -9, time="10:00:02")], {}, 2),
        # torchrun's root cause before another failure of the same kind
        ([Failure(0, 1, 1, 1, time="10:00:01"), Failure(1, 3, 1, 1, time="10:00:01", root_cause=True)], {}, 3),
        # the earliest
        ([Failure(1, 3, 1, 1, time="10:00:02"), Failure(0, 1, 1, 1, time="10:00:01")], {}, 1),
        # a rank torchrun stopped (SIGTERM) while it died of its own error is no kill: the root cause comes first
        ([Failure(0, 0, 0, -15, time="10:00:01"), Failure(0, 1, 1, 1, time="10:00:01", root_cause=True)],
         {0: "ValueError: bad batch on rank 0", 1: "ValueError: bad batch on rank 1"}, 1),
        # a rank whose error says only that its connection to a peer broke is not the cause
        ([Failure(0, 0, 0, 1, time="10:00:01"), Failure(1, 2, 0, 1, time="10:00:02")],
         {0: "RuntimeError: Connection reset by peer"}, 2),
        # a rank that took part in the agreed stop (143) without an error of its own is not either
        ([Failure(0, 0, 0, 143), Failure(1, 2, 0, -15)], {}, None),
        # a failed preflight ends every rank with 201; rank 0, which says why, exits last and still comes first
        ([Failure(0, 1, 1, 201, time="10:00:01", root_cause=True), Failure(0, 0, 0, 201, time="10:00:02"),
          Failure(1, 2, 0, 201, time="10:00:01", root_cause=True)],
         {0: "ddpctl-trainer: error: preflight failed: slow node: node 1 (pod w-1)"}, 0),
    ],
)  # fmt: skip
def test_root_cause(failures: list[Failure], errors: dict[int, str], rank: int | None) -> None:
    found = root_cause(state_of(failures, errors))
    assert (found.rank if found else None) == rank


def test_a_rank_that_only_lost_its_peer_is_not_the_cause() -> None:
    """Rank 0 exited 138 a second before rank 3 crashed (its peer's connection broke first): the
    crash is the cause, whatever the times say."""
    state = JobState("job", 2, 4)
    state.failures += [Failure(0, 0, 0, 138, time="10:00:01", root_cause=True), Failure(1, 3, 1, 1, time="10:00:02")]
    assert cause_of_failure(state, 0, 138) == (1, 1, False)


@pytest.mark.parametrize(
    ("failures", "failed", "blamed"),
    [
        # node 0 seen first, but it only lost its peer; node 1 (a killed container) reported nothing
        ([Failure(0, 0, 0, 138), Failure(0, 1, 1, 138)], [0, 1], 1),
        ([Failure(0, 0, 0, 138), Failure(1, 2, 0, 1)], [0, 1], 1),  # node 1 failed by itself
        ([Failure(0, 0, 0, 1), Failure(1, 2, 0, 138)], [0, 1], 0),  # node 0 failed by itself: kept
        ([Failure(0, 0, 0, 138), Failure(1, 2, 0, 138)], [0, 1], 0),  # both only lost a peer: the first
        ([Failure(0, 0, 0, 138)], [0], 0),  # no other node failed by itself (the rest were stopped)
        ([], [0, 1], 0),  # node 0 reported nothing either: it died whole, first
    ],
)
def test_the_node_blamed_is_not_one_that_only_lost_its_peer(
    failures: list[Failure], failed: list[int], blamed: int
) -> None:
    """The supervisor sees the nodes fail in turn: one that lost its peer can be seen before the one
    whose container was killed (`run --docker`, `docker kill`), which reports nothing."""
    assert blamed_node(state_of(failures), 0, failed) == blamed


@pytest.mark.parametrize(
    ("preempted", "stopped", "node_codes", "agent_errors", "failures", "cause"),
    [
        ({1}, set(), {}, {}, [], (1, protocol.EXIT_PREEMPTED, True)),  # an agent that got SIGTERM
        ({0, 1}, {0}, {}, {}, [], (1, protocol.EXIT_PREEMPTED, True)),  # ... not one the supervisor stopped
        (set(), set(), {0: 1, 1: -9}, {}, [], (1, -9, False)),  # a node lost as a whole
        (set(), set(), {}, {0: "RuntimeError: x"}, [Failure(1, 3, 1, 1)], (0, 7, False)),  # its agent died first
        (set(), set(), {}, {}, [Failure(1, 3, 1, 1)], (1, 1, False)),  # the rank torchrun blames
        (set(), set(), {}, {}, [], (0, 7, False)),  # nothing known: the node seen to fail
    ],
)
def test_cause_of_failure(
    preempted: set[int],
    stopped: set[int],
    node_codes: dict[int, int],
    agent_errors: dict[int, str],
    failures: list[Failure],
    cause: tuple[int, int, bool],
) -> None:
    state = state_of(failures, node_codes=node_codes)
    state.preempted |= preempted
    state.stopped |= stopped
    state.agent_errors.update(agent_errors)
    assert cause_of_failure(state, 0, 7) == cause


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
        # torchrun SIGTERMed rank 3 after rank 2, on its node, aborted at exit: still the work was done
        ([Failure(1, 2, 0, -6, root_cause=True), Failure(1, 3, 1, -15)], {0: 0, 1: 1, 2: 0}, set(), set(), True),
        # ... but not a SIGTERM that came first, nor one on a node where nobody aborted
        ([Failure(1, 2, 0, -6), Failure(1, 3, 1, -15, root_cause=True)], {0: 0, 1: 1, 2: 0}, set(), set(), False),
        ([Failure(1, 2, 0, -6), Failure(2, 4, 0, -15)], {0: 0, 1: 1, 2: 1}, set(), set(), False),
    ],
)
def test_a_rank_killed_at_exit_after_every_other_finished(
    failures: list[Failure], node_codes: dict[int, int], stopped: set[int], waited: set[int], finished: bool
) -> None:
    state = JobState("w", len(node_codes), max(len(node_codes), 1))
    state.failures += failures
    state.node_codes.update(node_codes)
    state.stopped |= stopped
    state.finished_nodes |= waited
    assert bool(died_after_finishing(state)) is finished


def test_a_stalled_job_never_died_after_finishing() -> None:
    state = state_of([Failure(1, 2, 0, -6)], node_codes={0: 0, 1: 1})
    state.stall_lines += STALL_LINES
    assert died_after_finishing(state) == []


def test_the_after_finishing_note_names_each_rank_and_its_signal() -> None:
    note = after_finishing_note([Failure(2, 5, 1, -6), Failure(3, 7, 1, -11)])
    assert note.startswith(
        "killed at exit: rank 5 (node 2) by SIGABRT, rank 7 (node 3) by SIGSEGV, after every other rank had finished, "
        "so the work was done; not restarting."
    )


# ------------------------------------------------------------------------------ describe_failure


@pytest.mark.parametrize(
    ("state", "node", "code", "ranks", "line"),
    [
        pytest.param(
            state_of(node_codes={1: -9}), 1, -9, range(2, 4),
            "job w failed: node 1 (ranks 2-3) was killed by SIGKILL", id="a-node-killed-as-a-whole",
        ),
        pytest.param(
            state_of(), 1, 137, range(2, 3),
            "job w failed: node 1 (rank 2) was killed by SIGKILL", id="a-container-exit-code-above-128",
        ),
        pytest.param(
            state_of(), 0, 3, range(2),
            "job w failed: node 0 (ranks 0-1) exited with code 3", id="no-report-at-all",
        ),
        pytest.param(
            state_of([Failure(0, 1, 1, 1)], {1: "[rank1]: ValueError: boom"}), 0, 1, range(2),
            "job w failed: rank 1 (node 0, local rank 1) exited with code 1: ValueError: boom",
            id="a-crash-with-torchs-prefix-dropped",
        ),
        pytest.param(
            state_of([Failure(0, 0, 0, 2)], {0: f"{ERROR}[rank 0] unknown --model 'x'"}), 0, 2, range(2),
            "job w failed: rank 0 (node 0, local rank 0) exited with code 2: unknown --model 'x'",
            id="the-trainers-tag-dropped",
        ),
        pytest.param(
            state_of(
                [Failure(0, 1, 1, 1, time="10:00:01"), Failure(1, 2, 0, 138), Failure(1, 3, 1, 1, time="10:00:02"),
                 Failure(0, 0, 0, -15)],
                {1: "ValueError: first", 3: "KeyError: second"},
            ),
            0, 1, range(2),
            "job w failed: rank 1 (node 0, local rank 1) exited with code 1: ValueError: first; rank 3 failed too; "
            "rank 2 only lost its peer; rank 0 stopped after it",
            id="the-first-crash-and-what-the-others-did",
        ),
        pytest.param(
            state_of([Failure(0, 1, 1, -6)], {1: "terminate called without an active exception"}), 0, 1, range(2),
            'job w failed: rank 1 (node 0, local rank 1) was killed by SIGABRT ("terminate called without an active '
            'exception" at exit: the process group was still alive; end the script with '
            "torch.distributed.destroy_process_group(), with the DDP model already gone: train inside a "
            "function, as PyTorch's DDP tutorial does)",
            id="a-script-without-destroy_process_group",
        ),
    ],
)  # fmt: skip
def test_describe_failure(state: JobState, node: int, code: int, ranks: range, line: str) -> None:
    assert describe_failure(state, node, code, ranks) == line


def test_a_node_whose_agent_died_is_described_with_the_agents_error() -> None:
    state = state_of(node_codes={1: 1})
    state.agent_errors[1] = "RuntimeError: the store at 127.0.0.1:5 could not be reached"
    assert describe_failure(state, 1, 1, range(2, 4)) == (
        "job w failed: node 1 (ranks 2-3) exited with code 1: RuntimeError: the store at 127.0.0.1:5 could not be "
        "reached"
    )


def test_a_stalled_job_is_described_by_its_summary() -> None:
    state = state_of([Failure(0, 0, 0, 200)])
    state.stall_lines += STALL_LINES
    assert describe_failure(state, 0, 200, range(2)) == f"job w stalled: {STALLED}"


def test_a_long_error_is_cut_short() -> None:
    state = state_of([Failure(0, 0, 0, 1)], {0: "ValueError: " + "x" * 400})
    line = describe_failure(state, 0, 1, range(2))
    error = line.split("exited with code 1: ", 1)[1]
    assert len(error) == 300 and error.endswith("...")


def test_a_crashed_rank_that_torchrun_stopped_on_its_way_out_is_still_the_cause() -> None:
    """Rank 3 raised, then its peer on the same node lost it (138) first and torchrun SIGTERMed rank
    3 before it exited 1: the crash is still named, and it is the same failure as a plain exit 1."""

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


@pytest.mark.parametrize(
    "line", [protocol.STOPPED_BY_SIGTERM, f"{protocol.STOPPED_BY_SIGTERM} to another rank after step 4; checkpoint x"]
)
def test_a_rank_the_trainer_says_sigterm_stopped_is_not_the_cause(line: str) -> None:
    """Rank 3 raised; torchrun's stop reached rank 1 on the other node, whose trainer said it was
    stopped by SIGTERM and exited 143, and whose report came first: the crash is the cause."""
    state = state_of(
        [Failure(0, 1, 1, 143, time="10:00:01", root_cause=True), Failure(1, 3, 1, 1, time="10:00:02")],
        {1: f"{ERROR}[rank 1] {line}", 3: f"{ERROR}[rank 3] unexpected ValueError: boom"},
    )
    assert root_cause(state) == Failure(1, 3, 1, 1, time="10:00:02")
    assert describe_failure(state, 1, 1, range(2, 4)) == (
        "job w failed: rank 3 (node 1, local rank 1) exited with code 1: unexpected ValueError: boom; "
        "rank 1 stopped after it"
    )


def test_a_preempted_agents_line_is_no_error_of_the_rank() -> None:
    """A rank whose last line is the launcher's `stopped by SIGTERM` took part in the stop."""
    state = state_of([Failure(0, 0, 0, -15), Failure(1, 2, 0, 1)], {0: PREEMPTED_AGENT, 2: "OSError: disk"})
    assert root_cause(state) == Failure(1, 2, 0, 1)


# ------------------------------------------------------------------------------ failure_signature


@pytest.mark.parametrize(
    ("state", "node", "code", "signature"),
    [
        (state_of([Failure(0, 1, 1, 1)], {1: "ValueError: x"}), 0, 1, ("rank", 1, "ValueError: x")),
        (state_of([Failure(0, 1, 1, -9)]), 0, -9, ("rank", 1, -9)),
        (state_of(node_codes={1: -9}), 1, -9, ("node", 1, -9, None)),
    ],
)
def test_failure_signature(state: JobState, node: int, code: int, signature: tuple[object, ...]) -> None:
    assert failure_signature(state, node, code) == signature


def test_the_signature_of_a_stall_is_where_it_stalled() -> None:
    one, other = state_of([Failure(0, 0, 0, 200)]), state_of([Failure(1, 3, 1, 200)])
    one.stall_lines += STALL_LINES
    other.stall_lines += STALL_LINES
    assert failure_signature(one, 0, 200) == failure_signature(other, 1, 200) == ("stalled", STALLED)


# ------------------------------------------------------------------------------ starting a process


@pytest.mark.parametrize(
    ("exc", "user_command", "kind", "message"),
    [
        (FileNotFoundError(errno.ENOENT, "No such file or directory"), True, UsageError,
         "command: train was not found (No such file or directory); give an executable on PATH or its path in "
         "--command"),
        (PermissionError(errno.EACCES, "Permission denied"), True, UsageError,
         "command: train is not executable (Permission denied); give an executable on PATH or its path in --command"),
        (OSError(errno.ENOEXEC, "Exec format error"), True, UsageError,
         "command: train is not executable (Exec format error); give an executable on PATH or its path in --command"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory"), False, RuntimeFailure,
         "could not start node 0 (train): No such file or directory"),
        (OSError(errno.ENOMEM, "Cannot allocate memory"), True, RuntimeFailure,
         "could not start node 0 (train): Cannot allocate memory"),
    ],
)  # fmt: skip
def test_a_process_that_cannot_start(exc: OSError, user_command: bool, kind: type, message: str) -> None:
    error = start_failure(["train", "--x"], exc, user_command=user_command, what="node 0")
    assert type(error) is kind and str(error) == message


def test_node_failed_names_the_node_that_caused_it_and_its_own_code() -> None:
    """Node 0 was seen to fail first (it lost its peer, 138); node 1's rank crashed: that node, its
    code and its error decide the restart, and end the message."""
    plan = plan_for(JobSpec(name="w", nodes=2, procs_per_node=2))
    state = state_of([Failure(0, 0, 0, 138), Failure(1, 3, 1, 1)], {3: "ValueError: x"}, node_codes={0: 138, 1: 1})
    failed = node_failed(state, 0, 138, plan, "logs in ddp-runs/w/logs")
    assert (failed.node, failed.code) == (1, 1)
    assert failed.message == (
        "job w failed: rank 3 (node 1, local rank 1) exited with code 1: ValueError: x; rank 0 only lost its peer "
        "(exit code 1; logs in ddp-runs/w/logs)"
    )
    assert failed.cause == (
        "rank 3 (node 1, local rank 1) exited with code 1: ValueError: x; rank 0 only lost its peer (exit code 1)"
    )
    assert failed.again is None


def test_node_failed_of_a_stall_ends_with_the_stall_code() -> None:
    plan = plan_for(JobSpec(name="w", nodes=2, procs_per_node=2))
    state = state_of([Failure(0, 0, 0, 1)], node_codes={0: 1})
    state.stall_lines += STALL_LINES
    failed = node_failed(state, 0, 1, plan, "logs in x")
    assert failed.code == protocol.EXIT_STALLED
    assert failed.message == f"job w stalled: {STALLED} (exit code 200; logs in x)"
    assert failed.cause == f"stalled: {STALLED} (exit code 200)"


NAMED = (
    "ddpctl-trainer: straggler: node 1 (pod w-1, k8s node {k8s}): own work 61.2 ms a step (rank 2), 0.48 x the "
    "median speed (29.5 ms; tolerance 0.6) for 3 windows of 10 steps, since step 41"
)
STOPPED = (
    "ddpctl-trainer: error: straggler: node 1 (pod w-1, k8s node {k8s}) below 0.6 x the median speed since step 41; "
    "stopping (exit 202, --stragglers fail)"
)
TEXT = "node 1 (pod w-1, k8s node {k8s}): own work 61.2 ms a step (rank 2), 0.48 x the median speed (29.5 ms; tolerance 0.6) for 3 windows of 10 steps, since step 41"  # noqa: E501


@pytest.mark.parametrize(
    ("rank0", "errors", "said"),
    [
        # a local run: every node on this machine, so no avoid hint; the line names the node
        (
            [NAMED.format(k8s="h")],
            {r: STOPPED.format(k8s="h") for r in range(4)},
            f"{TEXT.format(k8s='h')}; the other pods ran on k8s node h too, so --avoid-node h would move the whole "
            "job, not the straggler alone",
        ),
        # with an avoid hint (the other pods ran elsewhere): the command to resubmit away from it
        (
            [NAMED.format(k8s="w2") + "; avoid it: --avoid-node w2"],
            {},
            f"{TEXT.format(k8s='w2')}; resubmit away from it: ddpctl submit ... --avoid-node w2",
        ),
        # rank 0's line not seen: the error line names the node
        (
            [],
            {2: STOPPED.format(k8s="w2") + "; resubmit with --avoid-node w2"},
            "node 1 (pod w-1, k8s node w2) below 0.6 x the median speed since step 41; stopping (exit 202, "
            "--stragglers fail); resubmit away from it: ddpctl submit ... --avoid-node w2",
        ),
        # named, recovered, then named again with the other one: the one not recovered stopped it
        (
            [
                NAMED.format(k8s="h").replace("node 1 (pod w-1", "node 0 (pod w-0"),
                "ddpctl-trainer: straggler recovered: node 0 (pod w-0, k8s node h): back at 0.95 x the median speed "
                "at step 80",
                NAMED.format(k8s="h"),
            ],
            {},
            f"{TEXT.format(k8s='h')}; the other pods ran on k8s node h too",
        ),
    ],
)
def test_a_job_stopped_for_a_straggler_names_the_node_and_what_to_do(
    rank0: list[str], errors: dict[int, str], said: str
) -> None:
    """--stragglers fail: every rank exits 202 after the same step; the failure names the node rank 0
    named (the one not recovered since), and the resubmit command with --avoid-node when it has one."""
    plan = plan_for(JobSpec.from_dict({"name": "w", "nodes": 2, "procsPerNode": 2, "stragglers": {"mode": "fail"}}))
    failures = [Failure(r // 2, r, r % 2, protocol.EXIT_STRAGGLER, time="10:00:01") for r in range(4)]
    state = state_of(failures, errors, node_codes={0: 202, 1: 202})
    for line in rank0:
        state.on_rank_line(0, line)
    state.on_rank_line(1, NAMED.format(k8s="x"))  # only rank 0's lines count
    failed = node_failed(state, 0, 202, plan, "logs in x")
    assert failed.code == protocol.EXIT_STRAGGLER and not plan.retriable(failed.code)
    assert failed.message.startswith(f"job w stopped for a straggler (exit 202): {said}"), failed.message
    assert failed.message.endswith("(exit code 202; logs in x)")
    assert failed.cause.startswith("stopped for a straggler (exit 202): node ")


def test_a_failure_that_is_not_a_straggler_is_described_as_before() -> None:
    state = state_of([Failure(0, 0, 0, 1)], {0: "ValueError: x"}, node_codes={0: 1})
    state.on_rank_line(0, NAMED.format(k8s="h"))  # warn: named, but the job failed of something else
    assert describe_failure(state, 0, 1, range(2)).startswith("job w failed: rank 0 (node 0, local rank 0)")


# ------------------------------------------------------------------------------ the last lines


def _checkpoints(directory: Path, *steps: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for step in steps:
        (directory / protocol.checkpoint_name(step)).write_bytes(b"")
    (directory / "notes.txt").write_text("not a checkpoint")
    return directory


@pytest.mark.parametrize(
    ("how", "steps", "note"),
    [
        ("SIGTERM", (3, 12), "w interrupted (SIGTERM) at step 12 (checkpoint ckpt/ckpt-00000012.pt); run the same "
                             "command to resume there, or add --fresh to start over"),
        ("", (3,), "w interrupted at step 3 (checkpoint ckpt/ckpt-00000003.pt); run the same command to resume "
                   "there, or add --fresh to start over"),
        ("SIGHUP", (), "w interrupted (SIGHUP) before its first checkpoint; run the same command to start it again"),
    ],
)  # fmt: skip
def test_interrupted_note_says_where_to_resume(tmp_path: Path, how: str, steps: tuple[int, ...], note: str) -> None:
    directory = _checkpoints(tmp_path / "ckpt", *steps)
    assert interrupted_note("w", how, directory, tmp_path) == note


def test_interrupted_note_of_checkpoints_in_an_object_store() -> None:
    assert interrupted_note("w", "SIGTERM", "s3://b/p", Path("/")) == (
        "w interrupted (SIGTERM); run the same command to resume from the newest checkpoint in s3://b/p, or give a "
        "new prefix to start over"
    )
    assert interrupted_note("w", "", None, Path("/")).startswith("w interrupted before its first checkpoint")


def _finish(state: JobState, checkpoints: Path | str | None, cwd: Path) -> str:
    err = io.StringIO()
    finish_note(make_console(io.StringIO(), err, False), state, checkpoints, cwd, cwd / "ddp-runs" / "w" / "logs")
    return err.getvalue()


def test_the_last_line_of_a_run_names_its_newest_checkpoint_and_logs(tmp_path: Path) -> None:
    text = _finish(JobState("w", 2, 4), _checkpoints(tmp_path / "ckpt", 4, 8), tmp_path)
    assert text.startswith("ddpctl: w succeeded in ")
    assert text.endswith("s; checkpoint ckpt/ckpt-00000008.pt; logs in ddp-runs/w/logs\n")
    empty = _finish(JobState("w", 2, 4), _checkpoints(tmp_path / "none"), tmp_path)
    assert empty.endswith("s; checkpoints in none; logs in ddp-runs/w/logs\n")
    assert _finish(JobState("w", 2, 4), "s3://b/p", tmp_path).endswith(
        "s; checkpoints in s3://b/p; logs in ddp-runs/w/logs\n"
    )
    assert _finish(JobState("w", 2, 4), None, tmp_path).endswith("s; logs in ddp-runs/w/logs\n")


@pytest.mark.parametrize(("store", "again"), [(False, "add --fresh"), (True, "give a new prefix")])
def test_a_rerun_of_a_complete_job_says_nothing_was_trained(tmp_path: Path, store: bool, again: str) -> None:
    state = JobState("w", 2, 4)
    state.already_complete = (40, "/ckpt/ckpt-00000040.pt")
    checkpoints: Path | str = "s3://b/p" if store else _checkpoints(tmp_path / "ckpt", 40)
    shown = "/ckpt/ckpt-00000040.pt" if store else "ckpt/ckpt-00000040.pt"
    assert _finish(state, checkpoints, tmp_path) == (
        f"ddpctl: w was already complete at step 40 (checkpoint {shown}), so nothing was trained; to train it again "
        f"from the start, {again} (logs in ddp-runs/w/logs)\n"
    )
