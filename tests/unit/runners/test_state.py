"""ddpctl.runners.state: what the lines of a local job tell (`JobState`) and where each line goes
(`show_line`): a rank's line to the console with its rank, an agent's own line with its node, the
noise of torchrun's reports, banners and tracebacks to the node's log file only."""

from __future__ import annotations

import io

import pytest

from ddpctl.console import Console, make_console
from ddpctl.engines import plan_for
from ddpctl.runners.procs import RANK_MARK
from ddpctl.runners.state import PREEMPTED_AGENT, Failure, JobState, layout_phrase, show_line
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol

ERROR = protocol.ERROR_TAG  # `ddpctl-trainer: error: `


class Screen:
    """A console on two StringIOs: what the user sees on stdout and stderr."""

    def __init__(self, live: bool = False) -> None:
        self.out, self.err = io.StringIO(), io.StringIO()
        self.console = Console(self.out, self.err, False, live_status=live)

    def lines(self) -> list[str]:
        return self.out.getvalue().splitlines()


def _state(nodes: int = 2, world: int = 4) -> JobState:
    state = JobState("w", nodes, world)
    state.node_ranks = {n: range(n * world // nodes, (n + 1) * world // nodes) for n in range(nodes)}
    return state


# ------------------------------------------------------------------------------ show_line routing


@pytest.mark.parametrize(
    ("node", "text", "shown", "rank"),
    [
        # torchrun's marker in a local run: the rank's own text, without a repeated `[rank R] `
        (0, f"{RANK_MARK}1@@hello", "[rank 1] hello", 1),
        (1, f"{RANK_MARK}3@@[rank 3] step", "[rank 3] step", 3),
        # a container's output has no marker: the trainer's own `[rank R] ` names the rank
        (1, "[rank 2] epoch done", "[rank 2] epoch done", 2),
        # a tagged line keeps its tag in front
        (1, f"{ERROR}[rank 3] boom", f"[rank 3] {ERROR}boom", 3),
        # the agent's own lines are the node's
        (1, "some agent line", "[node 1] some agent line", None),
    ],
)
def test_a_line_goes_to_its_rank_or_its_node(node: int, text: str, shown: str, rank: int | None) -> None:
    screen, state = Screen(), _state()
    show_line(screen.console, state, node, text)
    assert screen.lines() == [shown]
    assert state.ranks_spoke is (rank is not None)
    assert state.phase == ("training" if rank is not None else "starting")


def test_a_ranks_error_line_is_remembered_for_that_rank() -> None:
    screen, state = Screen(), _state()
    show_line(screen.console, state, 1, f"{RANK_MARK}3@@ValueError: bad batch")
    show_line(screen.console, state, 1, f"{ERROR}[rank 2] unknown --model x")
    show_line(screen.console, state, 0, f"{RANK_MARK}0@@an ordinary line")
    assert state.last_error == {3: "ValueError: bad batch", 2: f"{ERROR}unknown --model x"}


def test_a_tagged_error_without_a_rank_is_every_rank_of_its_node() -> None:
    """A usage error every rank finds before it is a rank of a process group comes without a rank:
    it is kept as each of the node's ranks' error (the failure line quotes it) and shown as the node's."""
    screen, state = Screen(), _state()
    show_line(screen.console, state, 1, f"{ERROR}unknown --epochs 'x'")
    assert state.last_error == {2: f"{ERROR}unknown --epochs 'x'", 3: f"{ERROR}unknown --epochs 'x'"}
    assert screen.lines() == [f"[node 1] {ERROR}unknown --epochs 'x'"]
    show_line(screen.console, state, 1, f"{ERROR}a later one")
    assert state.last_error[2] == f"{ERROR}unknown --epochs 'x'"  # the first error is kept


def test_an_agents_traceback_stays_in_the_log_and_its_last_line_is_its_error() -> None:
    screen, state = Screen(), _state()
    for line in (
        "Traceback (most recent call last):",
        '  File "run.py", line 1, in <module>',
        "\tmore",
        "RuntimeError: the store could not be reached",
        "after the traceback",
    ):
        show_line(screen.console, state, 0, line)
    assert screen.lines() == ["[node 0] after the traceback"]
    assert state.agent_errors == {0: "RuntimeError: the store could not be reached"}
    assert state.in_traceback == set()


@pytest.mark.parametrize(
    "last",
    [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15",
    ],
)
def test_torchruns_own_failure_tracebacks_are_no_agent_error(last: str) -> None:
    """torchrun raises ChildFailedError when a worker failed, SignalException when we stopped it:
    the workers' failure says why, not the agent."""
    screen, state = Screen(), _state()
    for line in ("Traceback (most recent call last):", "  File x", last):
        show_line(screen.console, state, 1, line)
    assert screen.lines() == [] and state.agent_errors == {}


def test_tracebacks_of_two_nodes_are_told_apart() -> None:
    screen, state = Screen(), _state()
    show_line(screen.console, state, 0, "Traceback (most recent call last):")
    show_line(screen.console, state, 1, "  an indented line of node 1, not in a traceback")
    show_line(screen.console, state, 0, "OSError: x")
    assert screen.lines() == ["[node 1]   an indented line of node 1, not in a traceback"]
    assert state.agent_errors == {0: "OSError: x"}


@pytest.mark.parametrize(("stopping", "shown"), [(True, []), (False, ["[node 0] "])])
def test_blank_lines_of_a_node_being_stopped_are_dropped(stopping: bool, shown: list[str]) -> None:
    screen, state = Screen(), _state()
    state.phase = "training"
    show_line(screen.console, state, 0, "", stopping=stopping)
    assert screen.lines() == shown


def test_torchruns_banner_is_shown_for_the_first_node_only() -> None:
    banner = [
        "*****************************************",
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, ...",
        "*****************************************",
    ]
    screen, state = Screen(), _state()
    for node in (1, 0):
        for line in banner:
            show_line(screen.console, state, node, line)
    # torch may log it with its own prefix
    show_line(screen.console, state, 0, "W1201 10:26:24.812000 1 run.py:874] " + banner[1])
    assert screen.lines() == [f"[node 1] {line}" for line in banner]


# ------------------------------------------------------------------------------ torchrun's report

REPORT = [
    "============================================================",
    "train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "[1]:",
    "  time      : 2024-05-01_10:00:02",
    "  host      : h",
    "  rank      : 2 (local_rank: 0)",
    "  exitcode  : 138 (pid: 12)",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2024-05-01_10:00:01",
    "  host      : h",
    "  rank      : 3 (local_rank: 1)",
    "  exitcode  : -9 (pid: 13)",
    "  traceback : Signal 9 (SIGKILL) received by PID 13",
    "============================================================",
]


def test_torchruns_failure_report_is_read_not_shown() -> None:
    screen, state = Screen(), _state()
    for line in REPORT:
        show_line(screen.console, state, 1, line)
    show_line(
        screen.console,
        state,
        1,
        "E0501 10:00:02.123000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        "local_rank: 0 (pid: 12) of binary: /usr/bin/python3",
    )
    show_line(screen.console, state, 1, "after the report")
    assert state.failures == [
        Failure(1, 2, 0, 138, "2024-05-01_10:00:02", root_cause=False),
        Failure(1, 3, 1, -9, "2024-05-01_10:00:01", root_cause=True),
    ]
    # the report, and the agent's `failed (exitcode: N)` line, stay in the node's log file
    assert screen.lines() == ["[node 1] after the report"]


def test_a_rank_is_reported_once() -> None:
    state = _state()
    for node in (0, 1):
        for line in REPORT:
            state.on_node_line(node, line)
    assert [(f.node, f.rank) for f in state.failures] == [(0, 2), (0, 3)]


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


@pytest.mark.parametrize(("line", "preempted"), [(PREEMPTED_AGENT, {1}), (f"{protocol.LAUNCHER_TAG}x", set())])
def test_an_agent_stopped_by_sigterm_marks_its_node_preempted(line: str, preempted: set[int]) -> None:
    state = _state()
    state.on_node_line(1, line)
    assert state.preempted == preempted


# ------------------------------------------------------------------------------ what rank lines say

PROGRESS = "epoch 2/3 step 5/8 loss 0.5000 12.5 samples/s eta 1m05s"


@pytest.mark.parametrize(
    ("rank", "text", "progress"),
    [
        (0, PROGRESS, protocol.Progress(2, 3, 5, 8, 0.5, 12.5, 65.0)),
        (0, "epoch 1/1 step 1/2", protocol.Progress(1, 1, 1, 2)),
        (1, PROGRESS, None),  # only rank 0's progress is the job's
        (0, "epoch one", None),
    ],
)
def test_rank_0s_progress_line_is_parsed_into_the_state(rank: int, text: str, progress: object) -> None:
    state = _state()
    state.on_rank_line(rank, text)
    assert state.progress == progress
    assert (state.progress_at is not None) is (progress is not None)


@pytest.mark.parametrize(("live", "shown"), [(True, []), (False, [f"[rank 0] {PROGRESS}"])])
def test_a_live_status_line_draws_progress_instead_of_printing_it(live: bool, shown: list[str]) -> None:
    screen, state = Screen(live=live), _state()
    show_line(screen.console, state, 0, f"{RANK_MARK}0@@{PROGRESS}")
    assert screen.lines() == shown
    assert state.progress is not None and state.progress.step == 5


def test_a_rerun_of_a_finished_job_is_recognised() -> None:
    state = _state()
    line = (  # as the trainer prints it
        f"{protocol.ALREADY_COMPLETE} at step 40 (epoch 2/2), checkpoint /ckpt/ckpt-00000040.pt; nothing to train "
        "(to start over: --resume never, or remove the checkpoints)"
    )
    state.on_rank_line(1, line)
    assert state.already_complete is None  # rank 0 speaks for the job
    state.on_rank_line(0, line)
    assert state.already_complete == (40, "/ckpt/ckpt-00000040.pt")


def test_lost_peers_and_stall_summaries_are_collected() -> None:
    state = _state()
    state.on_rank_line(2, f"{ERROR}[rank 2] lost a peer during all_reduce: a collective failed because x")
    state.on_rank_line(1, f"{protocol.STALL_SUMMARY_TAG} no rank made progress for 20 s")
    assert state.peer_failed_ranks == {2}
    assert state.stall_lines == [f"{protocol.STALL_SUMMARY_TAG} no rank made progress for 20 s"]


# ------------------------------------------------------------------------------ the status line


def test_the_status_line_says_phase_nodes_world_and_progress() -> None:
    state = JobState("w", 2, 4, phase="training", nodes_running=1)
    parts = state.status().split(" | ")
    assert parts[0] == "w: training" and parts[1].endswith("s")
    assert parts[2:] == ["1/2 nodes running, world size 4"]
    state.progress = protocol.Progress(1, 2, 3, 8, 2.29, None, 65.0)
    parts = state.status(bar_width=8).split(" | ")
    assert parts[3:] == ["epoch 1/2 [###.....] step 3/8 loss 2.2900", "ETA 1m05s"]
    assert state.status().split(" | ")[3] == "epoch 1/2 step 3/8 loss 2.2900"


# ------------------------------------------------------------------------------ layout_phrase


@pytest.mark.parametrize(
    ("data", "unit", "phrase"),
    [
        ({"nodes": 2, "procsPerNode": 2}, "node", "2 nodes x 2 processes"),
        ({"nodes": 1, "procsPerNode": 1}, "container", "1 container x 1 process"),
        ({"nodes": "1:4"}, "node", "1:4 nodes x 2 processes"),
        (
            {
                "nodeGroups": [
                    {"name": "a", "nodes": 1, "gpusPerNode": 0, "procsPerNode": 2},
                    {"name": "b", "nodes": 2, "gpusPerNode": 0, "procsPerNode": 1},
                ]
            },
            "node",
            "1 node x 2 processes + 2 nodes x 1 process",
        ),
    ],
)
def test_layout_phrase(data: dict, unit: str, phrase: str) -> None:
    assert layout_phrase(plan_for(JobSpec.from_dict(data)), unit) == phrase


def test_a_node_started_again_alone_is_recorded_until_the_group_goes_on() -> None:
    state = JobState("w", 3, 3)
    state.on_replaced(1, "exited with code 137")
    assert state.recoveries[0]["step"] is None
    state.on_rank_line(
        0, "ddpctl-trainer: recovery: the group formed again (generation 1), going on at step 4 after 1.0s"
    )
    state.on_rank_line(1, "ddpctl-trainer: recovery: replaced a lost process: joined the running job at step 4")
    (recovery,) = state.recoveries
    assert (recovery["node"], recovery["reason"], recovery["step"]) == (1, "exited with code 137", 4)
    assert recovery["seconds"] >= 0 and "_since" not in recovery


def test_a_node_run_alone_reports_its_failed_rank_as_the_jobs_rank() -> None:
    """Pod recovery: node 2's torchrun runs that node alone and numbers its rank 0; in the job it is rank 5."""
    state = JobState("w", 3, 6)
    report = ["=" * 20, "Root Cause (first observed failure):", "[0]:", "  time      : 2026-12-06_10:00:01"]
    report += ["  rank      : 0 (local_rank: 0)", "  exitcode  : -9 (pid: 7)", "=" * 20]
    for line in report:
        show_line(make_console(io.StringIO(), io.StringIO(), False), state, 2, line, rank_base=5)
    assert [(f.node, f.rank, f.local_rank, f.code) for f in state.failures] == [(2, 5, 0, -9)]
