"""Stragglers named during training: real gloo jobs through `ddpctl run --local` (3 nodes x 1
process, the ddpctl trainer) whose node 1 is slowed from outside once rank 0 has reported step 30.

Node 1's agent and worker join a cgroup with no limit when their process group comes up
(tests/support/slow_node/sitecustomize.py); the test tightens the group's CPU quota when rank 0's
progress line passes step 30 (a lowered pod CPU limit does the same to a pod), and lifts it again
once the node is named. Everything waits on the job's own lines and its exit, never on sleeps.

* warn: node 1 is named within `windows` + 1 windows of the slowdown, nobody else ever is, it is
  said to have recovered after the quota is lifted, and `ddpctl status` shows both;
* fail: every rank stops after the same step with exit 202, the run is not retried, and the
  failure names the node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ddpctl_trainer import protocol

from tests.support import REPO, skip_unless
from tests.support.cpu_quota import CpuQuota, unavailable
from tests.support.procs import ddpctl_env, run_ddpctl, stop_like_a_user

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

HOOK = REPO / "tests" / "support" / "slow_node"
SLOW_CPUS = 0.08  # node 1's two processes: a fraction of the ~2/3 of a core each node gets here
SLOW_FROM = 30  # the step after which node 1 is slowed
EVERY, WINDOWS = 10, 3
PROGRESS = re.compile(r"^\[rank 0\] epoch (\d+)/\d+ step (\d+)/(\d+)")


def _job(cwd: Path, quota: CpuQuota, mode: str) -> tuple[int, list[str], str, dict[str, int]]:
    """Run the job, slowing node 1 after SLOW_FROM and (warn) lifting it once named: the exit code,
    rank 0's straggler lines, stderr, and the steps at which the test acted."""
    cwd.mkdir(parents=True, exist_ok=True)
    env = {
        **ddpctl_env(),
        "PYTHONPATH": f"{HOOK}{os.pathsep}{REPO}",
        "DDPTEST_SLOW_NODE": "1",
        "DDPTEST_SLOW_PROCS": str(quota.procs_file),
    }
    args = ["run", "--local", "--nodes", "3", "--gpus", "0", "--procs", "1", "--name", "st", "--fresh"]
    args += ["--color", "never", "--stragglers", mode, "--", "--epochs", "12", "--log-every", "5"]
    err = cwd / "stderr.txt"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ddpctl", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
        acted: dict[str, int] = {}
        lines: list[str] = []
        step = 0
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                found = PROGRESS.match(line)
                if found:
                    epoch, in_epoch, per_epoch = (int(g) for g in found.groups())
                    step = (epoch - 1) * per_epoch + in_epoch
                    if step >= SLOW_FROM and "slowed" not in acted:
                        quota.limit(SLOW_CPUS)
                        acted["slowed"] = step
                note = protocol.straggler_line(line.rstrip("\n"))
                if note is not None and line.startswith("[rank 0] "):
                    lines.append(line.rstrip("\n"))
                    if note.kind == "straggler" and "lifted" not in acted:
                        quota.limit(None)
                        acted["lifted"] = step
            code = proc.wait(timeout=300)
        finally:
            stop_like_a_user(proc, pipes_read_elsewhere=True)
    return code, lines, err.read_text(), acted


def _since(line: str) -> int:
    found = re.search(r"since step (\d+)", line)
    assert found, line
    return int(found.group(1))


@pytest.fixture
def quota() -> CpuQuota:
    reason = unavailable()
    skip_unless(reason is None, f"slowing a node needs a CPU quota: {reason}")
    with CpuQuota(None) as q:
        yield q  # type: ignore[misc]  # a generator fixture


def test_a_node_slowed_mid_run_is_named_said_to_recover_and_shown_by_status(tmp_path: Path, quota: CpuQuota) -> None:
    code, lines, err, acted = _job(tmp_path, quota, "warn")
    assert code == 0, err
    assert "slowed" in acted, "the job never reached the step the test slows it at: nothing was tested"
    named = [protocol.straggler_line(line) for line in lines]
    kinds = [(n.kind, n.node) for n in named if n is not None]
    assert kinds == [("straggler", 1), ("recovered", 1)], lines
    since = _since(lines[0])
    # named within windows + 1 windows of the slowdown, and not for a window before it
    assert acted["slowed"] - EVERY < since <= acted["slowed"] + EVERY, (acted, lines)
    assert acted["lifted"] <= acted["slowed"] + (WINDOWS + 1) * EVERY + 5, (acted, lines)  # 5: the log's cadence
    assert "pod st-1" in lines[0] and "(rank 1)" in lines[0], lines[0]

    status = run_ddpctl("status", "st", "--on", "local", cwd=tmp_path, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "node 1" in status.stdout and "recovered" in status.stdout, status.stdout
    doc = json.loads(run_ddpctl("status", "st", "--on", "local", "-o", "json", cwd=tmp_path, timeout=60).stdout)
    assert doc["stragglers"]["current"] == [], doc["stragglers"]
    assert len(doc["stragglers"]["lines"]) == 2, doc["stragglers"]


def test_fail_stops_every_rank_after_the_same_step_with_202_naming_the_node(tmp_path: Path, quota: CpuQuota) -> None:
    code, lines, err, acted = _job(tmp_path, quota, "fail")
    assert code == protocol.EXIT_STRAGGLER, err  # `run` exits with the job's code
    assert "slowed" in acted, "the job never reached the step the test slows it at: nothing was tested"
    assert [n.node for n in map(protocol.straggler_line, lines) if n is not None] == [1], lines
    assert f"exit code {protocol.EXIT_STRAGGLER}" in err and "node 1" in err, err
    record = json.loads((tmp_path / "ddp-runs" / "st" / "run.json").read_text())
    assert record["attempt"] == 0, record  # a straggler ends the job: it is not restarted
    codes = {n["node"]: n.get("exitCode") for n in record["nodeStates"]}
    assert set(codes.values()) == {protocol.EXIT_STRAGGLER}, codes  # every node stopped the same way
    metrics_rank0 = [p for p in (tmp_path / "ddp-runs" / "st" / "checkpoints").glob("ckpt-*")]
    assert metrics_rank0, "the step it stopped at was not checkpointed"
    status = run_ddpctl("status", "st", "--on", "local", cwd=tmp_path, timeout=60)
    assert "node 1" in status.stdout + status.stderr, status.stdout
