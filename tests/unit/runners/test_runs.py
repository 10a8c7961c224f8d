"""ddpctl.runners.runs: a local job's run directory, written by its run (`RunRecord`) and read by
`status`, `logs`, `list`, `delete` and `status --wait`. Run directories are made here as a run
leaves them (run.json, logs/node-N[.restart-K].log, checkpoints); a run still going on is one whose
record says so and whose ddpctl lives (this test's own process, or a child it starts)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ddpctl.backend import LogOptions, NodeRow, Where
from ddpctl.backend.view import status_text
from ddpctl.engines import plan_for
from ddpctl.errors import NotFound, RuntimeFailure, UsageError, WaitTimeout
from ddpctl.runners import runs
from ddpctl.runners.procs import RANK_MARK
from ddpctl.runners.runs import (
    RunRecord,
    delete_run,
    find_run,
    list_runs,
    node_log,
    node_logs,
    recovery_text,
    require_run,
    run_logs,
    run_status,
    state_of,
    wait_run,
)
from ddpctl.runners.state import JobState
from ddpctl.spec.model import JobSpec
from ddpctl_trainer import protocol

PROGRESS = "epoch 2/3 step 5/8 loss 0.5000 12.5 samples/s eta 1m05s"


@pytest.fixture
def dead_pid() -> int:
    """The pid of a ddpctl that has ended: a child that exited and was reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def live_child() -> Iterator[subprocess.Popen[bytes]]:
    """A process that runs until it is signalled (a ddpctl running a job, to `delete`)."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def make_run(
    cwd: Path,
    name: str = "w",
    *,
    record: dict[str, Any] | None = None,
    logs: dict[str, str] | None = None,
) -> Path:
    """A run directory as `run --local` leaves it."""
    run_dir = cwd / "ddp-runs" / name
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    for file, text in (logs or {}).items():
        (run_dir / "logs" / file).write_text(text)
    if record is not None:
        full = {
            "name": name,
            "backend": "local",
            "target": "job",
            "state": "succeeded",
            "message": "",
            "pid": 1,
            "layout": "2 nodes x 1 process",
            "world_size": 2,
            "nodes": 2,
            "checkpoint_dir": None,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(time.time() - 180)),
            **record,
        }
        (run_dir / "run.json").write_text(json.dumps(full))
    return run_dir


# ------------------------------------------------------------------------------ RunRecord


@dataclass
class FakeChild:
    """What `tick` reads of a node: its index and whether it ended (procs.Child without a process)."""

    index: int
    code: int | None

    def poll(self) -> int | None:
        return self.code


def _record(tmp_path: Path, checkpoints: Path | str | None = None) -> RunRecord:
    plan = plan_for(JobSpec(name="w", nodes=2, procs_per_node=1))
    return RunRecord(tmp_path / "w", plan, Where.docker, "2 containers x 1 process", checkpoints)


def _read(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "w" / "run.json").read_text())


def test_the_record_says_what_runs_where(tmp_path: Path) -> None:
    record = _record(tmp_path, "s3://b/p")
    record.write("running")
    written = _read(tmp_path)
    assert {k: written[k] for k in ("name", "backend", "target", "state", "message", "pid")} == {
        "name": "w",
        "backend": "docker",
        "target": "job",
        "state": "running",
        "message": "",
        "pid": os.getpid(),
    }
    assert (written["layout"], written["world_size"], written["nodes"]) == ("2 containers x 1 process", 2, 2)
    assert written["checkpoint_dir"] == "s3://b/p"
    assert time.strptime(written["started"], "%Y-%m-%dT%H:%M:%S%z")
    assert "nodeStates" not in written and "progress" not in written and "attempt" not in written


def test_a_tick_records_rank_0s_progress_and_each_nodes_state(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(runs, "TICK_S", 0.0)  # every change is written at once
    record = _record(tmp_path)
    record.write("running")
    job = JobState("w", 2, 2, attempt=1)
    job.on_rank_line(0, PROGRESS)
    record.tick(job, [FakeChild(0, None), FakeChild(1, 137)])  # type: ignore[list-item]
    written = _read(tmp_path)
    assert written["attempt"] == 1
    assert written["progress"]["line"] == PROGRESS and written["progress"]["at"] == job.progress_at
    assert written["nodeStates"] == [
        {"node": 0, "name": "w-0", "phase": "Running"},
        {"node": 1, "name": "w-1", "phase": "Failed", "exitCode": 137},
    ]
    (tmp_path / "w" / "run.json").unlink()
    record.tick(job, [FakeChild(0, None), FakeChild(1, 137)])  # type: ignore[list-item]
    assert not (tmp_path / "w" / "run.json").exists()  # nothing changed: nothing written
    record.tick(job, [FakeChild(0, 0), FakeChild(1, 137)])  # type: ignore[list-item]
    assert _read(tmp_path)["nodeStates"][0] == {"node": 0, "name": "w-0", "phase": "Succeeded", "exitCode": 0}


def test_ticks_are_written_at_most_once_a_second(tmp_path: Path) -> None:
    record = _record(tmp_path)
    record.write("running")
    job = JobState("w", 2, 2)
    job.on_rank_line(0, PROGRESS)
    record.tick(job, [FakeChild(0, None), FakeChild(1, None)])  # type: ignore[list-item]
    assert "progress" not in _read(tmp_path)  # written a moment ago: this change waits for the next tick


def test_the_last_record_keeps_where_the_run_got_to(tmp_path: Path) -> None:
    record = _record(tmp_path)
    job = JobState("w", 2, 2)
    job.on_rank_line(0, PROGRESS)
    record.tick(job, [FakeChild(0, None), FakeChild(1, None)])  # type: ignore[list-item]
    job.node_codes = {0: 0, 1: 2}
    record.ended(job)
    record.write("failed", "job w failed: usage error")
    written = _read(tmp_path)
    assert (written["state"], written["message"]) == ("failed", "job w failed: usage error")
    assert written["progress"]["line"] == PROGRESS
    assert [n["phase"] for n in written["nodeStates"]] == ["Succeeded", "Failed"]


REPORT = [
    "ddpctl-trainer: preflight: 2 ranks on 2 nodes (gloo, cpu); GEMM 512 float32; one window of 0.2 s; named below "
    "0.6 x the median",
    "ddpctl-trainer: preflight: node  rank  local  pod  GFLOP/s  cpu",
    "ddpctl-trainer: preflight: 0     0     0      w-0  88.1     99%",
    "ddpctl-trainer: preflight: 1     1     0      w-1  5.02     6%   SLOW compute",
    "ddpctl-trainer: preflight finding: slow node: node 1 (pod w-1): compute 5.02 GFLOP/s, 0.06 x the median 88.1 "
    "GFLOP/s (tolerance 0.6)",
    "ddpctl-trainer: preflight verdict: 1 finding (slow node: node 1) in 1.2 s; going on (--preflight warn)",
]


def test_rank_0s_preflight_report_is_kept_and_status_shows_it(tmp_path: Path, monkeypatch) -> None:
    """The report of the newest start that printed one (a restart that has not printed it yet
    keeps the one before); status shows the verdict as `Preflight:` and the report under it."""
    monkeypatch.setattr(runs, "TICK_S", 0.0)
    record = _record(tmp_path)
    job = JobState("w", 2, 2)
    for line in REPORT:
        job.on_rank_line(0, line)
    job.on_rank_line(1, "ddpctl-trainer: preflight: not rank 0")
    record.tick(job, [FakeChild(0, None), FakeChild(1, None)])  # type: ignore[list-item]
    assert _read(tmp_path)["preflight"] == REPORT
    record.tick(JobState("w", 2, 2, attempt=1), [FakeChild(0, None), FakeChild(1, None)])  # type: ignore[list-item]
    record.write("running")
    assert _read(tmp_path)["preflight"] == REPORT
    status = run_status(tmp_path / "w", tmp_path)
    assert list(status.preflight) == REPORT
    lines = status_text(status)
    at = lines.index("Preflight:   1 finding (slow node: node 1) in 1.2 s; going on (--preflight warn)")
    assert lines[at + 2 : at + 6] == [
        "             node  rank  local  pod  GFLOP/s  cpu",
        "             0     0     0      w-0  88.1     99%",
        "             1     1     0      w-1  5.02     6%   SLOW compute",
        "             finding: slow node: node 1 (pod w-1): compute 5.02 GFLOP/s, 0.06 x the median 88.1 GFLOP/s "
        "(tolerance 0.6)",
    ]
    assert status.as_dict()["preflight"]["findings"] == [REPORT[4].split("finding: ", 1)[1]]


STRAGGLER_LINES = [
    "ddpctl-trainer: straggler: node 1 (pod w-1, k8s node h): own work 61.2 ms a step (rank 1), 0.48 x the median "
    "speed (29.5 ms; tolerance 0.6) for 3 windows of 10 steps, since step 41",
    "ddpctl-trainer: straggler: node 0 (pod w-0, k8s node h): own work 70.0 ms a step (rank 0), 0.42 x the median "
    "speed (29.5 ms; tolerance 0.6) for 3 windows of 10 steps, since step 51",
    "ddpctl-trainer: straggler recovered: node 1 (pod w-1, k8s node h): back at 0.95 x the median speed at step 90",
]


def test_rank_0s_straggler_lines_are_kept_and_status_shows_the_current_ones(tmp_path: Path, monkeypatch) -> None:
    """Rank 0's straggler lines, as rank 0 printed them (another rank's are not its): kept in the run
    record as the preflight report is; status shows the nodes named now and those that recovered."""
    monkeypatch.setattr(runs, "TICK_S", 0.0)
    record = _record(tmp_path)
    job = JobState("w", 2, 2)
    for line in STRAGGLER_LINES:
        job.on_rank_line(0, line)
    job.on_rank_line(1, STRAGGLER_LINES[0])
    assert job.stragglers == STRAGGLER_LINES
    record.tick(job, [FakeChild(0, None), FakeChild(1, None)])  # type: ignore[list-item]
    assert _read(tmp_path)["stragglers"] == STRAGGLER_LINES
    record.tick(JobState("w", 2, 2, attempt=1), [FakeChild(0, None), FakeChild(1, None)])  # type: ignore[list-item]
    record.write("running")
    assert _read(tmp_path)["stragglers"] == STRAGGLER_LINES  # a restart that has printed none keeps them
    status = run_status(tmp_path / "w", tmp_path)
    lines = status_text(status)
    at = lines.index(
        "Stragglers:  node 0 (pod w-0, k8s node h): own work 70.0 ms a step (rank 0), 0.42 x the median speed "
        "(29.5 ms; tolerance 0.6) for 3 windows of 10 steps, since step 51"
    )
    assert lines[at + 1] == (
        "             recovered: node 1 (pod w-1, k8s node h): back at 0.95 x the median speed at step 90"
    )
    data = status.as_dict()["stragglers"]
    assert [c["node"] for c in data["current"]] == [0] and data["lines"] == STRAGGLER_LINES


@pytest.mark.parametrize(("attempt", "name"), [(0, "node-3.log"), (2, "node-3.restart-2.log")])
def test_node_log(tmp_path: Path, attempt: int, name: str) -> None:
    assert node_log(tmp_path, 3, attempt) == tmp_path / "logs" / name


# ------------------------------------------------------------------------------ finding a run


def test_a_run_is_found_by_its_record_or_its_logs(tmp_path: Path) -> None:
    make_run(tmp_path, "a", record={})
    (tmp_path / "ddp-runs" / "b" / "logs").mkdir(parents=True)
    (tmp_path / "ddp-runs" / "c").mkdir()  # neither: not a run
    assert find_run("a", tmp_path) == tmp_path / "ddp-runs" / "a"
    assert find_run("b", tmp_path) == tmp_path / "ddp-runs" / "b"
    assert find_run("c", tmp_path) is None
    with pytest.raises(NotFound) as missing:
        require_run("c", tmp_path, hint=" (and no cluster)")
    assert str(missing.value) == (
        'no local run "c" here (no ddp-runs/c) (and no cluster); see `ddpctl list --on local`'
    )


def test_node_logs_are_found_by_node_and_start(tmp_path: Path) -> None:
    names = ["node-0.log", "node-1.log", "node-0.restart-1.log", "node-0.restart-12.log", "notes.txt", "node-x.log"]
    run_dir = make_run(tmp_path, logs=dict.fromkeys(names, ""))
    logs = run_dir / "logs"
    assert node_logs(run_dir) == {
        0: {0: logs / "node-0.log", 1: logs / "node-0.restart-1.log", 12: logs / "node-0.restart-12.log"},
        1: {0: logs / "node-1.log"},
    }
    assert node_logs(tmp_path / "nowhere") == {}


@pytest.mark.parametrize(
    ("record", "state"),
    [
        ({"state": "succeeded"}, "Succeeded"),
        ({"state": "failed"}, "Failed"),
        ({"state": "interrupted"}, "Interrupted"),
        ({"state": "timed out"}, "TimedOut"),
        ({"state": "something new"}, "something new"),
        ({}, "Unknown (no run record)"),
    ],
)
def test_state_of_a_finished_run(record: dict[str, Any], state: str) -> None:
    assert state_of(record) == state


def test_a_run_whose_ddpctl_ended_without_saying_so_is_unknown(dead_pid: int) -> None:
    assert state_of({"state": "running", "pid": os.getpid()}) == "Running"
    assert state_of({"state": "running", "pid": dead_pid}) == (
        f"Unknown (its ddpctl, pid {dead_pid}, ended without saying how)"
    )
    assert state_of({"state": "running", "pid": "1"}).startswith("Unknown")  # not a pid


# ------------------------------------------------------------------------------ status


def test_the_status_of_a_finished_run(tmp_path: Path) -> None:
    record = {
        "state": "failed",
        "message": "job w failed: node 1 was killed",
        "progress": {"line": PROGRESS, "at": time.time() - 30},
        "nodeStates": [
            {"node": 0, "name": "w-0", "phase": "Succeeded", "exitCode": 0},
            {"node": 1, "name": "w-1", "phase": "Failed", "exitCode": 137},
            {"node": 2, "name": "w-2", "phase": "Failed", "exitCode": 3},
        ],
    }
    run_dir = make_run(tmp_path, record=record, logs={"node-0.log": "", "node-0.restart-1.log": ""})
    checkpoints = run_dir / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / protocol.checkpoint_name(8)).write_bytes(b"")
    status = run_status(run_dir, tmp_path)
    assert (status.name, status.backend, status.where) == ("w", Where.local, "ddp-runs/w")
    assert status.state == "Failed (job w failed: node 1 was killed)"
    assert status.nodes == "2 nodes x 1 process = world size 2"
    assert status.progress == protocol.Progress(2, 3, 5, 8, 0.5, 12.5, 65.0)
    assert status.progress_age_s is not None and status.progress_age_s >= 30
    assert dict(status.lines) == {
        "Starts": "2 (1 restart)",
        "Checkpoint": "step 8 in ddp-runs/w/checkpoints",
        "Logs": "ddp-runs/w/logs (ddpctl logs w)",
        "Age": "3m",
    }
    assert list(status.rows) == [
        NodeRow(0, "w-0", "Succeeded", 1, ""),
        NodeRow(1, "w-1", "Failed", 1, "exit code 137: killed by SIGKILL"),
        NodeRow(2, "w-2", "Failed", 1, "exit code 3"),
    ]
    assert status.name_column == "HOST" and status.no_rows == ""
    assert status.data["state"] == status.state and status.data["message"] == record["message"]


def test_the_status_of_a_running_run_names_its_ddpctl(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, record={"state": "running", "pid": os.getpid(), "backend": "docker"})
    status = run_status(run_dir, tmp_path)
    assert status.state == "Running" and status.backend == Where.docker
    assert status.where == f"ddp-runs/w, ddpctl pid {os.getpid()}"
    assert status.no_rows == "No node has started yet."
    assert dict(status.lines)["Starts"] == "1 (no restart)"
    assert status.progress is None and status.progress_age_s is None


def test_the_status_of_a_run_without_a_record_still_names_it(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "bare", logs={"node-0.log": "x\n"})
    status = run_status(run_dir, tmp_path)
    assert (status.name, status.state, status.nodes) == ("bare", "Unknown (no run record)", "?")
    assert dict(status.lines)["Age"] == "<unknown>"


def test_checkpoints_in_an_object_store_are_named_not_read(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, record={"checkpoint_dir": "s3://b/runs/w"})
    assert ("Checkpoints", "s3://b/runs/w") in run_status(run_dir, tmp_path).lines


def test_checkpoints_elsewhere_are_read_where_the_record_says(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / protocol.checkpoint_name(3)).write_bytes(b"")
    run_dir = make_run(tmp_path, record={"checkpoint_dir": str(mine)})
    assert ("Checkpoint", "step 3 in mine") in run_status(run_dir, tmp_path).lines


# ------------------------------------------------------------------------------ logs

LOGS = {
    "node-0.log": "[rank 0] one\n[rank 0] two\n",
    "node-1.log": f"[rank 1] one\n{RANK_MARK}1@@marked\n",
    "node-0.restart-1.log": "[rank 0] again\n",
    "node-1.restart-1.log": "[rank 1] again\n",
}


def _logs(run_dir: Path, **options: Any) -> list[str]:
    out: list[str] = []
    run_logs(run_dir, LogOptions(**options), out.append, out.append)
    return out


@pytest.mark.parametrize(
    ("options", "lines"),
    [
        ({}, ["[node 0] [rank 0] again", "[node 1] [rank 1] again"]),  # the latest start
        (
            {"previous": True},
            ["[node 0] [rank 0] one", "[node 0] [rank 0] two", "[node 1] [rank 1] one", "[node 1] [rank 1] marked"],
        ),
        ({"previous": True, "tail": 1}, ["[node 0] [rank 0] two", "[node 1] [rank 1] marked"]),
        ({"previous": True, "tail": 0}, []),
        ({"previous": True, "rank": 1}, ["[rank 1] one", "[rank 1] marked"]),  # one node: no prefix
        ({"rank": 0, "prefix": True}, ["[node 0] [rank 0] again"]),
        ({"prefix": False}, ["[rank 0] again", "[rank 1] again"]),
    ],
)
def test_logs_of_a_run(tmp_path: Path, options: dict[str, Any], lines: list[str]) -> None:
    assert _logs(make_run(tmp_path, record={}, logs=LOGS), **options) == lines


def test_logs_of_a_node_that_did_not_start_again_are_left_out(tmp_path: Path) -> None:
    run_dir = make_run(
        tmp_path, record={}, logs={"node-0.log": "a\n", "node-1.log": "b\n", "node-0.restart-1.log": "c\n"}
    )
    assert _logs(run_dir) == ["[node 0] c"]


@pytest.mark.parametrize(
    ("logs", "options", "message"),
    [
        (LOGS, {"rank": 5}, "--rank: the local run in {run_dir} has no node 5; its nodes: 0, 1"),
        ({}, {"rank": 0}, "--rank: the local run in {run_dir} has no node 0; its nodes: none"),
        (
            {"node-0.log": ""},
            {"previous": True},
            "--previous: this local run was started once, without restarts; drop --previous",
        ),
        (LOGS, {"previous": True, "follow": True}, "--previous cannot be combined with --follow; drop one of them"),
    ],
)
def test_logs_refuse_what_the_run_does_not_have(
    tmp_path: Path, logs: dict[str, str], options: dict[str, Any], message: str
) -> None:
    run_dir = make_run(tmp_path, record={}, logs=logs)
    with pytest.raises(UsageError) as error:
        _logs(run_dir, **options)
    assert str(error.value) == message.format(run_dir=run_dir)


def test_following_a_run_whose_ddpctl_ended_prints_everything_and_returns(tmp_path: Path, dead_pid: int) -> None:
    """The record still says running, but its ddpctl is gone: what the logs hold is all there will be,
    a last line without its newline included."""
    logs = {"node-0.log": "[rank 0] a\n[rank 0] b", "node-1.log": "[rank 1] c\n", "node-1.restart-1.log": "d\n"}
    run_dir = make_run(tmp_path, record={"state": "running", "pid": dead_pid}, logs=logs)
    assert _logs(run_dir, follow=True) == [
        "[node 0] [rank 0] a",
        "[node 0] [rank 0] b",
        "[node 1] [rank 1] c",
        "[node 1] d",
    ]
    assert _logs(run_dir, follow=True, rank=1) == ["[rank 1] c", "d"]


def test_following_with_tail_starts_at_the_end(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, record={"state": "succeeded"}, logs={"node-0.log": "1\n2\n3\n", "node-1.log": "4\n"})
    assert _logs(run_dir, follow=True, tail=1) == ["[node 0] 3", "[node 1] 4"]


# ------------------------------------------------------------------------------ wait


def test_waiting_on_a_run_that_succeeded(tmp_path: Path) -> None:
    said: list[str] = []
    wait_run(make_run(tmp_path, record={"state": "succeeded"}), None, said.append)
    assert said == ["ddpctl: local run w succeeded"]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"state": "failed", "message": "job w failed: x"}, "local run w ended Failed: job w failed: x"),
        ({"state": "interrupted"}, "local run w ended Interrupted"),
    ],
)
def test_waiting_on_a_run_that_did_not_succeed(tmp_path: Path, record: dict[str, Any], message: str) -> None:
    with pytest.raises(RuntimeFailure) as error:
        wait_run(make_run(tmp_path, record=record), None, print)
    assert str(error.value) == message and not isinstance(error.value, WaitTimeout)


def test_waiting_on_a_run_whose_ddpctl_ended_without_a_word(tmp_path: Path, dead_pid: int) -> None:
    with pytest.raises(RuntimeFailure, match=r"^local run w ended Unknown$"):
        wait_run(make_run(tmp_path, record={"state": "running", "pid": dead_pid}), None, print)


def test_waiting_on_a_run_that_goes_on_past_the_timeout(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(runs, "POLL_S", 0.01)
    run_dir = make_run(tmp_path, record={"state": "running", "pid": os.getpid()})
    with pytest.raises(WaitTimeout, match=r"^local run w was still running after --timeout 0.05s$"):
        wait_run(run_dir, 0.05, print)


# ------------------------------------------------------------------------------ list


def test_list_runs(tmp_path: Path, dead_pid: int) -> None:
    make_run(tmp_path, "b", record={"backend": "docker", "target": "jobset", "state": "failed", "message": "x"})
    make_run(tmp_path, "a", record={"state": "running", "pid": dead_pid})
    make_run(tmp_path, "c", logs={"node-0.log": ""})
    (tmp_path / "ddp-runs" / "stray").mkdir()
    listing = list_runs(tmp_path)
    assert listing.looked_in == "./ddp-runs"
    rows = [(j.name, j.target, j.nodes, j.state, j.age, j.ref, j.image) for j in listing.jobs]
    assert rows == [
        ("a", "job", "2", "Unknown", "3m", "ddp-runs/a", "local"),
        ("b", "jobset", "2", "Failed", "3m", "ddp-runs/b", "docker"),
        ("c", "", "?", "Unknown", "<unknown>", "ddp-runs/c", "local"),
    ]
    raw = listing.jobs[1].raw
    assert (raw["apiVersion"], raw["kind"], raw["metadata"], raw["state"]) == (
        "ddpctl.io/v1",
        "LocalRun",
        {"name": "b"},
        "failed",
    )


def test_list_without_runs(tmp_path: Path) -> None:
    assert list_runs(tmp_path).jobs == []


# ------------------------------------------------------------------------------ delete


def test_deleting_a_run_keeps_its_checkpoints(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, record={}, logs={"node-0.log": "x\n"})
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / protocol.checkpoint_name(1)).write_bytes(b"w")
    (run_dir / "data").mkdir()
    said: list[str] = []
    delete_run(run_dir, wait=True, timeout=None, out=said.append)
    assert said == [f"local run w deleted (kept checkpoints, data in {run_dir})"]
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "data"]
    assert (run_dir / "checkpoints" / protocol.checkpoint_name(1)).read_bytes() == b"w"


def test_deleting_a_run_with_nothing_to_keep_removes_its_directory(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, record={}, logs={"node-0.log": "x\n"})
    said: list[str] = []
    delete_run(run_dir, wait=False, timeout=None, out=said.append)
    assert said == ["local run w deleted"] and not run_dir.exists()


def test_deleting_a_running_run_stops_its_ddpctl_first(tmp_path: Path, live_child: subprocess.Popen[bytes]) -> None:
    run_dir = make_run(tmp_path, record={"state": "running", "pid": live_child.pid}, logs={"node-0.log": ""})
    said: list[str] = []
    delete_run(run_dir, wait=True, timeout=30, out=said.append)
    assert live_child.wait(timeout=30) == -15  # SIGTERM: its ddpctl stops its nodes as on Ctrl-C
    assert said == [f"stopping local run w (ddpctl pid {live_child.pid})", "local run w deleted"]
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("recovery", "text"),
    [
        (
            {"node": 1, "reason": "exited with code 137", "step": 4, "seconds": 4.4},
            "node 1 exited with code 137: back at step 4 after 4.4 s, no step lost",
        ),
        ({"node": 0, "reason": "was killed by SIGKILL", "step": None}, "node 0 was killed by SIGKILL: being replaced"),
    ],
)
def test_a_recovery_in_status(recovery: dict, text: str) -> None:
    assert recovery_text(recovery) == text
