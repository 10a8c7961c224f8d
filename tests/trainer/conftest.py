"""Helpers for the trainer tests: run the trainer as real processes (python or torchrun).

Every multi-process test launches ``python -m torch.distributed.run`` (torchrun) as a
subprocess with a timeout and ``OMP_NUM_THREADS=1``; nothing synchronises by sleeping.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import torch

PY = sys.executable
PROG_PREFIX = "ddpctl-trainer: error:"

# Small, fast settings shared by most runs: float64 so "equal" can be tested tightly.
TINY = ["--synthetic-samples", "64", "--eval-samples", "61", "--image-size", "8", "--num-classes", "4",
        "--log-every", "2", "--progress", "lines"]


@dataclass
class Run:
    code: int
    out: str
    err: str
    workdir: Path

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        path = self.workdir / "metrics.jsonl"
        if not path.exists():
            return []
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [r for r in rows if name is None or r["event"] == name]

    def final(self, rank: int | None = None) -> dict[str, torch.Tensor]:
        name = "final.pt" if rank is None else f"final-{rank}.pt"
        return torch.load(self.workdir / name, weights_only=True)["model"]

    def explain(self) -> str:
        return f"exit {self.code}\n--- stdout ---\n{self.out[-4000:]}\n--- stderr ---\n{self.err[-6000:]}"


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment minus anything that would make the trainer think it is distributed."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(("PET_", "DDP_TRAINER_", "TORCHELASTIC_")) or k in (
               "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
               "JOB_COMPLETION_INDEX"))}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if "GLOO_SOCKET_IFNAME" not in env and os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # test hosts often map their hostname to 127.0.0.1
    env.update(extra or {})
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(workdir: Path, args: Sequence[str], nproc: int | None = None, env: dict[str, str] | None = None,
           torchrun_args: Sequence[str] = (), timeout: float = 240, metrics: bool = True) -> Run:
    """Run the trainer in ``workdir``: with ``nproc`` under torchrun --standalone, else plain python."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [PY]
    if nproc is not None:
        cmd += ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *torchrun_args]
    cmd += ["-m", "ddpctl_trainer", "--checkpoint-dir", str(workdir / "ckpt"), *args]
    if metrics:
        cmd += ["--metrics-file", str(workdir / "metrics.jsonl")]
    # A session of its own, so a timeout kills torchrun *and* its workers, leaving no orphans.
    proc = subprocess.Popen(cmd, cwd=workdir, env=clean_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"timed out after {timeout}s: {' '.join(cmd)}\n{out[-3000:]}\n{err[-3000:]}") from None
    return Run(proc.returncode, out, err, workdir)


def assert_same_params(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0, msg=lambda m, k=k: f"{k}: {m}")


@pytest.fixture(scope="session")
def trainer_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trainer")
