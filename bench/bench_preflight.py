"""The preflight's detection, false alarms and cost, on 2 nodes x 2 processes (gloo, loopback).

Three kinds of job, interleaved round by round (healthy, slowed, trainer) so drifting load on
the machine hits all alike:

    healthy   python -m ddpctl_trainer.preflight, every node as it is
    slowed    the same with node 1's agent and workers in a cgroup with a CPU quota (--cpus, default
              0.05 CPU) from the moment its process group is up (tests/support/slow_worker.py)
    trainer   the built-in trainer, same layout, --max-steps 20: the baseline step time

Reported: detection (slowed runs whose findings name node 1, and only node 1, out of the slowed
runs), false alarms (healthy runs with any finding), the spread of the nodes' compute figures
(the slower node's share of the faster one) in both, and the check's own cost (its elapsed
seconds, from rank 0's report) against one training step, as a ratio. Needs root for the cgroup
(cgroup v1 cpu or v2 cpu.max). Usage:

    python bench/bench_preflight.py [--runs 5] [--cpus 0.05] [--json out.json]
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

from tests.support.cpu_quota import unavailable  # noqa: E402 - the checkout's test support, on sys.path above
from tests.support.preflight import named_nodes, node_figures, run_preflight  # noqa: E402
from tests.support.trainer import clean_env, free_port, start, static_node_command, wait_all  # noqa: E402


def step_seconds(workdir: Path, steps: int = 20) -> float:
    """Seconds per optimizer step of the built-in trainer (convnet, batch 32 per process), 2 x 2
    as the preflight's jobs: the `done` event's training time over its steps (4096 samples: no
    epoch ends inside them, so no checkpoint or evaluation is counted)."""
    port = str(free_port())
    args = ["--max-steps", str(steps), "--no-eval", "--synthetic-samples", "4096", "--progress", "none"]
    procs = []
    for node in (0, 1):
        work = workdir / f"node{node}"
        work.mkdir(parents=True)
        procs.append(start(static_node_command(node, 2, 2, port, work, args), work, clean_env()))
    outs = wait_all(procs, timeout=600)
    if [p.returncode for p in procs] != [0, 0]:
        raise SystemExit(f"the trainer failed: {outs}")
    events = [json.loads(line) for line in (workdir / "node0" / "metrics.jsonl").read_text().splitlines()]
    done = next(e for e in events if e["event"] == "done")
    return float(done["elapsed_s"]) / int(done["steps"])


def share(report: dict[str, Any]) -> float:
    """The slower node's compute figure over the faster one's."""
    figures = node_figures(report).values()
    return min(figures) / max(figures)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="jobs of each kind")
    parser.add_argument("--cpus", type=float, default=0.05, help="the slowed node's CPU quota (CPUs)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    reason = unavailable()
    if reason is not None:
        print(f"bench_preflight: cannot slow a node: {reason}", file=sys.stderr)
        return 2

    healthy: list[dict[str, Any]] = []
    slowed: list[dict[str, Any]] = []
    steps: list[float] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for kind in ("healthy", "slowed", "trainer"):
                work = Path(tmp) / f"{kind}-{i}"
                if kind == "trainer":
                    steps.append(step_seconds(work))
                    print(f"round {i + 1}: trainer {steps[-1] * 1e3:.0f} ms/step", flush=True)
                    continue
                slow = 1 if kind == "slowed" else None
                run = run_preflight(work, args=["--preflight", "warn"], slow_node=slow, cpus=args.cpus)
                if run.codes != [0, 0] or not run.reports:
                    raise SystemExit(f"the {kind} preflight failed:\n{run.explain()}")
                (slowed if slow else healthy).append(run.report)
                r = run.report
                print(
                    f"round {i + 1}: {kind:7} named {sorted(named_nodes(r)) or '-'}, compute "
                    f"{', '.join(f'{v:.1f}' for v in node_figures(r).values())} GFLOP/s (share {share(r):.2f}), "
                    f"checks {r['elapsed_s']:.1f} s",
                    flush=True,
                )

    detected = sum(1 for r in slowed if named_nodes(r) == {1})
    false_alarms = sum(1 for r in healthy if r["findings"])
    cost = statistics.median(r["elapsed_s"] for r in healthy)
    step = statistics.median(steps)
    result = {
        "runs": args.runs,
        "cpus": args.cpus,
        "detected": detected,
        "detection_rate": detected / len(slowed),
        "false_alarms": false_alarms,
        "false_alarm_rate": false_alarms / len(healthy),
        "healthy_share": sorted(round(share(r), 3) for r in healthy),
        "slowed_share": sorted(round(share(r), 3) for r in slowed),
        "check_s_median": cost,
        "check_s_slowed_median": statistics.median(r["elapsed_s"] for r in slowed),
        "step_s_median": step,
        "check_over_step": cost / step,
        "bench_s": time.perf_counter() - started,
    }
    print()
    rate, alarms = result["detection_rate"], result["false_alarm_rate"]
    print(f"detection:    {detected}/{len(slowed)} slowed runs named node 1 (and only it) = {rate:.2f}")
    print(f"false alarms: {false_alarms}/{len(healthy)} healthy runs named something = {alarms:.2f}")
    print(f"compute, slower node / faster node: healthy {result['healthy_share']}, slowed {result['slowed_share']}")
    slowed_s = result["check_s_slowed_median"]
    print(
        f"cost: the checks {cost:.2f} s (median of healthy runs; slowed {slowed_s:.2f} s) vs one training step "
        f"{step * 1e3:.0f} ms = {result['check_over_step']:.0f} steps"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
