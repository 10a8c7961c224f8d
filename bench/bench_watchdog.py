"""The stall watchdog's cost: trainer samples/s with the watchdog off vs on, in the same invocation.

2 processes under torchrun (gloo, one thread each), the default conv net at batch 32: short steps,
so a per-step cost would show. Three settings, alternating A B C A B C ... so drifting machine load
hits all alike; each figure is the median of its repeats:

    off      --stall-timeout 0    no thread, no store traffic (the loop's phase marks remain)
    default  --stall-timeout 300  the default: a wake-up every 5 s
    eager    --stall-timeout 2    a wake-up every 0.2 s: 25x the default's store traffic

Also measured in this process: the cost of one phase mark (``Beacon.mark``), the only work the
watchdog adds to the training loop itself, against the measured step time. Target: the watchdog
costs < 1 % (within noise). Usage:

    python bench/bench_watchdog.py [--repeats 3] [--steps 150] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_trainer import trainer  # the same measured trainer run as bench_trainer.py

    rates: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for _ in range(args.repeats):
        for name, timeout in SETTINGS.items():
            result = trainer(2, "convnet", args.steps, 10, extra=("--stall-timeout", timeout))
            rates[name].append(result["samples_per_s"])
            print(f"  {name:8s} {result['samples_per_s']:8.1f} samples/s", flush=True)
    median = {name: statistics.median(v) for name, v in rates.items()}
    spread = {name: (max(v) - min(v)) / statistics.median(v) for name, v in rates.items()}
    mark = mark_cost_s()
    step_s = 32 * 2 / median["off"]  # one optimizer step of the whole job (batch 32 x 2 processes)
    report = {
        "samples_per_s": median,
        "ratio_default_vs_off": median["default"] / median["off"],
        "ratio_eager_vs_off": median["eager"] / median["off"],
        "noise_off": spread["off"],
        "mark_ns": mark * 1e9,
        "marks_share_of_step": MARKS_PER_STEP * mark / step_s,
    }
    print(
        f"watchdog default vs off: {report['ratio_default_vs_off']:.3f}  "
        f"eager (0.2 s wake-ups) vs off: {report['ratio_eager_vs_off']:.3f}  "
        f"(run-to-run spread with it off: {spread['off']:.1%}; target: within noise, < 1 %)"
    )
    print(
        f"phase marks: {report['mark_ns']:.0f} ns each, {MARKS_PER_STEP} per step = "
        f"{report['marks_share_of_step']:.4%} of a {step_s * 1e3:.1f} ms step"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
