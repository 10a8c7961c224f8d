"""How long `ddpctl render` takes as a fresh process, against TorchX's dry run of the same job.

Both render a 2-node x 4-GPU job for Kubernetes (ddpctl: a PyTorchJob; TorchX: its dist.ddp
component for the kubernetes scheduler, a Volcano job) as new processes, alternating, in the same
run; it prints the medians and their ratio. TorchX lives in its own venv (.cache/torchx-venv:
torchx pins urllib3<1.27, which the kubernetes client of ddpctl's venv does not accept), made on
first use from PyPI. Target: ddpctl at most 1/8 of TorchX's time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TORCHX_VENV = REPO / ".cache" / "torchx-venv"


def ensure_torchx() -> Path:
    exe = TORCHX_VENV / "bin" / "torchx"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(TORCHX_VENV)], check=True)
        subprocess.run([str(TORCHX_VENV / "bin" / "pip"), "install", "-q", "torchx[kubernetes]"], check=True)
    return exe


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed: {proc.stderr.decode()[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    opts = parser.parse_args()
    torchx = ensure_torchx()
    ddpctl = Path(sys.executable).with_name("ddpctl")
    # An installed wheel ships compiled bytecode; an editable checkout may not have it yet.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "cli")], check=True, stdout=subprocess.DEVNULL)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "train.py").write_text("print('train')\n")
        ddpctl_cmd = [str(ddpctl), "render", "-t", "pytorchjob", "--nodes", "2", "--gpus", "4", "--script", "train.py"]
        torchx_cmd = [
            str(torchx),
            "run",
            "--dryrun",
            "-s",
            "kubernetes",
            "-cfg",
            "queue=default",
            "--workspace",
            "",
            "dist.ddp",
            "-j",
            "2x4",
            "--script",
            "train.py",
        ]
        for cmd in (ddpctl_cmd, torchx_cmd):  # warm caches (page cache, Jinja bytecode) once each
            timed(cmd, cwd, env)
        ours, theirs = [], []
        for _ in range(opts.runs):
            ours.append(timed(ddpctl_cmd, cwd, env))
            theirs.append(timed(torchx_cmd, cwd, env))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"ddpctl render      median {a * 1000:7.1f} ms  (n={opts.runs})")
    print(f"torchx run --dryrun median {b * 1000:7.1f} ms  (n={opts.runs})")
    print(f"ratio ddpctl/torchx: {a / b:.3f}  (target <= 0.125, i.e. ddpctl {b / a:.1f}x faster)")


if __name__ == "__main__":
    main()
