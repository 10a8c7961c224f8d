"""Trainer benchmarks, each a ratio against a baseline measured in the same invocation.

1. ddp-vs-naive: the trainer vs the article-style DDP script (bench/trainer_baselines/naive_ddp.py),
   2 processes on gloo, resnet18 (62 parameter tensors, 44.7 MB of fp32 gradients), the same
   synthetic images, batch 32 per process. Target: trainer >= 1.3x the naive samples/s.
2. overhead: the trainer in one process vs an unwrapped loop (bench/trainer_baselines/plain_loop.py),
   the default conv net, batch 32. Target: overhead <= 5%. Reported on wall-clock and on process
   CPU time (the latter is robust when other work shares the CPUs).
3. weak-scaling: the trainer with 1 and 2 processes (one thread each), resnet18, batch 32 per
   process. Efficiency = samples/s(2) / (2 x samples/s(1)). Target >= 0.8. Also printed: the same
   ratio on per-process CPU time, which shows DDP's own cost when other jobs share the CPUs.

Runs of A and B alternate (A B A B ...) so drifting machine load hits both alike; each figure is
the median of its repeats (best-of is printed too). Usage:

    python bench/bench_trainer.py [--repeats 2] [--only ddp-vs-naive,overhead,weak-scaling] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BASELINES = REPO / "bench" / "trainer_baselines"
PY = sys.executable


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PET_", "DDP_TRAINER_", "TORCHELASTIC_"))
        and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env["OMP_NUM_THREADS"] = "1"
    if "GLOO_SOCKET_IFNAME" not in env and os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def _run(cmd: list[str], timeout: float = 300) -> str:
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return proc.stdout


def _launcher(nproc: int) -> list[str]:
    if nproc == 1:
        return [PY]
    return [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]


def _json_line(out: str) -> dict[str, Any]:
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def trainer(
    nproc: int, model: str, steps: int, log_every: int, image: int = 32, batch: int = 32, extra: tuple[str, ...] = ()
) -> dict[str, float]:
    """Steady-state samples/s of the trainer: its metric intervals after the first (warm-up) one."""
    samples = batch * nproc * (steps + log_every + 8)  # no epoch end (eval, checkpoint) inside the window
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "metrics.jsonl"
        _run(
            [
                *_launcher(nproc),
                "-m",
                "ddpctl_trainer",
                "--model",
                model,
                "--image-size",
                str(image),
                "--batch-size",
                str(batch),
                "--synthetic-samples",
                str(samples),
                "--no-eval",
                "--epochs",
                "1",
                "--max-steps",
                str(steps + log_every),
                "--log-every",
                str(log_every),
                "--progress",
                "none",
                "--resume",
                "never",
                "--checkpoint-dir",
                str(Path(tmp) / "ckpt"),
                "--metrics-file",
                str(metrics),
                *extra,
            ]
        )
        events = [json.loads(line) for line in metrics.read_text().splitlines()]
    train = [e for e in events if e["event"] == "train"][1:]
    n = sum(e["samples"] for e in train)
    return {
        "samples_per_s": n / sum(e["wall_s"] for e in train),
        "samples_per_cpu_s": n / sum(e["cpu_s"] for e in train) / nproc,
    }


def naive(steps: int, warmup: int) -> dict[str, float]:
    out = _run(
        [
            *_launcher(2),
            str(BASELINES / "naive_ddp.py"),
            "--model",
            "resnet18",
            "--batch-size",
            "32",
            "--samples",
            str(32 * 2 * (steps + warmup + 8)),
            "--steps",
            str(steps),
            "--warmup",
            str(warmup),
        ]
    )
    return _json_line(out)


def plain(steps: int, warmup: int) -> dict[str, float]:
    # the same sample count as the trainer's run: the same data, seen once (no epoch repeats)
    return _json_line(
        _run(
            [
                PY,
                str(BASELINES / "plain_loop.py"),
                "--steps",
                str(steps),
                "--warmup",
                str(warmup),
                "--samples",
                str(32 * (steps + warmup + 8)),
            ]
        )
    )


def _alternate(repeats: int, a: Any, b: Any) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    ra, rb = [], []
    for _ in range(repeats):
        ra.append(a())
        rb.append(b())
    return ra, rb


def _summary(runs: list[dict[str, float]], key: str = "samples_per_s") -> dict[str, float]:
    values = [r[key] for r in runs]
    return {"median": statistics.median(values), "best": max(values), "runs": values}


def bench_ddp_vs_naive(repeats: int) -> dict[str, Any]:
    steps, warm = 20, 5
    n, t = _alternate(repeats, lambda: naive(steps, warm), lambda: trainer(2, "resnet18", steps, warm))
    ns, ts = _summary(n), _summary(t)
    return {
        "naive": ns,
        "trainer": ts,
        "ratio_median": ts["median"] / ns["median"],
        "ratio_best": ts["best"] / ns["best"],
        "target": ">= 1.3",
    }


def bench_overhead(repeats: int) -> dict[str, Any]:
    steps, warm = 300, 30
    p, t = _alternate(repeats, lambda: plain(steps, warm), lambda: trainer(1, "convnet", steps, warm))
    out: dict[str, Any] = {"plain": _summary(p), "trainer": _summary(t), "target": "<= 5%"}
    for key, label in (("samples_per_s", "wall"), ("samples_per_cpu_s", "cpu")):
        ps, ts = _summary(p, key), _summary(t, key)
        out[f"overhead_{label}_median"] = 1 - ts["median"] / ps["median"]
        out[f"overhead_{label}_best"] = 1 - ts["best"] / ps["best"]
    return out


def bench_weak_scaling(repeats: int) -> dict[str, Any]:
    steps, warm = 20, 5
    one, two = _alternate(
        repeats, lambda: trainer(1, "resnet18", steps, warm), lambda: trainer(2, "resnet18", steps, warm)
    )
    s1, s2 = _summary(one), _summary(two)
    c1, c2 = _summary(one, "samples_per_cpu_s"), _summary(two, "samples_per_cpu_s")
    return {
        "one_process": s1,
        "two_processes": s2,
        "efficiency_median": s2["median"] / (2 * s1["median"]),
        "efficiency_best": s2["best"] / (2 * s1["best"]),
        # per-process work (compute + gloo threads) per sample; blind to waiting, robust to other load
        "cpu_efficiency_median": c2["median"] / c1["median"],
        "target": ">= 0.8",
    }


BENCHES = {"ddp-vs-naive": bench_ddp_vs_naive, "overhead": bench_overhead, "weak-scaling": bench_weak_scaling}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--only", default=",".join(BENCHES))
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args()
    results: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": os.getloadavg()}
    for name in args.only.split(","):
        t0 = time.perf_counter()
        results[name] = BENCHES[name](args.repeats)
        results[name]["seconds"] = round(time.perf_counter() - t0, 1)
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    results["load_after"] = os.getloadavg()
    print()
    if "ddp-vs-naive" in results:
        r = results["ddp-vs-naive"]
        print(
            f"(1) trainer vs naive DDP (2 procs, gloo, resnet18): {r['ratio_median']:.2f}x "
            f"({r['trainer']['median']:.1f} vs {r['naive']['median']:.1f} samples/s; best-of {r['ratio_best']:.2f}x) "
            f"target >= 1.3x"
        )
    if "overhead" in results:
        r = results["overhead"]
        print(
            f"(2) single-process overhead vs unwrapped loop (convnet): wall {100 * r['overhead_wall_median']:.1f}% "
            f"(best-of {100 * r['overhead_wall_best']:.1f}%), CPU time {100 * r['overhead_cpu_median']:.1f}% "
            f"(best-of {100 * r['overhead_cpu_best']:.1f}%) target <= 5%"
        )
    if "weak-scaling" in results:
        r = results["weak-scaling"]
        print(
            f"(3) weak scaling 1 -> 2 processes (resnet18, 1 thread each): efficiency {r['efficiency_median']:.2f} "
            f"(best-of {r['efficiency_best']:.2f}; CPU-time efficiency {r['cpu_efficiency_median']:.2f}) target >= 0.8"
        )
    print(
        f"load average before/after: {results['load_before'][0]:.1f} / {results['load_after'][0]:.1f} "
        f"on {results['cpus']} CPUs"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
