"""The preflight's cost inside a job: `ddpctl run --local` to the first optimizer step with
`--preflight warn` against the same run without it (2 nodes x 2 processes, CPU + gloo, the
built-in trainer), interleaved so machine load hits both alike. Target: with / without <= 1.15
(the median of each over --reps).

The difference is the checks' own time (each rank's GEMM windows, the all-reduce, the gathers):
its one-window-per-figure timing inside a job (protocol.PREFLIGHT_JOB_WINDOW_S and _REPEATS), not
the standalone check's (`ddpctl check`). On one machine every rank shares its cores, so the ranks
of all four take turns: the worst case; in a cluster each pod's machine runs its own ranks' turns
side by side.

    .venv/bin/python bench/bench_preflight_cost.py --reps 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bench_first_step import _args, _env, interleaved  # the same trainer run and clock as bench_first_step.py


def launch(preflight: bool) -> Callable[[Path], list[subprocess.Popen[bytes]]]:
    def start(work: Path) -> list[subprocess.Popen[bytes]]:
        extra = ["--preflight", "warn"] if preflight else []
        cmd = [sys.executable, "-m", "ddpctl", "run", "--local", "--run-dir", str(work / "run"), *extra]
        cmd += ["--", *_args(work)]
        return [subprocess.Popen(cmd, cwd=work, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]

    return start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions of each variant (interleaved)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    variants = {"without": launch(False), "with --preflight warn": launch(True)}
    times = interleaved(variants, args.reps, warm=variants["without"], quiet=args.json)
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = medians["with --preflight warn"] / medians["without"]
    if args.json:
        print(json.dumps({"times_s": times, "median_s": medians, "ratio_with_vs_without": ratio}, indent=2))
    else:
        for name, value in medians.items():
            every = ", ".join(f"{t:.2f}" for t in times[name])
            print(f"median time to the first step, {name:<22}: {value:.2f}s  (all: {every})")
        print(f"ratio with / without the preflight (2 x 2 gloo): {ratio:.2f}x  (target <= 1.15x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
