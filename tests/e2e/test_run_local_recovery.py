"""`ddpctl run --local --recovery pod` as a user runs it: three nodes, each a torchrun agent of its
own, meet through the job's coordinator; a node whose worker is SIGKILLed after a known step (the
OOM killer's way) is started again alone, the others keep training in the same processes and hand
it their state, and the job ends with the weights of an uninterrupted run. A usage error is never
replaced. Real processes, gloo on loopback; waits are on process exits, never on sleeps."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import wait_until
from tests.support.models.faults import env_flags, hold_at, kill_at, plugin_env
from tests.support.procs import ddpctl_env, run_ddpctl, start_ddpctl, stop_like_a_user

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

LAYOUT = ["run", "--local", "--nodes", "3", "--procs", "1"]
# 72 samples / global batch 12 = 6 steps an epoch, 2 epochs: 12 steps, float64
TRAINER = [
    "--",
    "--progress",
    "lines",
    "--synthetic-samples",
    "72",
    "--eval-samples",
    "24",
    "--image-size",
    "8",
    "--num-classes",
    "4",
    "--global-batch-size",
    "12",
    "--epochs",
    "2",
    "--dtype",
    "float64",
    "--save-final",
    "final.pt",
]
KILLED_AT = 4


def _weights(path: Path) -> dict[str, Any]:
    import torch

    return dict(torch.load(path, weights_only=True)["model"])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cwd = tmp_path_factory.mktemp("uninterrupted")
    run = run_ddpctl(*LAYOUT, *TRAINER, cwd=cwd)
    assert run.returncode == 0, run.stderr[-3000:]
    return _weights(cwd / "final.pt")


@pytest.mark.parametrize("lost", [1, 0])
def test_a_killed_node_is_started_again_alone_and_no_step_is_lost(
    uninterrupted: dict[str, Any], tmp_path: Path, lost: int
) -> None:
    import torch

    hook = env_flags(plugin_env(kill_at(KILLED_AT, rank=lost)))
    run = run_ddpctl(*LAYOUT, "--recovery", "pod", *hook, *TRAINER, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    said = f"ddpctl: node {lost} exited with code 137; starting it again alone (replacement 1 of 3)"
    assert said in run.stderr, run.stderr[-3000:]
    assert run.stderr.count("starting it again alone") == 1
    for survivor in {0, 1, 2} - {lost}:  # the survivors' own processes saw the loss and went on
        assert f"[rank {survivor}] lost a peer after step {KILLED_AT}" in run.stdout + run.stderr
    joined = (
        f"[rank {lost}] ddpctl-trainer: recovery: replaced a lost process: joined the running job at step {KILLED_AT}"
    )
    assert joined in run.stdout + run.stderr
    if lost:  # rank 0 survived: its line names the node that joined (status pairs by it)
        assert f"the group formed again (generation 1, node {lost} joined)" in run.stdout + run.stderr
    status = run_ddpctl("status", "ddp-train", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert re.search(
        rf"Recoveries: +node {lost} exited with code 137: back at step {KILLED_AT} after [0-9.]+ s, no step lost",
        status.stdout,
    ), status.stdout
    listed = run_ddpctl("list", cwd=tmp_path).stdout.splitlines()
    assert listed[0].split()[4] == "RECOVERIES" and listed[1].split()[4] == "1", listed
    logs = tmp_path / "ddp-runs" / "ddp-train" / "logs"
    assert sorted(p.name for p in logs.glob("*.log")) == ["node-0.log", "node-1.log", "node-2.log"]  # no group restart
    assert said.removeprefix("ddpctl: ") in (logs / f"node-{lost}.log").read_text()  # one log, both processes
    ours = _weights(tmp_path / "final.pt")
    assert ours.keys() == uninterrupted.keys()
    for key in ours:
        torch.testing.assert_close(ours[key], uninterrupted[key], atol=1e-12, rtol=0)


def test_a_usage_error_is_not_replaced(tmp_path: Path) -> None:
    run = run_ddpctl(*LAYOUT, "--recovery", "pod", "--", "--synthetic-samples", "-5", cwd=tmp_path)
    assert run.returncode == 2, run.stderr[-3000:]
    assert "starting it again alone" not in run.stderr


def test_a_warm_spare_takes_the_lost_nodes_place(uninterrupted: dict[str, Any], tmp_path: Path) -> None:
    """--spares 1: a node process started ahead (torch imported) takes node 1's place at once, and
    a new spare starts behind it; the job ends as an uninterrupted run does."""
    import torch

    hook = env_flags(plugin_env(kill_at(KILLED_AT, rank=1)))
    run = run_ddpctl(*LAYOUT, "--recovery", "pod", "--spares", "1", *hook, *TRAINER, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (
        "ddpctl: node 1 exited with code 137; a warm spare (spare 0) takes its place (replacement 1 of 3)" in run.stderr
    )
    assert "starting it again alone" not in run.stderr
    logs = tmp_path / "ddp-runs" / "ddp-train" / "logs"
    assert (logs / "spare-0.log").is_file() and (logs / "spare-1.log").is_file()  # the one used, the one behind it
    assignment = json.loads((tmp_path / "ddp-runs" / "ddp-train" / "spares" / "spare-0.json").read_text())
    assert assignment["env"]["DDP_NODE_RANK"] == "1" and "PATH" not in assignment["env"]  # its place, nothing shared
    ours = _weights(tmp_path / "final.pt")
    for key in ours:
        torch.testing.assert_close(ours[key], uninterrupted[key], atol=1e-12, rtol=0)


def _coordinator(runner: int) -> int | None:
    """The pid of the runner's coordinator process (its child), None while there is none."""
    for pid in Path(f"/proc/{runner}/task/{runner}/children").read_text().split():
        try:
            if b"ddpctl_trainer.coordinator" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return int(pid)
        except OSError:  # it exited between the two reads
            continue
    return None


