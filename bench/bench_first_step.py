"""Time to the first optimizer step: `ddpctl run --local` vs bare torchrun of the same trainer.

Measures, in the same run and interleaved (so machine load hits both alike), the wall time from
launching the command to the trainer's `first_step` metrics event (written by rank 0 right after
its first optimizer step):

* ddpctl:  `python -m ddpctl run --local` (2 nodes x 2 processes, CPU + gloo: the default spec)
* bare:    two `python -m torch.distributed.run --nnodes 2 --node-rank i --master-addr 127.0.0.1`
           agents, the same layout wired by hand (the ratio's baseline)
* standalone (reference): `torchrun --standalone --nproc-per-node 4`, one agent

Target: ddpctl / bare <= 1.2 (the median of each over --reps).

    .venv/bin/python bench/bench_first_step.py --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAINER_ARGS = [
    "--synthetic-samples",
    "512",
    "--eval-samples",
    "64",
    "--epochs",
    "1",
    "--max-steps",
    "2",
    "--progress",
    "none",
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDPCTL_", "PET_", "DDP_TRAINER_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _first_step(metrics: Path) -> float:
    for line in metrics.read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "first_step":
            return float(event["time"])
    raise RuntimeError(f"no first_step event in {metrics}")


def _timed(launch: Callable[[Path], list[subprocess.Popen[bytes]]]) -> float:
    """Seconds from launch to rank 0's first optimizer step; every process must exit 0."""
    with tempfile.TemporaryDirectory(prefix="ddpctl-bench-") as tmp:
        work = Path(tmp)
        start = time.time()
        procs = launch(work)
        codes = [p.wait(timeout=600) for p in procs]
        if any(codes):
            raise RuntimeError(f"a run failed with exit codes {codes}; see {work}")
        return _first_step(work / "metrics.jsonl") - start


def _args(work: Path) -> list[str]:
    return [*TRAINER_ARGS, "--metrics-file", str(work / "metrics.jsonl"), "--checkpoint-dir", str(work / "ckpt")]


def launch_ddpctl(work: Path) -> list[subprocess.Popen[bytes]]:
    cmd = [sys.executable, "-m", "ddpctl", "run", "--local", "--run-dir", str(work / "run"), "--", *_args(work)]
    return [subprocess.Popen(cmd, cwd=work, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]


def launch_bare(work: Path) -> list[subprocess.Popen[bytes]]:
    port = _free_port()
    env = {**_env(), "GLOO_SOCKET_IFNAME": "lo"}
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "2",
                "--node-rank",
                str(node),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                "-m",
                "ddpctl_trainer",
                "--backend",
                "gloo",
                *_args(work),
            ],
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for node in (0, 1)
    ]


def launch_standalone(work: Path) -> list[subprocess.Popen[bytes]]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "4",
        "-m",
        "ddpctl_trainer",
        "--backend",
        "gloo",
        *_args(work),
    ]
    return [subprocess.Popen(cmd, cwd=work, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]


Launch = Callable[[Path], list[subprocess.Popen[bytes]]]


def interleaved(variants: dict[str, Launch], reps: int, warm: Launch, quiet: bool = False) -> dict[str, list[float]]:
    """Each variant's seconds to the first step, `reps` times, in alternating order so drifting
    load hits all alike; one run of `warm` first fills the page cache (torch's shared libraries)."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    _timed(warm)
    for rep in range(reps):
        order = list(variants) if rep % 2 == 0 else list(reversed(variants))
        for name in order:
            times[name].append(_timed(variants[name]))
        if not quiet:
            print(f"rep {rep + 1}/{reps}: " + ", ".join(f"{n} {times[n][-1]:.2f}s" for n in variants), flush=True)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions of each variant (interleaved)")
    parser.add_argument("--no-standalone", action="store_true", help="skip the standalone reference")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    variants: dict[str, Callable[[Path], list[subprocess.Popen[bytes]]]] = {
        "ddpctl": launch_ddpctl,
        "bare": launch_bare,
    }
    if not args.no_standalone:
        variants["standalone"] = launch_standalone
    times = interleaved(variants, args.reps, warm=launch_bare, quiet=args.json)
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = medians["ddpctl"] / medians["bare"]
    if args.json:
        print(json.dumps({"times_s": times, "median_s": medians, "ratio_ddpctl_vs_bare": ratio}, indent=2))
    else:
        for name, value in medians.items():
            print(
                f"median time to first optimizer step, {name:<10}: {value:.2f}s  (all: "
                f"{', '.join(f'{t:.2f}' for t in times[name])})"
            )
        print(f"ratio ddpctl / bare torchrun (same 2x2 layout): {ratio:.2f}x  (target <= 1.2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
