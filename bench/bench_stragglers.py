"""The straggler detector: its cost against the step time, its detection and its false alarms.

Cost, measured in this process as bench_watchdog.py measures the watchdog (an on/off samples/s
comparison of whole jobs is too noisy on a shared 2-core machine to show 1 %):

* the step: the built-in trainer's default conv net at batch 32 in DDP over a one-process gloo group,
  its median step time (forward, backward with the all-reduce, optimizer);
* the detector's work inside each step: the clock's marks (start, the buffer broadcast's two, one
  per gradient bucket, stop) and the comm hook's Python wrapper around DDP's default all-reduce,
  measured as the step time with the hooks against without them, blocks alternating, on process
  CPU time;
* its work every `every` steps: the figures ride on the trainer's stop vote (an all-reduce that runs
  after every step anyway), so the cost is that vote carrying one float64 per rank against the
  vote alone (two real gloo processes on loopback), plus the judgement, divided by `every`.

Detection and false alarms, through `ddpctl run --local` (3 nodes x 1 process): node 1 slowed from
outside after its own step 30 to about half speed (a CPU quota on its processes of --share of the
CPU its worker was measured to use from its step 10 to 30, set by a test hook in the node itself,
tests/support/stragglers.py; --cpus gives a fixed quota instead; every run's OpenMP threads wait
passively, so CPU use is work done) under `--stragglers fail` (the run ends when it is named),
interleaved with healthy runs under `warn` (11 windows each): detection is the slowed runs that
named node 1, and only it, within windows + 1 windows of the slowdown, each with the figure its
line reports; false alarms are the healthy runs that named anyone. Needs root for the cgroup. Usage:

    python bench/bench_stragglers.py [--slowed 5] [--healthy 10] [--share 0.5 | --cpus C] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.cpu_quota import CpuQuota, unavailable  # noqa: E402 - the checkout's test support, on sys.path above
from tests.support.stragglers import run_job, since  # noqa: E402


def _ddp_step_seconds(steps: int, blocks: int) -> tuple[float, float]:
    """(median step seconds without the detector's hooks, with them): blocks alternate off/on on
    process CPU time, in one process with a one-process gloo group."""
    import torch
    import torch.distributed as dist

    from ddpctl_trainer.models import build_model
    from ddpctl_trainer.stragglers import StepClock

    torch.set_num_threads(1)
    store = tempfile.mkdtemp(prefix="bench-stragglers-")
    dist.init_process_group("gloo", init_method=f"file://{store}/s", rank=0, world_size=1)
    try:
        models = {}
        clocks = {}
        for on in (False, True):
            torch.manual_seed(0)
            model = torch.nn.parallel.DistributedDataParallel(build_model("convnet", 10))
            clocks[on] = StepClock("cpu")
            if on:
                assert clocks[on].hook(model) is None
            models[on] = (model, torch.optim.SGD(model.parameters(), lr=0.01))
        x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
        times: dict[bool, list[float]] = {False: [], True: []}
        for block in range(blocks):
            for on in (False, True) if block % 2 == 0 else (True, False):
                model, opt = models[on]
                clock = clocks[on]
                for _ in range(steps):
                    t0 = time.process_time()
                    if on:
                        clock.start()
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    if on:
                        clock.stop()
                    times[on].append(time.process_time() - t0)
                if on:
                    clock.take()
        return statistics.median(times[False]), statistics.median(times[True])
    finally:
        dist.destroy_process_group()


def _vote_worker(rank: int, port: int, rounds: int, out: Any) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    from ddpctl_trainer.stragglers import Judge, Seat, StragglerConfig

    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    judge = Judge(StragglerConfig("warn", 0.6, 10, 3), [Seat(0, 0, "p0"), Seat(1, 1, "p1")])
    took: dict[str, list[float]] = {"vote": [], "riders": [], "judge": []}
    for i in range(rounds):
        for kind in ("vote", "riders") if i % 2 == 0 else ("riders", "vote"):
            riders = [0.1 if r == rank else 0.0 for r in range(2)] if kind == "riders" else []
            t0 = time.perf_counter()
            flag = torch.tensor([0.0, *riders], dtype=torch.float64)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            values = flag[1:].tolist()
            took[kind].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        judge.window(i * 10 + 1, i * 10 + 10, dict(enumerate(values or [0.1, 0.1])))
        took["judge"].append(time.perf_counter() - t0)
    if rank == 0:
        out.put({k: statistics.median(v) for k, v in took.items()})
    dist.destroy_process_group()


def vote_seconds(rounds: int = 400) -> dict[str, float]:
    """Median seconds of the trainer's stop vote alone and carrying a window's figures, and of one
    judgement: two gloo processes on loopback."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_vote_worker, args=(r, port, rounds, queue)) for r in range(2)]
    for p in procs:
        p.start()
    value = dict(queue.get(timeout=300))
    for p in procs:
        p.join(60)
    return value


def detection(
    slowed: int, healthy: int, share: float | None, cpus: float | None, every: int, windows: int
) -> dict[str, Any]:
    """Slowed (fail) and healthy (warn) local runs, interleaved."""
    results: dict[str, list[dict[str, Any]]] = {"slowed": [], "healthy": []}
    order = ["healthy"] * healthy
    for i in range(slowed):
        order.insert(min(len(order), i * 3), "slowed")
    with tempfile.TemporaryDirectory(prefix="bench-stragglers-") as tmp:
        for i, kind in enumerate(order):
            t0 = time.monotonic()
            cwd = Path(tmp) / f"{kind}-{i}"
            if kind == "slowed":
                with CpuQuota(None) as quota:
                    run = run_job(cwd, quota, "fail", cpus=cpus or 0.0, share=None if cpus else share, epochs=12)
            else:
                run = run_job(cwd, None, "warn", epochs=10)
            named = run.named()
            row: dict[str, Any] = {"code": run.code, "named": named, "seconds": round(time.monotonic() - t0, 1)}
            if kind == "slowed":
                at = run.acted.get("slowed")
                row["slowed_at"] = at
                row["used_cpus"] = None if run.used is None else round(run.used, 3)
                row["quota_cpus"] = None if run.cpus is None else round(run.cpus, 3)
                row["figures"] = run.figures()
                row["since"] = since(run.lines[0]) if run.lines else None
                # the window it was named at ends at since + windows x every - 1
                row["named_within_windows"] = (
                    None if not run.lines or at is None else (since(run.lines[0]) + windows * every - 1 - at) / every
                )
                row["ok"] = (
                    named == [1]
                    and row["named_within_windows"] is not None
                    and (row["named_within_windows"] <= windows + 1)
                )
            else:
                row["ok"] = named == [] and run.code == 0
            results[kind].append(row)
            print(f"  {kind:8s} {row}", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slowed", type=int, default=5)
    parser.add_argument("--healthy", type=int, default=10)
    parser.add_argument("--share", type=float, default=0.5, help="slow node 1 to this share of its measured CPU use")
    parser.add_argument("--cpus", type=float, help="slow node 1 to this fixed CPU quota instead")
    parser.add_argument("--steps", type=int, default=40, help="steps per cost block")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from ddpctl_trainer import protocol

    every, windows = protocol.STRAGGLER_EVERY, protocol.STRAGGLER_WINDOWS
    off, on = _ddp_step_seconds(args.steps, args.blocks)
    vote = vote_seconds()
    window = max(vote["riders"] - vote["vote"], 0.0) + vote["judge"]
    per_step = max(on - off, 0.0) + window / every
    out: dict[str, Any] = {
        "step_s": off,
        "step_hooked_s": on,
        "vote_s": vote["vote"],
        "vote_with_figures_s": vote["riders"],
        "judge_s": vote["judge"],
        "detector_per_step_s": per_step,
        "cost_ratio": per_step / off,
    }
    print(
        f"cost: {100 * out['cost_ratio']:.2f}% of a step (target <= 1%): step {1000 * off:.2f} ms, with the hooks "
        f"{1000 * on:.2f} ms (CPU time, medians); every {every} steps the stop vote carries the figures "
        f"({1000 * vote['riders']:.3f} vs {1000 * vote['vote']:.3f} ms) and the judge takes "
        f"{1000 * vote['judge']:.3f} ms",
        flush=True,
    )
    reason = unavailable()
    if reason is not None:
        print(f"detection: not measured ({reason})")
    elif args.slowed or args.healthy:
        runs = detection(args.slowed, args.healthy, args.share, args.cpus, every, windows)
        caught = sum(r["ok"] for r in runs["slowed"])
        alarms = sum(not r["ok"] for r in runs["healthy"])
        out.update(runs)
        out["detected"], out["false_alarms"] = caught, alarms
        figures = [f for r in runs["slowed"] for f in r["figures"]]
        used = [r["used_cpus"] for r in runs["slowed"] if r["used_cpus"] is not None]
        slowed_to = f"{args.cpus} CPU" if args.cpus else f"{args.share} x its measured CPU use ({used} CPU)"
        print(
            f"detection: node 1 slowed to {slowed_to}: {caught}/{len(runs['slowed'])} slowed runs named node 1 (only) "
            f"within {windows} + 1 windows (target 5/5), at {figures} x the median; "
            f"false alarms: {alarms}/{len(runs['healthy'])} healthy runs (target 0)"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
