"""The stall watchdog's cost: trainer samples/s with the watchdog off vs on, in the same invocation.

2 processes under torchrun (gloo, one thread each), the default conv net at batch 32: short steps,
so a per-step cost would show. Three settings, alternating A B C, B C A, C A B ... so drifting
machine load hits all alike and none always runs first; each figure is the median of its repeats,
on process CPU time (every thread of the training processes, the watchdog's included: steadier
when other work shares the CPUs) and on wall time:

    off      --stall-timeout 0    no thread, no store traffic (the loop's phase marks remain)
    default  --stall-timeout 300  the default: a wake-up every 5 s
    eager    --stall-timeout 2    a wake-up every 0.2 s: 25x the default's store traffic

Also measured in this process, where load matters far less: the cost of one phase mark
(``Beacon.mark``), the only work the watchdog adds to the training loop itself, against the measured
step time; and the cost of one watchdog wake-up (publish a heartbeat, add to the progress counter)
against a TCPStore on loopback, as a share of one core at the default and eager wake-up rates; and
the interference of the watchdog thread with a busy main thread (a pure-Python loop that marks a
phase every 1000 iterations, with and without an eager watchdog beside it, alternating). Target: the watchdog
costs < 1 % (within noise). Usage:

    python bench/bench_watchdog.py [--repeats 3] [--steps 150] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import timeit
from pathlib import Path

SETTINGS = {"off": "0", "default": "300", "eager": "2"}
MARKS_PER_STEP = 6  # data, forward, backward, optimizer, logging (+ one loader iteration)


def mark_cost_s() -> float:
    """Seconds per ``Beacon.mark`` call (best of 5 runs of 1e6 calls)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ddpctl_trainer.watchdog import FORWARD, Beacon

    beacon = Beacon()
    n = 1_000_000
    return min(timeit.repeat(lambda: beacon.mark(FORWARD), number=n, repeat=5)) / n


def wakeup_cost_s() -> float:
    """Seconds of one watchdog wake-up when the rank moved: a heartbeat ``set`` plus a counter
    ``add`` on a TCPStore over loopback (median of 2000)."""
    import datetime
    import socket

    import torch.distributed as dist

    from ddpctl_trainer.watchdog import Beacon, Watchdog

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = dist.TCPStore("127.0.0.1", port, is_master=True, timeout=datetime.timedelta(seconds=30))
    client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
    beacon = Beacon()
    dog = Watchdog(beacon, dist.PrefixStore("bench", client), rank=0, world_size=1, node=0, local_rank=0, timeout=300)
    times = []
    for _ in range(2000):
        beacon.mark("forward")
        t0 = time.perf_counter()
        dog._publish()  # what _run does on a wake-up after progress
        dog.store.add("progress", 1)
        times.append(time.perf_counter() - t0)
    del server
    return statistics.median(times)


def interference_ratio(rounds: int = 10) -> float:
    """Main-thread loop throughput (per CPU second) with an eager watchdog thread / without."""
    import datetime
    import socket

    import torch.distributed as dist

    from ddpctl_trainer.watchdog import FORWARD, Beacon, Watchdog

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = dist.TCPStore("127.0.0.1", port, is_master=True, timeout=datetime.timedelta(seconds=30))
    client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))

    def loop(beacon: Beacon, seconds: float = 1.0) -> float:
        n, t0, end = 0, time.process_time(), time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(1000):
                n += 1
            beacon.mark(FORWARD)
        return n / (time.process_time() - t0)

    rates: dict[str, list[float]] = {"off": [], "eager": []}
    for i in range(rounds):
        for name in ("off", "eager") if i % 2 == 0 else ("eager", "off"):
            beacon = Beacon()
            dog = None
            if name == "eager":
                store = dist.PrefixStore(f"interference/{i}", client)
                dog = Watchdog(beacon, store, rank=0, world_size=1, node=0, local_rank=0, timeout=1e9, interval=0.2)
                dog.start()
            rates[name].append(loop(beacon))
            if dog is not None:
                dog.stop()
    del server
    return statistics.median(rates["eager"]) / statistics.median(rates["off"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_trainer import trainer  # the same measured trainer run as bench_trainer.py

    runs: dict[str, dict[str, list[float]]] = {name: {"cpu": [], "wall": []} for name in SETTINGS}
    names = list(SETTINGS)
    for i in range(args.repeats):
        for name in names[i % 3 :] + names[: i % 3]:
            timeout = SETTINGS[name]
            result = trainer(2, "convnet", args.steps, 10, extra=("--stall-timeout", timeout))
            runs[name]["cpu"].append(result["samples_per_cpu_s"])
            runs[name]["wall"].append(result["samples_per_s"])
            print(
                f"  {name:8s} {result['samples_per_cpu_s']:8.1f} samples/CPU-s "
                f"{result['samples_per_s']:8.1f} samples/s",
                flush=True,
            )
    report: dict[str, object] = {}
    for clock in ("cpu", "wall"):
        median = {name: statistics.median(r[clock]) for name, r in runs.items()}
        off = runs["off"][clock]
        noise = (max(off) - min(off)) / statistics.median(off)
        report[clock] = {
            "median": median,
            "ratio_default_vs_off": median["default"] / median["off"],
            "ratio_eager_vs_off": median["eager"] / median["off"],
            "spread_off": noise,
        }
        print(
            f"{clock:4s}: watchdog default vs off {median['default'] / median['off']:.3f}, "
            f"eager (0.2 s wake-ups) vs off {median['eager'] / median['off']:.3f} "
            f"(spread of the off runs: {noise:.1%}; target: within noise, < 1 %)"
        )
    mark = mark_cost_s()
    step_s = 32 * 2 / statistics.median(runs["off"]["wall"])  # one optimizer step of the whole job
    report["mark_ns"] = mark * 1e9
    report["marks_share_of_step"] = MARKS_PER_STEP * mark / step_s
    wake = wakeup_cost_s()
    report["wakeup_us"] = wake * 1e6
    report["core_share_default"] = wake / 5.0
    report["core_share_eager"] = wake / 0.2
    report["interference_eager_vs_off"] = interference = interference_ratio()
    print(
        f"phase marks: {report['mark_ns']:.0f} ns each, {MARKS_PER_STEP} per step = "
        f"{report['marks_share_of_step']:.4%} of a {step_s * 1e3:.1f} ms step"
    )
    print(
        f"one wake-up (heartbeat + counter, TCPStore on loopback): {wake * 1e6:.0f} us = "
        f"{wake / 5.0:.4%} of a core at the default 5 s, {wake / 0.2:.3%} at the eager 0.2 s"
    )
    print(f"a busy main thread with an eager watchdog beside it vs alone: {interference:.3f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
