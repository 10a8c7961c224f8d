"""How long `ddpctl render` takes as a fresh process, against two baselines measured in the same run.

- The floor: `python -c "import typer, jinja2, yaml"`, the start-up of the stack ddpctl must use;
  nothing built on it can start faster. Target: render <= 1.05x the floor.
- TorchX's dry run of the same job: both render a 2-node x 4-GPU job for Kubernetes (ddpctl: a
  PyTorchJob; TorchX: its dist.ddp component for the kubernetes scheduler, a Volcano job).
  Target: render <= 1/4 of TorchX's time. TorchX lives in its own venv (.cache/torchx-venv: torchx
  pins urllib3<1.27, which the kubernetes client of ddpctl's venv does not accept), made on first
  use from PyPI; where it cannot be made (offline) or with --no-torchx, that comparison is skipped.

The commands run as new processes, in turn (the order alternating from round to round), and the
medians are compared. On a shared machine one slow run can sway a median, so the render/floor
ratio is also given per round (each render run against the floor run beside it): the lowest,
median and highest of those ratios, and the ratio of the two fastest runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TORCHX_VENV = REPO / ".cache" / "torchx-venv"


def ensure_torchx() -> Path | None:
    """The torchx executable of .cache/torchx-venv, made on first use; None when it cannot be made."""
    exe = TORCHX_VENV / "bin" / "torchx"
    if not exe.exists():
        try:
            subprocess.run([sys.executable, "-m", "venv", str(TORCHX_VENV)], check=True)
            subprocess.run([str(TORCHX_VENV / "bin" / "pip"), "install", "-q", "torchx[kubernetes]"], check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"torchx: could not install it into {TORCHX_VENV} ({exc})", file=sys.stderr)
            return None
    return exe


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock seconds and CPU seconds (user + system) of one run of `cmd`. The CPU time
    varies less than the wall clock on a busy machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed: {proc.stderr.decode()[-500:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-torchx", action="store_true", help="Skip the TorchX comparison.")
    opts = parser.parse_args()
    torchx = None if opts.no_torchx else ensure_torchx()
    ddpctl = Path(sys.executable).with_name("ddpctl")
    # An installed wheel ships compiled bytecode (ddpctl_trainer.protocol too); an editable checkout may not.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "cli"), str(REPO / "trainer")], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "train.py").write_text("print('train')\n")
        ddpctl_cmd = [str(ddpctl), "render", "-t", "pytorchjob", "--nodes", "2", "--gpus", "4", "--script", "train.py"]
        floor_cmd = [sys.executable, "-c", "import typer, jinja2, yaml"]
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
        commands = {"render": ddpctl_cmd, "floor": floor_cmd}
        if torchx is not None:
            commands["torchx"] = torchx_cmd
        for cmd in commands.values():  # warm caches (page cache, Jinja bytecode) once each
            timed(cmd, cwd, env)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for i in range(opts.runs):
            # alternate the order, so that neither command always runs right after the other
            for name in list(commands)[:: 1 if i % 2 == 0 else -1]:
                times[name].append(timed(commands[name], cwd, env))
    wall = {name: statistics.median(w for w, _ in t) for name, t in times.items()}
    cpu = {name: statistics.median(c for _, c in t) for name, t in times.items()}
    labels = {
        "render": "ddpctl render",
        "floor": "floor: python -c 'import typer, jinja2, yaml'",
        "torchx": "torchx run --dryrun",
    }
    print(f"{'median of ' + str(opts.runs) + ' runs':<47}    wall      cpu")
    for name in commands:
        print(f"{labels[name]:<47} {wall[name] * 1000:7.1f}  {cpu[name] * 1000:7.1f} ms")
    print(
        f"ratio render/floor: {wall['render'] / wall['floor']:.2f} wall, {cpu['render'] / cpu['floor']:.2f} cpu"
        "  (target <= 1.05)"
    )
    for kind, i in (("wall", 0), ("cpu", 1)):
        render, floor = [t[i] for t in times["render"]], [t[i] for t in times["floor"]]
        rounds = sorted(r / f for r, f in zip(render, floor))
        print(
            f"  {kind:<4} per round: lowest {rounds[0]:.2f}, median {statistics.median(rounds):.2f}, "
            f"highest {rounds[-1]:.2f}; fastest render / fastest floor {min(render) / min(floor):.2f}"
        )
    if "torchx" in wall:
        ratio = wall["render"] / wall["torchx"]
        print(f"ratio render/torchx: {ratio:.3f} wall  (target <= 0.25: ddpctl {1 / ratio:.1f}x faster)")
    else:
        print("ratio render/torchx: skipped (torchx is not installed; see --no-torchx and the docstring)")


if __name__ == "__main__":
    main()
