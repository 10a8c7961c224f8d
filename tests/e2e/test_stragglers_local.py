"""Stragglers named during training: real gloo jobs through `ddpctl run --local` (3 nodes x 1
process, the ddpctl trainer) whose node 1 is slowed from outside after its step 30 (a tightened
CPU quota, tests/support/stragglers.py), and lifted again once it is named.

* warn: node 1 is named within `windows` + 1 windows of the slowdown, nobody else ever is, it is
  said to have recovered after the quota is lifted, and `ddpctl status` shows both;
* fail: every rank stops after the same step with exit 202, after a checkpoint of it; the run is
  not retried, and the failure and `status` name the node.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpctl_trainer import protocol
from tests.support import skip_unless
from tests.support.cpu_quota import CpuQuota, unavailable
from tests.support.procs import run_ddpctl
from tests.support.stragglers import run_job, since

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EVERY, WINDOWS = protocol.STRAGGLER_EVERY, protocol.STRAGGLER_WINDOWS
# node 1 slowed to 0.3 of the CPU it was measured to use from its step 10 to 30: a share of its own
# use, not a fixed quota, stays ~0.3 x the median however loaded the machine is, and takes half
# the time of the fixed 0.08 CPU this used (~0.15 x) to judge
SHARE = 0.3
LOG_EVERY = 5  # the job's progress cadence: when the test sees a step, up to 5 more may have run


@pytest.fixture
def quota() -> Iterator[CpuQuota]:
    reason = unavailable()
    skip_unless(reason is None, f"slowing a node needs a CPU quota: {reason}")
    with CpuQuota(None) as q:
        yield q


def test_a_node_slowed_mid_run_is_named_said_to_recover_and_shown_by_status(tmp_path: Path, quota: CpuQuota) -> None:
    run = run_job(tmp_path, quota, "warn", share=SHARE, lift=True, epochs=10)  # 110 steps: named by 60, back by 100
    assert run.code == 0, run.stderr
    assert "slowed" in run.acted, "the job never reached the step the test slows it at: nothing was tested"
    assert [(n.kind, n.node) for n in run.notes()] == [("straggler", 1), ("recovered", 1)], run.lines
    slowed = run.acted["slowed"]
    # its window is the one the slowdown began in, and it is named within windows + 1 windows of it
    assert slowed - EVERY - LOG_EVERY < since(run.lines[0]) <= slowed + EVERY, (run.acted, run.lines)
    assert run.acted["lifted"] <= slowed + (WINDOWS + 1) * EVERY + LOG_EVERY, (run.acted, run.lines)
    assert "node 1 (pod st-1" in run.lines[0] and "(rank 1)" in run.lines[0], run.lines[0]

    status = run_ddpctl("status", "st", "--on", "local", cwd=tmp_path, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "node 1" in status.stdout and "recovered" in status.stdout, status.stdout
    doc = json.loads(run_ddpctl("status", "st", "--on", "local", "-o", "json", cwd=tmp_path, timeout=60).stdout)
    assert doc["stragglers"]["current"] == [], doc["stragglers"]
    assert len(doc["stragglers"]["lines"]) == 2, doc["stragglers"]


def test_fail_stops_every_rank_after_the_same_step_with_202_naming_the_node(tmp_path: Path, quota: CpuQuota) -> None:
    run = run_job(tmp_path, quota, "fail", share=SHARE)
    assert run.code == protocol.EXIT_STRAGGLER, run.stderr  # `run` exits with the job's code
    assert "slowed" in run.acted, "the job never reached the step the test slows it at: nothing was tested"
    assert run.named() == [1], run.lines
    assert f"stopped for a straggler (exit {protocol.EXIT_STRAGGLER}): node 1 (pod st-1" in run.stderr, run.stderr
    record = json.loads((tmp_path / "ddp-runs" / "st" / "run.json").read_text())
    assert record["attempt"] == 0, record  # a straggler ends the job: it is not restarted
    assert {n.get("exitCode") for n in record["nodeStates"]} == {protocol.EXIT_STRAGGLER}, record["nodeStates"]
    # the step it stopped after (the last of the windows that named the node) was checkpointed
    stopped_after = since(run.lines[0]) + WINDOWS * EVERY - 1
    saved = sorted((tmp_path / "ddp-runs" / "st" / "checkpoints").glob("ckpt-*.pt"))
    assert saved and protocol.checkpoint_step(saved[-1].name) == stopped_after, (saved, run.lines)
    status = run_ddpctl("status", "st", "--on", "local", cwd=tmp_path, timeout=60)
    assert "node 1" in status.stdout, status.stdout


def test_replace_makes_the_slow_nodes_pod_leave_and_starts_it_again_alone(tmp_path: Path, quota: CpuQuota) -> None:
    """--stragglers replace under --recovery pod: once node 1 is named, its process leaves after that
    step (143, nothing written) and is started again alone, not counted; the others keep training
    in the same processes and hand it their state; the job ends 0."""
    run = run_job(tmp_path, quota, "replace", share=SHARE, lift=True, recovery="pod")
    assert run.code == 0, run.stderr
    assert "slowed" in run.acted, "the job never reached the step the test slows it at: nothing was tested"
    assert run.named() == [1], run.lines
    node_log = (tmp_path / "ddp-runs" / "st" / "logs" / "node-1.log").read_text()
    assert "its pod leaves to be replaced (--stragglers replace)" in node_log, node_log[-3000:]
    assert "node 1 left alone (a SIGTERM to it alone, or --stragglers replace); starting it again alone" in run.stderr
    status = run_ddpctl("status", "st", "--on", "local", cwd=tmp_path, timeout=60)
    assert "Recoveries:" in status.stdout and "node 1 left alone: back at step" in status.stdout, status.stdout
