"""What losing one node costs a local run: `--recovery pod` against the whole-group restart (gang).

The same job (`ddpctl run --local`, 3 nodes x 1 process, the built-in trainer on CPU with gloo,
float64, a checkpoint every 3 steps) runs twice in this run; node 1's worker SIGKILLs itself after
step K (the fault plugin of the tests, as the OOM killer would end it). Measured from ddpctl's own
output, each line stamped as it arrives:

- seconds from the kill (the fault's line) to the next completed step (rank 0's progress line of
  step K+1), and
- steps lost: the steps trained again (gang resumes from the newest checkpoint before K; pod goes
  on at K).

Printed: each, and the ratios pod / gang (target <= 0.5) and pod with one warm spare (`--spares 1`)
/ gang (target <= 0.15). Where the pod recovery's time goes is in the trainer's recovery line
(formation and handoff); without a spare the rest is the new node's start: its Python, torch
import and the trainer's set-up, which a spare has done ahead.

    .venv/bin/python bench/bench_recovery.py [--kill-at 4] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAINER = [
    "--synthetic-samples",
    "240",
    "--eval-samples",
    "24",
    "--image-size",
    "8",
    "--num-classes",
    "4",
    "--global-batch-size",
    "12",
    "--epochs",
    "1",
    "--dtype",
    "float64",
    "--save-every",
    "3",
    "--log-every",
    "1",
    "--progress",
    "lines",
]


def one_run(mode: str, kill_at: int) -> tuple[float, int]:
    """(seconds from the kill to step kill_at + 1 done, steps trained again)."""
    sys.path.insert(0, str(REPO))
    from tests.support.procs import cmdline, descendants, with_env

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as cwd:
        hold = Path(cwd) / "held"
        fault = {  # rank 1 waits after step K until the kill (the tests' fault plugin)
            "DDP_TRAINER_CALLBACK": "tests.support.models.faults:Faults",
            "DDPCTL_TEST_HOLD_AT_STEP": str(kill_at),
            "DDPCTL_TEST_HOLD_RANK": "1",
            "DDPCTL_TEST_HOLD_FILE": str(hold),
        }
        cmd = [sys.executable, "-m", "ddpctl", "run", "--local", "--nodes", "3", "--procs", "1", "--backoff-limit", "2"]
        cmd += [arg for name, value in fault.items() for arg in ("-e", f"{name}={value}")]  # the job's env
        recovery = {"gang": ["--recovery", "gang"], "pod": ["--recovery", "pod"]}.get(
            mode, ["--recovery", "pod", "--spares", "1"]
        )
        cmd += [*recovery, "--", *TRAINER]
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        assert proc.stdout is not None
        killed = done = None
        resumed = kill_at
        for line in proc.stdout:
            now = time.monotonic()
            if killed is None and hold.exists():  # rank 1 finished step K and holds: its node is lost now
                workers = [p for p in descendants(proc.pid) if "ddpctl_trainer.launch" not in cmdline(p)]
                os.kill(with_env(workers, "JOB_COMPLETION_INDEX", "1"), signal.SIGKILL)
                killed = time.monotonic()
            found = re.search(r"\(epoch \d+, step (\d+)\)", line)  # a whole-group restart's resume line
            if killed is not None and found:
                resumed = int(found.group(1))
            if (
                killed is not None
                and done is None
                and re.search(rf"\[rank 0\] epoch \d+/\d+ step {kill_at + 1}/", line)
            ):
                done = now
        proc.wait()
        if proc.returncode != 0 or killed is None or done is None:
            raise SystemExit(f"the {mode} run failed (exit {proc.returncode})")
    return done - killed, kill_at - resumed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kill-at", type=int, default=5, help="the step after which node 1 is killed (default 5)")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, int]]] = {"gang": [], "pod": [], "spare": []}
    for _ in range(args.repeats):
        for mode in results:  # the baseline first, in the same run
            results[mode].append(one_run(mode, args.kill_at))
    print(f"one node of 3 lost after step {args.kill_at} (run --local, CPU, gloo), best of {args.repeats}:")
    best = {mode: min(runs) for mode, runs in results.items()}
    for mode, (seconds, lost) in best.items():
        print(f"  {mode:6s} {seconds:6.2f} s from the kill to the next step done, {lost} steps trained again")
    print(f"ratio pod / gang: {best['pod'][0] / best['gang'][0]:.2f}  (target <= 0.5)")
    print(f"ratio pod with a warm spare / gang: {best['spare'][0] / best['gang'][0]:.2f}  (target <= 0.15)")


if __name__ == "__main__":
    main()
