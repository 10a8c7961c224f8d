"""Pod recovery in the built-in trainer: three nodes, each a torchrun of its own (--nnodes 1), meet
through the job's coordinator; one node is SIGKILLed after a known step and started again alone.
The survivors keep running (the same processes), form the group again with the replacement, hand
it their state from memory, and the job ends with the weights of an uninterrupted run: no step is
lost and no checkpoint is read."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from ddpctl_trainer.protocol import (
    COORDINATOR_ENV,
    JOB_NODE_RANK_ENV,
    JOB_WORLD_SIZE_ENV,
    LEFT_ALONE,
    NODE_FIRST_RANK_ENV,
)
from tests.support.cluster import wait_until
from tests.support.models.faults import hold_at, kill_at, plugin_env
from tests.support.trainer import PY, TINY, Run, assert_same_params, clean_env, kill_tree, launch, start

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

NODES = 3
# 72 samples / global batch 12 = 6 steps an epoch, 2 epochs: 12 steps
ARGS = [
    *TINY,
    "--synthetic-samples",
    "72",
    "--dtype",
    "float64",
    "--global-batch-size",
    "12",
    "--epochs",
    "2",
    "--lr",
    "0.1",
    "--momentum",
    "0.9",
    "--seed",
    "3",
    "--strategy",
    "ddp",
    "--save-final",
    "final.pt",
]
KILLED_AT = 4  # mid-epoch 0
ATOL = 1e-12


class Drained:
    """A started process whose output is read as it comes (a full pipe would stall it mid-collective)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.out, self.err = proc, [], []
        self._threads = [
            threading.Thread(target=lambda s=stream, into=into: into.extend(s), daemon=True)  # type: ignore[misc]
            for stream, into in ((proc.stdout, self.out), (proc.stderr, self.err))
        ]
        for t in self._threads:
            t.start()

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        for t in self._threads:
            t.join(30)
        return code

    @property
    def text(self) -> str:
        return "".join(self.out) + "".join(self.err)


def _node(workdir: Path, node: int, port: int, extra_env: dict[str, str]) -> Drained:
    cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", "-m", "ddpctl_trainer"]
    cmd += ["--checkpoint-dir", str(workdir / "ckpt"), "--metrics-file", str(workdir / "metrics.jsonl"), *ARGS]
    env = {
        COORDINATOR_ENV: f"127.0.0.1:{port}",
        JOB_NODE_RANK_ENV: str(node),
        NODE_FIRST_RANK_ENV: str(node),
        JOB_WORLD_SIZE_ENV: str(NODES),
        **extra_env,
    }
    return Drained(start(cmd, workdir, clean_env(env)))


