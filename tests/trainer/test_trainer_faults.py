"""Faults: a rank SIGKILLed mid-epoch under torchrun --max-restarts resumes from the last
checkpoint and ends with the weights of an uninterrupted run; a rank killed while writing a
checkpoint leaves the previous one loadable; corrupt files are skipped; SIGTERM tears down."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import torch

from .conftest import PY, Run, assert_same_params, clean_env, kill_tree, launch, start

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
        env={"DDP_TRAINER_FAULT_AT_STEP": "5", "DDP_TRAINER_FAULT_RANK": "1"},
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
        env={"DDP_TRAINER_FAULT_IN_CHECKPOINT": "6"},
    )
    assert run.code == 0, run.explain()
    assert "killing rank during checkpoint write of step 6" in run.err
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
        env={"DDP_TRAINER_FAULT_AT_STEP": "5", "DDP_TRAINER_FAULT_RANK": "0"},
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


def test_sigterm_tears_down_cleanly(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    cmd = [
        PY,
        "-m",
        "ddpctl_trainer",
        "--epochs",
        "100000",
        "--image-size",
        "8",
        "--progress",
        "none",
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        "--metrics-file",
        str(metrics),
    ]
    proc = start(cmd, tmp_path, clean_env())
    try:
        deadline = time.monotonic() + 120
        while '"first_step"' not in (metrics.read_text() if metrics.exists() else ""):  # wait for an event
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the trainer never reached its first step"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc.tag)  # type: ignore[attr-defined]
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == "ddpctl-trainer: error: stopped by SIGTERM"
    assert "Traceback" not in err
