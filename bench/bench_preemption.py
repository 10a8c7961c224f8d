"""Preemption costs: how long a checkpoint stalls training, and SIGTERM to a durable checkpoint.

1. stall: the trainer's own ``save_checkpoint`` (model + SGD momentum + RNG + position, written
   atomically with fsync) for resnet50 on CPU, against one optimizer step of the same trainer
   (batch 8, 64x64 images, one process). The baseline, in the same run, is a synchronous save
   (``background=False``, as the stop checkpoint is written), whose time *is* the stall. The
   trainer's save copies the state and leaves the writing to a background thread: its stall is
   the save call plus what the next 3 steps took beyond a step alone (the writer shares the
   cores). Both as ratios to one step; target for the background save <= 0.1 steps.
2. sigterm: the trainer (resnet50, one process) gets SIGTERM at an arbitrary moment after its
   first step; measured are the trainer's own figure (its ``preempted`` event: SIGTERM received
   to checkpoint renamed and fsynced, including finishing the step in progress) and the wall time
   from ``kill`` to the process's exit. Ratio against the default grace period (gracePeriod,
   120 s) and against torchrun's fixed 30 s wait before it SIGKILLs its workers.
   Target: SIGTERM to a durable checkpoint well inside the grace period (<= 0.25 of it).

    .venv/bin/python bench/bench_preemption.py [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
GRACE_PERIOD_S = 120.0  # the spec's default gracePeriod
TORCHRUN_WAIT_S = 30.0  # torchrun SIGKILLs its workers this long after forwarding SIGTERM
MODEL_ARGS = ["--model", "resnet50", "--image-size", "64", "--batch-size", "8", "--num-classes", "10"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_TRAINER_", "PET_", "TORCHELASTIC_"))}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update(OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "2"), PYTHONUNBUFFERED="1")
    return env


def bench_stall(repeats: int) -> dict[str, Any]:
    """In-process: the trainer object itself, one step vs one save_checkpoint, interleaved."""
    import torch
    import torch.nn.functional as F

    from ddpctl_trainer.config import parse_args
    from ddpctl_trainer.dist import DistContext
    from ddpctl_trainer.trainer import Trainer

    torch.set_num_threads(int(_env()["OMP_NUM_THREADS"]))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_args(
            [*MODEL_ARGS, "--synthetic-samples", "64", "--no-eval", "--checkpoint-dir", tmp, "--keep-last", "2"]
        )
        trainer = Trainer.from_config(cfg, DistContext(0, 0, 1, 1, 0, 0, "single"), torch.device("cpu"), "gloo")
        x = torch.randn(trainer.batch, 3, cfg.image_size, cfg.image_size)
        y = torch.randint(0, cfg.num_classes, (trainer.batch,))

        def step() -> float:
            t0 = time.perf_counter()
            F.cross_entropy(trainer.model(x), y).backward()
            trainer._optimizer_step()
            return time.perf_counter() - t0

        def save_sync() -> float:
            t0 = time.perf_counter()
            trainer.save_checkpoint(background=False)
            return time.perf_counter() - t0

        def save_background(window: int = 3) -> tuple[float, float]:
            """The steps lost to a background save: the save call (the state's copy) plus what the
            next `window` steps took beyond a step alone (the writer shares the cores with them)."""
            t0 = time.perf_counter()
            trainer.save_checkpoint()
            call = time.perf_counter() - t0
            after = sum(step() for _ in range(window))
            trainer.checkpointer.wait()
            return call, call + after - window * statistics.median(steps)

        steps = [step() for _ in range(2)]  # warm-up; also creates the momentum buffers a checkpoint carries
        syncs, backgrounds = [], []
        for _ in range(repeats):
            steps.append(step())
            syncs.append(save_sync())
            steps.append(step())
            backgrounds.append(save_background())
        size = max(p.stat().st_size for p in Path(tmp).glob("ckpt-*.pt"))
    step_s, save_s = statistics.median(steps), statistics.median(syncs)
    call_s, bg_s = statistics.median(c for c, _ in backgrounds), statistics.median(t for _, t in backgrounds)
    return {
        "step_s": step_s,
        "save_s": save_s,
        "save_over_step": save_s / step_s,
        "background_call_s": call_s,
        "background_stall_s": bg_s,
        "background_over_step": bg_s / step_s,
        "checkpoint_mb": size / 1e6,
        "write_mb_per_s": size / 1e6 / save_s,
    }


def _sigterm_once(workdir: Path) -> dict[str, float]:
    metrics = workdir / "metrics.jsonl"
    cmd = [PY, "-m", "ddpctl_trainer", *MODEL_ARGS, "--synthetic-samples", "2048", "--epochs", "1000", "--no-eval"]
    cmd += ["--progress", "none", "--checkpoint-dir", str(workdir / "ckpt"), "--metrics-file", str(metrics)]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while '"first_step"' not in (metrics.read_text() if metrics.exists() else ""):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the trainer did not reach its first step: {proc.communicate()[1][-2000:]}")
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=TORCHRUN_WAIT_S * 4)
        exit_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 128 + signal.SIGTERM:
        raise SystemExit(f"expected exit 143, got {proc.returncode}: {err[-2000:]}")
    events = [json.loads(line) for line in metrics.read_text().splitlines()]
    (preempted,) = [e for e in events if e["event"] == "preempted"]
    return {"signal_to_durable_s": float(preempted["signal_to_durable_s"]), "kill_to_exit_s": exit_s}


def bench_sigterm(repeats: int) -> dict[str, Any]:
    runs = []
    for i in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(_sigterm_once(Path(tmp) / str(i)))
    durable = statistics.median(r["signal_to_durable_s"] for r in runs)
    exit_s = statistics.median(r["kill_to_exit_s"] for r in runs)
    return {
        "signal_to_durable_s": durable,
        "signal_to_durable_max_s": max(r["signal_to_durable_s"] for r in runs),
        "kill_to_exit_s": exit_s,
        "of_grace_period": durable / GRACE_PERIOD_S,
        "of_torchrun_wait": durable / TORCHRUN_WAIT_S,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only", choices=("stall", "sigterm"), default=None)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    if args.only != "sigterm":
        results["stall"] = _report_stall(bench_stall(args.repeats))
    if args.only != "stall":
        results["sigterm"] = _report_sigterm(bench_sigterm(args.repeats))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def _report_stall(stall: dict[str, Any]) -> dict[str, Any]:
    print(
        f"stall: resnet50 checkpoint ({stall['checkpoint_mb']:.0f} MB), one step {stall['step_s']:.2f}s; a synchronous "
        f"save {stall['save_s']:.2f}s = {stall['save_over_step']:.2f} steps ({stall['write_mb_per_s']:.0f} MB/s); the "
        f"background save (the trainer's) returns after {stall['background_call_s']:.3f}s (the copy) and costs "
        f"{stall['background_stall_s']:.3f}s = {stall['background_over_step']:.2f} steps with the writer's share of "
        "the cores (target <= 0.1)"
    )
    return stall


def _report_sigterm(term: dict[str, Any]) -> dict[str, Any]:
    print(
        f"sigterm: to a durable checkpoint {term['signal_to_durable_s']:.2f}s median "
        f"(max {term['signal_to_durable_max_s']:.2f}s), to exit {term['kill_to_exit_s']:.2f}s; "
        f"{term['of_torchrun_wait']:.3f} of torchrun's {TORCHRUN_WAIT_S:.0f}s wait, "
        f"{term['of_grace_period']:.3f} of the {GRACE_PERIOD_S:.0f}s grace period (target <= 0.25)"
    )
    return term


if __name__ == "__main__":
    sys.exit(main())