def _coordinator(workdir: Path, port: int = 0, *args: str) -> tuple[subprocess.Popen[str], int]:
    """A coordinator process on loopback (at `port`; 0 picks one) and the port it listens on."""
    proc = start(
        [PY, "-m", "ddpctl_trainer.coordinator", "--host", "127.0.0.1", "--port", str(port), *args],
        workdir,
        clean_env(),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the coordinator says where it listens once it does
    assert "coordinator listening on port" in line, line
    return proc, int(line.split()[-1])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Run:
    run = launch(tmp_path_factory.mktemp("recovery") / "uninterrupted", ARGS, nproc=NODES)
    assert run.code == 0, run.explain()
    return run


@pytest.mark.parametrize("lost", [1, 0])
def test_a_lost_node_is_replaced_alone_and_the_job_loses_no_step(uninterrupted: Run, tmp_path: Path, lost: int) -> None:
    coordinator, port = _coordinator(tmp_path)
    try:
        nodes = [_node(tmp_path, n, port, plugin_env(kill_at(KILLED_AT, rank=lost))) for n in range(NODES)]
        assert nodes[lost].wait(240) != 0, nodes[lost].text
        assert f"[fault] killing rank {lost} at step {KILLED_AT}" in nodes[lost].text
        replacement = _node(tmp_path, lost, port, {})  # no fault this time: a new process, as a new pod is
        survivors = [n for i, n in enumerate(nodes) if i != lost]
        codes = [n.wait(240) for n in (*survivors, replacement)]
        assert codes == [0, 0, 0], "\n---\n".join(n.text[-3000:] for n in (*survivors, replacement))
    finally:
        kill_tree(coordinator.tag)  # type: ignore[attr-defined]
    for survivor in survivors:  # the same processes trained on: they saw the loss and recovered
        assert f"lost a peer after step {KILLED_AT}" in survivor.text, survivor.text[-3000:]
    run = Run(0, "", "", tmp_path)
    # rank 0 writes the metrics: it recovered, or (lost itself) its replacement joined at that step
    (back,) = run.events("rejoined" if lost == 0 else "recovered")
    assert back["step"] == KILLED_AT and back["generation"] == 1, run.events()
    assert f"joined the running job at step {KILLED_AT}" in replacement.text, replacement.text[-3000:]
    assert not run.events("resume"), "no checkpoint was read: the state came from the survivors' memory"
    assert run.events("done")[-1]["step"] == 12
    assert_same_params(run.final(), uninterrupted.final(), atol=ATOL)


def test_with_no_survivor_the_replacements_resume_from_the_checkpoint(uninterrupted: Run, tmp_path: Path) -> None:
    """Every node lost at once: nobody holds the state in memory, so the replacements take it from
    the newest checkpoint (here the finished job's last one: they train nothing more) instead of
    starting from step 0."""
    coordinator, port = _coordinator(tmp_path)
    try:
        first = [_node(tmp_path, n, port, {}) for n in range(NODES)]
        assert [n.wait(240) for n in first] == [0, 0, 0]
        again = [_node(tmp_path, n, port, {}) for n in range(NODES)]  # each rank ran before: all replacements
        codes = [n.wait(240) for n in again]
        assert codes == [0, 0, 0], "\n---\n".join(n.text[-3000:] for n in again)
    finally:
        kill_tree(coordinator.tag)  # type: ignore[attr-defined]
    run = Run(0, "", "", tmp_path)
    (back,) = run.events("rejoined")
    assert back["step"] == 12 and back["generation"] == 1  # the checkpoint's step, not 0
    assert_same_params(run.final(), uninterrupted.final(), atol=ATOL)


def test_a_sigterm_to_one_node_makes_it_leave_alone_and_nothing_is_lost(uninterrupted: Run, tmp_path: Path) -> None:
    """An evicted pod: node 1 alone gets SIGTERM (held after step 4 until it arrives). The stop
    vote sees one node asked, not all, twice in a row: node 1 leaves after step 5 with 143 and
    writes nothing, the others form the group again with its replacement and hand it their state."""
    import os
    import signal

    coordinator, port = _coordinator(tmp_path)
    held = tmp_path / "held"
    try:
        nodes = [_node(tmp_path, n, port, plugin_env(hold_at(KILLED_AT, rank=1, file=held))) for n in range(NODES)]
        wait_until("node 1 held after step 4", lambda: held.exists() or nodes[1].proc.poll() is not None, 240)
        assert nodes[1].proc.poll() is None, nodes[1].text
        os.killpg(nodes[1].proc.pid, signal.SIGTERM)  # torchrun and its worker, as the kubelet's SIGTERM reaches a pod
        assert nodes[1].wait(240) != 0, nodes[1].text
        replacement = _node(tmp_path, 1, port, {})
        codes = [n.wait(240) for n in (nodes[0], nodes[2], replacement)]
        assert codes == [0, 0, 0], "\n---\n".join(n.text[-3000:] for n in (nodes[0], nodes[2], replacement))
    finally:
        kill_tree(coordinator.tag)  # type: ignore[attr-defined]
    assert f"after step {KILLED_AT + 1}; {LEFT_ALONE}" in nodes[1].text, nodes[1].text[-3000:]
    run = Run(0, "", "", tmp_path)
    (back,) = run.events("recovered")
    assert back["step"] == KILLED_AT + 1, run.events()  # the step it left after: nothing to redo
    assert not run.events("resume") and not run.events("preempted"), "no checkpoint written or read"
    assert_same_params(run.final(), uninterrupted.final(), atol=ATOL)


def test_a_lost_coordinator_is_replaced_and_the_next_lost_node_still_is(uninterrupted: Run, tmp_path: Path) -> None:
    """The coordinator's pod lost after the group formed (rank 0 held after step 2 meanwhile) and a
    new, empty one started at its address, as its Job does: training goes on; when node 1 is then
    SIGKILLed after step 4, the survivors reconnect, tell the new coordinator the generations, and
    its replacement joins as after any loss. The new coordinator ends with the training."""
    held = tmp_path / "held"
    first, port = _coordinator(tmp_path)
    second = None
    try:
        faults = plugin_env(hold_at(2, rank=0, file=held, until_go=True), kill_at(KILLED_AT, rank=1))
        nodes = [_node(tmp_path, n, port, faults) for n in range(NODES)]
        wait_until("rank 0 held after step 2", lambda: held.exists() or nodes[0].proc.poll() is not None, 240)
        kill_tree(first.tag)  # type: ignore[attr-defined]
        first.wait(30)
        second, _ = _coordinator(tmp_path, port, "--world-size", str(NODES))
        held.with_name(held.name + ".go").write_text("go")
        assert nodes[1].wait(240) != 0, nodes[1].text
        replacement = _node(tmp_path, 1, port, {})
        survivors = [nodes[0], nodes[2]]
        codes = [n.wait(240) for n in (*survivors, replacement)]
        assert codes == [0, 0, 0], "\n---\n".join(n.text[-3000:] for n in (*survivors, replacement))
        out, _ = second.communicate(timeout=60)  # it ends by itself: every rank reported to it
        assert second.returncode == 0 and f"all {NODES} ranks finished" in out, out
    finally:
        for proc in (first, second):
            if proc is not None:
                kill_tree(proc.tag)  # type: ignore[attr-defined]
    for survivor in survivors:
        assert "the coordinator was replaced" in survivor.text, survivor.text[-3000:]
    assert f"joined the running job at step {KILLED_AT}" in replacement.text, replacement.text[-3000:]
    run = Run(0, "", "", tmp_path)
    (back,) = run.events("recovered")
    assert back["step"] == KILLED_AT and back["generation"] == 1, run.events()
    assert not run.events("resume"), "no checkpoint was read"
    assert_same_params(run.final(), uninterrupted.final(), atol=ATOL)
