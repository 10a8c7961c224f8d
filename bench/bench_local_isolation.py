"""Local runs on a shared, loaded machine: counts of what went wrong over many real runs.

Every run is `python -m ddpctl run --local` with real torchrun agents and gloo, while `--load`
busy-loop processes compete for the CPUs (the machine is shared, as a user's is). Four loops:

    pairs   two 2x2 jobs started together (same name, two folders) on the default port:
            cross-joins (a rank outside its job's world, or a job that saw another's ranks),
            spurious restarts (any counted restart: neither job failed), port retries (a start
            again, not counted, after another process took node 0's port), failures
    script  a 3x1 user script that all-reduces, runs DDP backward, hits a barrier and calls
            destroy_process_group(): restarts after success (must be 0), failed runs, and how often
            a rank still died of SIGABRT at exit (gloo's teardown, pytorch/pytorch#179291)
    stall   a 2x2 job whose rank 2 blocks in forward (--stall-timeout 5, backoffLimit 3): runs whose
            every attempt's summary names rank 2 and the file and line, and starts per run (the same
            stall twice is not retried: 2)
    crash   a 2x2 job whose rank 3 raises at step 5 (backoffLimit 3): starts per run (2) and runs
            whose last line says why it stopped

These are counts, not timings: no baseline is needed; seconds per run are printed for scale.

    .venv/bin/python bench/bench_local_isolation.py [--pairs 20] [--script 50] [--stall 20] [--crash 3]
        [--load 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
SMALL = ["--synthetic-samples", "512", "--eval-samples", "64", "--epochs", "1"]
SCRIPT = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
for _ in range(3):
    model(torch.randn(8, 16)).sum().backward()
t = torch.ones(1)
dist.all_reduce(t)
dist.barrier()
dist.destroy_process_group()
print(f"done {int(t.item())}", flush=True)
"""
STALL_MODELS = REPO / "tests" / "support" / "models" / "stall_models.py"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDPCTL_", "DDP_TRAINER_", "PET_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, "-m", "ddpctl", "run", "--local", *args],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@contextmanager
def cpu_load(workers: int) -> Iterator[None]:
    """`workers` busy loops at normal priority for as long as the block runs."""
    procs = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(workers)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _restarts(err: str) -> list[str]:
    return [line for line in err.splitlines() if "restarting all" in line and "not counted" not in line]


def pairs(runs: int, root: Path) -> dict[str, Any]:
    counts = {"runs": runs, "cross_joins": 0, "spurious_restarts": 0, "port_retries": 0, "failed_jobs": 0}
    started = time.monotonic()
    for i in range(runs):
        folders = [root / f"pair{i}" / side for side in ("a", "b")]
        for folder in folders:
            folder.mkdir(parents=True)
        jobs = [_start(["--nodes", "2", "--procs", "2", "--backoff-limit", "3", "--", *SMALL], f) for f in folders]
        for job, folder in zip(jobs, folders, strict=True):
            out, err = job.communicate(timeout=600)
            logs = "".join(p.read_text(errors="replace") for p in (folder / "ddp-runs").rglob("*.log"))
            worlds = set(re.findall(r"world size (\d+) \(ddp", out))
            if "outside 0.." in out + logs or worlds - {"4"}:
                counts["cross_joins"] += 1
            counts["spurious_restarts"] += len(_restarts(err))
            counts["port_retries"] += err.count("not counted as a restart")
            if job.returncode != 0:
                counts["failed_jobs"] += 1
                print(f"pair {i}: job in {folder} failed: {err.strip().splitlines()[-1]}", file=sys.stderr)
    counts["seconds_per_pair"] = round((time.monotonic() - started) / max(runs, 1), 1)
    return counts


