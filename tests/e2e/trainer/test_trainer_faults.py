"""Faults: a rank SIGKILLed mid-epoch under torchrun --max-restarts resumes from the last
checkpoint and ends with the weights of an uninterrupted run; a rank killed while writing a
checkpoint leaves the previous one loadable; corrupt files are skipped; SIGTERM tears down.

The faults come from the test plugin tests/support/models/faults.py, loaded into the trainer
through its --callback seam (DDP_TRAINER_CALLBACK)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
import torch

from tests.support.models.faults import hold_at, kill_at, kill_in_checkpoint, plugin_env
from tests.support.procs import with_env
from tests.support.trainer import (
    PY,
    Run,
    assert_same_params,
    clean_env,
    free_port,
    kill_tree,
    launch,
    start,
    static_node_command,
    tagged_pids,
    wait_all,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# 128 samples / global batch 16 = 8 steps per epoch, 2 epochs = 16 steps; a checkpoint every
# 3 steps (3, 6, 9, 12, 15) plus one at each epoch end (8, 16).
COMMON = [
    "--synthetic-samples",
    "128",
    "--eval-samples",
    "32",
    "--image-size",
    "8",
    "--num-classes",
    "4",
    "--global-batch-size",
    "16",
    "--epochs",
    "2",
    "--lr",
    "0.1",
    "--save-every",
    "3",
    "--keep-last",
    "3",
    "--log-every",
    "4",
    "--progress",
    "lines",
    "--scheduler",
    "cosine",
    "--save-final",
    "final.pt",
]
RESTART = ["--max-restarts", "1"]


@pytest.fixture(scope="module")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    root = tmp_path_factory.mktemp("faults")

    class Lazy(dict):
        def __missing__(self, strategy: str) -> Run:
            run = launch(root / strategy, [*COMMON, "--strategy", strategy], nproc=2)
            assert run.code == 0, run.explain()
            self[strategy] = run
            return run

    return Lazy()


def _resumes(run: Run) -> list[dict]:
    return run.events("resume")


def test_uninterrupted_run_keeps_the_last_k_checkpoints(baselines: dict[str, Run]) -> None:
    run = baselines["ddp"]
    names = sorted(p.name for p in (run.workdir / "ckpt").iterdir())
    assert names == ["ckpt-00000012.pt", "ckpt-00000015.pt", "ckpt-00000016.pt"]
    payload = torch.load(run.workdir / "ckpt" / "ckpt-00000016.pt", weights_only=True)
    assert (payload["epoch"], payload["step"], payload["batches_done"]) == (2, 16, 0)
    assert len(payload["rng"]) == 2 and payload["scheduler"]["last_epoch"] == 16
    assert payload["optimizer"]["state"], "optimizer state (momentum) must be saved"
    assert not _resumes(run)


def test_sigkill_mid_epoch_resumes_and_matches_uninterrupted(baselines: dict[str, Run], tmp_path: Path) -> None:
    run = launch(
        tmp_path,
        [*COMMON, "--strategy", "ddp"],
        nproc=2,
        torchrun_args=RESTART,
        env=plugin_env(kill_at(5, rank=1)),
    )
    assert run.code == 0, run.explain()
    assert "[fault] killing rank 1 at step 5" in run.err
    (resume,) = _resumes(run)
    assert (resume["step"], resume["epoch"], resume["batches_done"]) == (3, 0, 3)  # mid-epoch
    assert run.events("done")[-1]["step"] == 16
    assert_same_params(run.final(), baselines["ddp"].final(), atol=0.0)


def test_kill_during_checkpoint_write_keeps_previous_loadable(baselines: dict[str, Run], tmp_path: Path) -> None:
    run = launch(
        tmp_path,
        [*COMMON, "--strategy", "ddp"],
        nproc=2,
        torchrun_args=RESTART,
        env=plugin_env(kill_in_checkpoint(6)),
    )
    assert run.code == 0, run.explain()
    assert "SIGKILL to rank during checkpoint write of step 6" in run.err
    (resume,) = _resumes(run)
    assert resume["step"] == 3  # the half-written step-6 file never became a checkpoint
    assert_same_params(run.final(), baselines["ddp"].final(), atol=0.0)
    assert not [p for p in (tmp_path / "ckpt").iterdir() if ".tmp" in p.name]


def test_fsdp_sharded_checkpoint_resume_matches_uninterrupted(baselines: dict[str, Run], tmp_path: Path) -> None:
    run = launch(
        tmp_path,
        [*COMMON, "--strategy", "fsdp", "--fsdp-state-dict", "sharded"],
        nproc=2,
        torchrun_args=RESTART,
        env=plugin_env(kill_at(5, rank=0)),
    )
    assert run.code == 0, run.explain()
    (resume,) = _resumes(run)
    assert resume["step"] == 3
    assert (tmp_path / "ckpt" / "ckpt-00000016" / ".metadata").is_file()
    assert_same_params(run.final(), baselines["fsdp"].final(), atol=0.0)


def test_corrupt_and_partial_checkpoints_are_skipped_with_a_warning(tmp_path: Path) -> None:
    args = [
        "--synthetic-samples",
        "64",
        "--image-size",
        "8",
        "--global-batch-size",
        "16",
        "--save-every",
        "1",
        "--no-eval",
        "--progress",
        "none",
    ]
    first = launch(tmp_path, [*args, "--max-steps", "2"])
    assert first.code == 0, first.explain()
    ckpt = tmp_path / "ckpt"
    (ckpt / "ckpt-00000010.pt").write_bytes(b"not a checkpoint")
    data = (ckpt / "ckpt-00000002.pt").read_bytes()
    (ckpt / "ckpt-00000011.pt").write_bytes(data[: len(data) // 2])  # a partial copy
    torch.save({"format": "something-else"}, ckpt / "ckpt-00000012.pt")
    second = launch(tmp_path, [*args, "--max-steps", "3", "--keep-last", "2"])
    assert second.code == 0, second.explain()
    warnings = [line for line in second.err.splitlines() if "warning: skipping" in line]
    assert len(warnings) == 3, second.err
    resume = second.events("resume")[-1]
    assert resume["step"] == 2 and resume["path"].endswith("ckpt-00000002.pt")
    assert second.events("done")[-1]["step"] == 3
    # pruning keeps the newest 2 loadable checkpoints up to the one just written; the higher-step
    # files (unloadable here) neither count nor push ckpt-3 out, and are left for a human
    names = sorted(p.name for p in ckpt.iterdir())
    assert names == [
        "ckpt-00000002.pt",
        "ckpt-00000003.pt",
        "ckpt-00000010.pt",
        "ckpt-00000011.pt",
        "ckpt-00000012.pt",
    ], names
    assert torch.load(ckpt / "ckpt-00000003.pt", weights_only=True)["step"] == 3
    # --resume never next to a (loadable) later run: the new step-1 checkpoint survives its own prune
    third = launch(tmp_path, [*args, "--max-steps", "1", "--keep-last", "2", "--resume", "never"])
    assert third.code == 0, third.explain()
    assert "3 checkpoint(s) past step 1" not in third.err  # only loadable ones are reported
    assert "2 checkpoint(s) past step 1 from another run (newest ckpt-00000003.pt)" in third.err, third.err
    names = sorted(p.name for p in ckpt.iterdir())
    assert names == [
        "ckpt-00000001.pt",
        "ckpt-00000002.pt",
        "ckpt-00000003.pt",
        "ckpt-00000010.pt",
        "ckpt-00000011.pt",
        "ckpt-00000012.pt",
    ], names


def _start_nodes(
    workdir: Path, args: list[str], env: dict[str, str], nnodes: int = 2, launcher: str = "torch.distributed.run"
) -> list:
    """``nnodes`` torchrun agents of one process each, wired by hand with the static rendezvous
    (as each pod's torchrun is on a cluster); returns their Popen objects. ``launcher``: torchrun,
    or ``ddpctl_trainer.launch`` (torchrun with exit codes that keep the workers' reason)."""
    port = str(free_port())
    workdir.mkdir(parents=True, exist_ok=True)
    procs = []
    for node in range(nnodes):
        cmd = static_node_command(node, nnodes, 1, port, workdir, args, launcher)
        procs.append(start(cmd, workdir, clean_env(env)))
    return procs


def _wait_for_file(path: Path, procs: list, limit: float = 180) -> None:
    """Wait until the fault plugin's hold has created ``path`` (polling a file the trainer writes)."""
    deadline = time.monotonic() + limit
    while not path.exists():
        for p in procs:
            assert p.poll() is None, f"exited early with {p.returncode}: {p.communicate()}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _run_nodes(workdir: Path, args: list[str], env: dict[str, str] | None = None) -> Run:
    procs = _start_nodes(workdir, args, env or {})
    results = wait_all(procs, 300)
    codes = [p.returncode for p in procs]
    return Run(max(codes, key=abs), "".join(o for o, _ in results), "".join(e for _, e in results), workdir)


def test_sigterm_to_one_nodes_agent_checkpoints_that_step_and_resumes_with_zero_steps_lost(
    baselines: dict[str, Run], tmp_path: Path
) -> None:
    """Preemption of node 1: its agent forwards SIGTERM to its worker, which finishes step 5; both
    ranks agree to stop after step 5, rank 0 (on the other node) writes ckpt-5, every worker exits
    143. The whole group then starts again (as the engine restarts it) and resumes at step 5."""
    hold = tmp_path / "held"
    env = plugin_env(hold_at(5, rank=1, file=hold))
    args = [*COMMON, "--strategy", "ddp"]
    procs = _start_nodes(tmp_path, args, env, launcher="ddpctl_trainer.launch")
    try:
        _wait_for_file(hold, procs)  # rank 1 has finished step 5 and waits for a signal
        procs[1].send_signal(signal.SIGTERM)  # node 1's torchrun agent, as the kubelet would
        results = wait_all(procs, 120)
    finally:
        for p in procs:
            kill_tree(p.tag)  # type: ignore[attr-defined]
    node0_err, node1_err = results[0][1], results[1][1]
    # the launcher keeps the reason: node 1's agent was sent SIGTERM, node 0's worker exited 143
    assert [p.returncode for p in procs] == [143, 143], results
    assert "ddpctl-trainer.launch: stopped by SIGTERM; exit 143" in node1_err, node1_err
    assert "error: [rank 1] stopped by SIGTERM after step 5; checkpoint" in node1_err, node1_err
    assert "error: [rank 0] stopped by SIGTERM to another rank after step 5" in node0_err, node0_err
    assert "exitcode  : 143" in node0_err, node0_err  # torchrun's report of the worker's code
    first = Run(1, "", node0_err + node1_err, tmp_path)
    (preempted,) = first.events("preempted")
    assert preempted["step"] == 5 and not preempted["signalled"]  # rank 0 wrote it for rank 1
    assert ckpt_loadable(tmp_path / "ckpt" / "ckpt-00000005.pt")
    again = _run_nodes(tmp_path, args)  # no hold: the group restarts from the checkpoint
    assert again.code == 0, again.explain()
    (resume,) = again.events("resume")
    assert (resume["step"], resume["epoch"], resume["batches_done"]) == (5, 0, 5)  # 0 steps lost
    assert again.events("done")[-1]["step"] == 16
    assert_same_params(again.final(), baselines["ddp"].final(), atol=0.0)


def test_launcher_exits_2_on_a_usage_error_where_torchrun_exits_1(tmp_path: Path) -> None:
    """A pod's exit code is what failure rules see: a usage error must not look retriable."""
    bad = [*COMMON, "--global-batch-size", "1"]  # smaller than the world size: exit 2 on every rank
    plain = _run_nodes(tmp_path / "torchrun", bad)
    assert plain.code == 1, plain.explain()
    procs = _start_nodes(tmp_path / "launch", bad, {}, launcher="ddpctl_trainer.launch")
    results = wait_all(procs, 120)
    assert [p.returncode for p in procs] == [2, 2], results
    assert "ddpctl-trainer.launch: workers failed; exit 2" in results[0][1]


def test_sigkill_of_one_nodes_worker_then_group_restart_loses_only_steps_since_last_save(
    baselines: dict[str, Run], tmp_path: Path
) -> None:
    """Node loss: node 1's worker is SIGKILLed after step 5 (no chance to save); rank 0 sees its
    collective fail and stops; the group restarts from ckpt-3 (--save-every 3) and ends equal."""
    args = [*COMMON, "--strategy", "ddp"]
    first = _run_nodes(tmp_path, args, plugin_env(kill_at(5, rank=1)))
    assert first.code != 0 and "[fault] killing rank 1 at step 5" in first.err, first.explain()
    assert not first.events("preempted")
    again = _run_nodes(tmp_path, args)
    assert again.code == 0, again.explain()
    (resume,) = again.events("resume")
    assert resume["step"] == 3  # the newest save before the kill: steps 4 and 5 are trained again
    assert_same_params(again.final(), baselines["ddp"].final(), atol=0.0)


def test_a_rank_that_loses_its_peer_exits_138_and_names_it(tmp_path: Path) -> None:
    """Node loss seen from the survivor: node 1's worker is SIGKILLed (as the OOM killer or a dead
    node would end it) while rank 0 waits for it in the stop-flag all-reduce after step 5. Rank 0
    says which peer it lost and exits 138 (retried by every engine's rules, where 1 would fail a
    PyTorchJob for good); node 1's launcher reports its worker's death by SIGKILL (137)."""
    hold = tmp_path / "held"
    env = plugin_env(hold_at(5, rank=1, file=hold))
    procs = _start_nodes(tmp_path, [*COMMON, "--strategy", "ddp"], env, launcher="ddpctl_trainer.launch")
    try:
        _wait_for_file(hold, procs)  # rank 1 has finished step 5 and waits (its peer is waiting for it)
        os.kill(with_env(tagged_pids(procs[1].tag), "RANK", "1"), signal.SIGKILL)  # type: ignore[attr-defined]
        results = wait_all(procs, 120)
    finally:
        for p in procs:
            kill_tree(p.tag)  # type: ignore[attr-defined]
    node0_err, node1_err = results[0][1], results[1][1]
    assert [p.returncode for p in procs] == [138, 137], results
    lost = [line for line in node0_err.splitlines() if "error: [rank 0] lost a peer" in line]
    assert len(lost) == 1, node0_err
    assert re.search(
        r"lost a peer during all_reduce after step 5 \(.*(reset|closed) by peer.*\[127\.0\.0\.1\]:\d+.*\): "
        r"a collective failed because another rank stopped; exit 138 so the job restarts$",
        lost[0],
    ), lost[0]
    assert "Traceback" not in node0_err, node0_err
    assert "ddpctl-trainer.launch: workers failed; exit 138" in node0_err, node0_err
    assert "ddpctl-trainer.launch: workers failed; exit 137" in node1_err, node1_err
    assert ckpt_loadable(tmp_path / "ckpt" / "ckpt-00000003.pt")  # what the restarted group resumes from


def test_a_peer_lost_before_training_started_is_retried_too(tmp_path: Path) -> None:
    """Node 1's worker dies while it builds its model (a node lost while the job starts up, e.g.
    during a long data download), when the process group already works: node 0 waits for it in
    the setup all-reduce and exits 138 as well, not 1 (which a PyTorchJob would never retry)."""
    env = {"KILL_RANK": "1"}
    procs = _start_nodes(
        tmp_path,
        [*COMMON, "--model", "tests.support.models.fault_models:killed_while_built"],
        env,
        launcher="ddpctl_trainer.launch",
    )
    results = wait_all(procs, 120)
    node0_err, node1_err = results[0][1], results[1][1]
    assert [p.returncode for p in procs] == [138, 137], results
    assert "[fault] rank 1 killed while building its model" in node1_err, node1_err
    # rank 0 built its model and waits for rank 1 in DDP's constructor (it checks and broadcasts the model)
    lost = "error: [rank 0] lost a peer during DDP's start-up sync of the model before training started ("
    assert lost in node0_err, node0_err
    assert "Traceback" not in node0_err, node0_err
    assert not (tmp_path / "ckpt").exists() or not list((tmp_path / "ckpt").iterdir())


SINGLE = [*COMMON, "--save-every", "2", "--no-eval"]


def _signal_when_held(tmp_path: Path, args: list[str], *faults: dict[str, str]) -> tuple[int, str]:
    """One process, held after step 3 (and `faults`); SIGTERM it there and collect (exit code, stderr)."""
    hold = tmp_path / "held"
    cmd = [PY, "-m", "ddpctl_trainer", "--checkpoint-dir", str(tmp_path / "ckpt")]
    cmd += ["--metrics-file", str(tmp_path / "metrics.jsonl"), *args]
    proc = start(cmd, tmp_path, clean_env(plugin_env(hold_at(3, file=hold), *faults)))
    try:
        _wait_for_file(hold, [proc])
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc.tag)  # type: ignore[attr-defined]
    return proc.returncode, err


def test_sigterm_mid_epoch_writes_that_step_and_exits_143(tmp_path: Path) -> None:
    code, err = _signal_when_held(tmp_path, SINGLE)
    assert code == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1].startswith("ddpctl-trainer: error: stopped by SIGTERM after step 3;"), err
    assert "Traceback" not in err
    assert ckpt_loadable(tmp_path / "ckpt" / "ckpt-00000003.pt")
    (preempted,) = Run(code, "", err, tmp_path).events("preempted")
    assert preempted["signalled"] and preempted["signal_to_durable_s"] > 0