def test_a_lost_coordinator_is_started_again_and_a_node_that_alone_gets_sigterm_is_replaced(
    uninterrupted: dict[str, Any], tmp_path: Path
) -> None:
    """An eviction, run here, after the coordinator was lost: node 1's trainer is held after step 4;
    the coordinator is SIGKILLed and the runner starts another at its port (as its Job would); then
    node 1's trainer alone gets SIGTERM. It leaves after step 5 (143) with nothing to write, the
    runner starts it again alone without counting it against --backoff-limit, the others tell the
    new coordinator what it knew and hand the new node their state."""
    import os
    import signal

    import torch

    held = tmp_path / "held"
    hook = env_flags(plugin_env(hold_at(KILLED_AT, rank=1, file=held)))
    proc = start_ddpctl([*LAYOUT, "--recovery", "pod", "--backoff-limit", "1", *hook, *TRAINER], tmp_path, ddpctl_env())
    try:
        wait_until("node 1 held after step 4", lambda: held.exists() or proc.poll() is not None, 240)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        lost = _coordinator(proc.pid)
        assert lost is not None
        os.kill(lost, signal.SIGKILL)
        again = lambda: _coordinator(proc.pid) not in (None, lost) or proc.poll() is not None
        wait_until("a new coordinator", again, 60)
        os.kill(int(held.read_text().split()[1]), signal.SIGTERM)
        out, err = proc.communicate(timeout=240)
    finally:
        stop_like_a_user(proc)  # on a failure: its nodes too, not only ddpctl
    assert proc.returncode == 0, err[-3000:]
    assert "ddpctl: the job's coordinator was killed by SIGKILL; starting it again on port" in err, err[-3000:]
    assert "the coordinator was replaced: told the new one this rank's generation" in out + err, (out + err)[-3000:]
    assert (
        "node 1 left alone (a SIGTERM to it alone, or --stragglers replace); starting it again alone (not counted)"
        in err
    ), err[-3000:]
    assert f"after step {KILLED_AT + 1}; left alone" in out + err
    status = run_ddpctl("status", "ddp-train", cwd=tmp_path)
    assert re.search(rf"Recoveries: +node 1 left alone: back at step {KILLED_AT + 1} after", status.stdout)
    ours = _weights(tmp_path / "final.pt")
    for key in ours:
        torch.testing.assert_close(ours[key], uninterrupted[key], atol=1e-12, rtol=0)