def script(runs: int, root: Path) -> dict[str, Any]:
    counts = {"runs": runs, "restarts_after_success": 0, "failed_runs": 0, "sigabrt_at_exit": 0, "all_done": 0}
    started = time.monotonic()
    for i in range(runs):
        folder = root / f"script{i}"
        folder.mkdir(parents=True)
        (folder / "ddp_script.py").write_text(SCRIPT)
        job = _start(["--script", "ddp_script.py", "--nodes", "3", "--procs", "1", "--backoff-limit", "3"], folder)
        out, err = job.communicate(timeout=600)
        logs = "".join(p.read_text(errors="replace") for p in (folder / "ddp-runs").rglob("*.log"))
        counts["restarts_after_success"] += len(_restarts(err))
        counts["failed_runs"] += job.returncode != 0
        counts["all_done"] += out.count("done 3") >= 3
        if re.search(r"exitcode\s*:\s*-6\b", logs) or "SIGABRT" in err:
            counts["sigabrt_at_exit"] += 1
        if job.returncode != 0 or _restarts(err):
            print(f"script {i}: rc {job.returncode}: {err.strip().splitlines()[-1]}", file=sys.stderr)
    counts["seconds_per_run"] = round((time.monotonic() - started) / max(runs, 1), 1)
    return counts


def _stall_line() -> int:
    lines = STALL_MODELS.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if "threading.Event().wait()" in line)


def stall(runs: int, root: Path) -> dict[str, Any]:
    where = f"{STALL_MODELS}:{_stall_line()}"
    counts: dict[str, Any] = {"runs": runs, "every_summary_names_rank_2_and_line": 0, "starts": []}
    started = time.monotonic()
    args = ["--backoff-limit", "3", "-e", "STALL_RANK=2", "-e", "STALL_AT_STEP=3", "--"]
    args += ["--model", "tests.support.models.stall_models:blocking", "--stall-timeout", "5", "--image-size", "8"]
    args += ["--synthetic-samples", "256", "--eval-samples", "32", "--epochs", "3"]
    for i in range(runs):
        folder = root / f"stall{i}"
        folder.mkdir(parents=True)
        job = _start(args, folder)
        _, err = job.communicate(timeout=600)
        attempts = [line for line in err.splitlines() if "restarting all" in line]
        attempts += [line for line in err.splitlines() if line.startswith("ddpctl: error:")]
        counts["starts"].append(len(attempts))
        good = all("stalled: rank 2 (node 1" in line and where in line for line in attempts) and attempts
        counts["every_summary_names_rank_2_and_line"] += bool(good)
        if not good:
            print(f"stall {i}: " + " | ".join(attempts or err.strip().splitlines()[-1:]), file=sys.stderr)
    counts["seconds_per_run"] = round((time.monotonic() - started) / max(runs, 1), 1)
    return counts


def crash(runs: int, root: Path) -> dict[str, Any]:
    counts: dict[str, Any] = {"runs": runs, "starts": [], "says_why": 0}
    args = ["--backoff-limit", "3", "-e", "CRASH_RANK=3", "-e", "CRASH_AT_STEP=5", "--"]
    args += [
        "--model",
        "tests.support.models.fault_models:crashing",
        "--image-size",
        "8",
        "--synthetic-samples",
        "1024",
    ]
    args += ["--eval-samples", "32", "--save-every", "100"]
    started = time.monotonic()
    for i in range(runs):
        folder = root / f"crash{i}"
        folder.mkdir(parents=True)
        job = _start(args, folder)
        _, err = job.communicate(timeout=600)
        counts["starts"].append(1 + len(_restarts(err)))
        last = err.strip().splitlines()[-1] if err.strip() else ""
        counts["says_why"] += "rank 3" in last and "the same failure twice: not retried" in last
    counts["seconds_per_run"] = round((time.monotonic() - started) / max(runs, 1), 1)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--script", type=int, default=50)
    parser.add_argument("--stall", type=int, default=20)
    parser.add_argument("--crash", type=int, default=3)
    parser.add_argument("--load", type=int, default=2, help="busy-loop processes beside the runs")
    parser.add_argument("--json", type=Path, default=None)
    opts = parser.parse_args()
    results: dict[str, Any] = {"load_processes": opts.load, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="ddpctl-bench-") as tmp, cpu_load(opts.load):
        root = Path(tmp)
        for name, runs, loop in (
            ("pairs", opts.pairs, pairs),
            ("script", opts.script, script),
            ("stall", opts.stall, stall),
            ("crash", opts.crash, crash),
        ):
            if runs > 0:
                results[name] = loop(runs, root)
                print(f"{name}: {json.dumps(results[name])}", flush=True)
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