def test_second_sigterm_during_the_save_keeps_the_previous_checkpoint_loadable(tmp_path: Path) -> None:
    """The grace period's end (or a second SIGTERM) half-way through the stop checkpoint: the
    temp file is dropped and the newest loadable checkpoint is the one before."""
    code, err = _signal_when_held(tmp_path, SINGLE, kill_in_checkpoint(3, "TERM"))
    assert code == 128 + signal.SIGTERM, err
    assert "SIGTERM to rank during checkpoint write of step 3" in err
    assert "stopped by a second SIGTERM before the checkpoint was written; the previous one is kept" in err
    assert "Traceback" not in err
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert names == ["ckpt-00000002.pt"], names  # no temp file, no partial ckpt-3
    assert ckpt_loadable(tmp_path / "ckpt" / "ckpt-00000002.pt")
    again = launch(tmp_path, [*SINGLE, "--max-steps", "4"])
    assert again.code == 0, again.explain()
    assert again.events("resume")[-1]["step"] == 2


def ckpt_loadable(path: Path) -> bool:
    from ddpctl_trainer.checkpoint import is_loadable

    return path.is_file() and is_loadable(path)


def test_collective_timeout_ends_a_wait_for_a_hung_rank(tmp_path: Path) -> None:
    """Rank 1 hangs after step 3 (the fault plugin's hold: alive, never joining the next collective); with
    --timeout-s 5 rank 0's collective fails instead of waiting PyTorch's 30 minutes (or our 600 s),
    and the job ends: the test's own 120 s limit would fail it otherwise."""
    args = [*COMMON, "--strategy", "ddp", "--timeout-s", "5", "--stall-timeout", "0"]  # no watchdog: the timeout acts
    env = plugin_env(hold_at(3, rank=1, file=tmp_path / "h"))
    run = launch(tmp_path, args, nproc=2, env=env, timeout=120)
    assert run.code != 0, run.explain()
    # a timeout is not a lost peer (a slow or hung peer may come back; 138 would not be counted):
    # a plain failure, exit 1, that names the timeout (the hung rank 1 then loses rank 0: 138; the
    # node's own cause wins)
    assert run.code == 1 and "[rank 0] lost a peer" not in run.err, run.explain()
    assert "[rank 0] a collective failed: Timed out waiting 5000ms" in run.err, run.explain()
    assert not run.events("done")
