"""The real node (testcluster/node/): what a lost pod costs, `recovery: pod` against `gang`.

A 3-pod x 1-process gloo job on the real node (target job, float64, a checkpoint every 3 steps on
a `local` volume this machine sees); node 1's trainer SIGKILLs itself after step 4 (the tests'
fault plugin, in an image of the trainer plus the plugin), or node 1's pod is evicted after step 4
(`--how evict`: the Eviction API, as a drain asks; its trainer leaves after the step in progress).
Reported, for each mode, is the time from the kill (the kubelet's timestamp of the plugin's line)
or the eviction request until the whole group trains again:

- gang: every pod is recreated, and the group resumes from the checkpoint of step 3: rank 0's
  `first_step` metrics event after its `resume` event (step 4 is lost and done again);
- pod: only node 1's pod is recreated, the survivors wait in the same processes, and the group
  forms again with the replacement: rank 0's `recovered` event (no step lost, nothing read).

The ratio pod / gang is the figure (target <= 0.5), with a timeline of where each goes: the failed
pod ended, the replacement(s) made and running, the group formed again, the state handed over.
Interleaved, a fresh namespace each; medians over --reps.

Needs the test cluster with its real node (`make cluster`, as root) and Docker with the CPU base.

    .venv/bin/python bench/bench_pod_recovery_node.py [--reps 1] [--how kill|evict|both] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_real_node import (
    STATE,
    cleanup,
    cluster_cmd,
    ddpctl,
    events,
    image,
    job_flags,
    kubectl,
    namespace_with_volume,
    pods,
    poll,
    test_image,
)

TRAIN = ["--synthetic-samples", "144", "--eval-samples", "24", "--global-batch-size", "12", "--epochs", "1",
         "--save-every", "3", "--dtype", "float64", "--metrics-file", "/checkpoints/metrics.jsonl"]  # fmt: skip
KILLED_AT = 4
FAULT = ["-e", "DDP_TRAINER_CALLBACK=test_faults:Faults", "-e", f"DDPCTL_TEST_KILL_AT_STEP={KILLED_AT}",
         "-e", "DDPCTL_TEST_KILL_RANK=1", "-e", "DDPCTL_TEST_KILL_ONCE_FILE=/checkpoints/killed"]  # fmt: skip
# evicted instead: node 1 holds after step 4 (writing the file) until its SIGTERM, then the Eviction API
HOLD = ["-e", "DDP_TRAINER_CALLBACK=test_faults:Faults", "-e", f"DDPCTL_TEST_HOLD_AT_STEP={KILLED_AT}",
        "-e", "DDPCTL_TEST_HOLD_RANK=1", "-e", "DDPCTL_TEST_HOLD_FILE=/checkpoints/held"]  # fmt: skip
INDEX = "batch.kubernetes.io/job-completion-index"


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def killed_at(ns: str, pod: str) -> float:
    out = kubectl("logs", "-n", ns, pod, "--timestamps")
    for line in out.splitlines():
        at, _, rest = line.partition(" ")
        if "[fault] killing rank" in rest:
            return stamp(at)
    raise SystemExit(f"{pod}: no kill line in its log")


def evict(ns: str, pod: str) -> float:
    """The Eviction API, as `kubectl drain` calls it; when it was asked (this machine is the node)."""
    at = time.time()
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}}
    kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", "-f", "-", input=json.dumps(body))
    return at


def lost(img: str, tmp: Path, mode: str, how: str) -> dict[str, float]:
    ns, folder = namespace_with_volume(tmp)
    try:
        fault = FAULT if how == "kill" else HOLD
        flags = job_flags(img, "--nodes", "3", "--procs", "1", "--recovery", mode, "--backoff-limit", "2", *fault)
        ddpctl("submit", *flags, "-n", ns, "--", *TRAIN)
        first = {
            p["metadata"]["name"]: p for p in poll("3 trainer pods", lambda: len(trainers(ns)) >= 3 and trainers(ns))
        }
        victim = next(n for n, p in first.items() if p["metadata"]["labels"].get(INDEX) == "1")
        if how == "evict":
            poll("node 1 held after step 4", lambda: (folder / "held").exists())
            t_evicted = evict(ns, victim)
        done = "recovered" if mode == "pod" else "first_step"

        def back() -> list[dict[str, Any]] | None:
            found = events(folder, done)
            if mode == "gang":  # the resumed start's first step: after a `resume` event
                found = found[1:] if events(folder, "resume") else []
            return found or None

        t_back = float(poll("training again", back)[-1]["time"])
        t0 = killed_at(ns, victim) if how == "kill" else t_evicted
        now = trainers(ns)
        made = [p for p in now if p["metadata"]["name"] not in first]
        ended = [t for p in now if p["metadata"]["name"] in first and (t := finished(p)) is not None]
        marks = {
            "killed" if how == "kill" else "evicted": t0,
            "failed pod ended": min(ended) if ended else float("nan"),
            f"{len(made)} pod(s) made again": max(stamp(p["metadata"]["creationTimestamp"]) for p in made),
            "replacement(s) running": max(started(p) for p in made),
            "training again" + (" (state handed over)" if mode == "pod" else " (first step after resume)"): t_back,
        }
        return {k: v - t0 for k, v in marks.items()}
    finally:
        cleanup(ns)


def trainers(ns: str) -> list[dict[str, Any]]:
    return [p for p in pods(ns) if p["metadata"]["labels"].get("app.kubernetes.io/component") == "trainer"]


def finished(pod: dict[str, Any]) -> float | None:
    state = ((pod["status"].get("containerStatuses") or [{}])[0].get("state") or {}).get("terminated") or {}
    return stamp(state["finishedAt"]) if state.get("finishedAt") else None


def started(pod: dict[str, Any]) -> float:
    cs = (pod["status"].get("containerStatuses") or [{}])[0]
    state = cs.get("state") or {}
    at = (state.get("running") or state.get("terminated") or {}).get("startedAt")
    return stamp(at) if at else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--how", choices=("kill", "evict", "both"), default="both", help="How node 1's pod is lost.")
    args = ap.parse_args()
    cluster_cmd("up")
    os.environ["KUBECONFIG"] = str(STATE / "kubeconfig")
    img = test_image(image())
    hows = ("kill", "evict") if args.how == "both" else (args.how,)
    results: dict[str, Any] = {f"{how} {mode}": [] for how in hows for mode in ("gang", "pod")}
    with tempfile.TemporaryDirectory(prefix="ddpctl-bench-recovery-") as tmp:
        for _ in range(args.reps):
            for how in hows:
                for mode in ("gang", "pod"):
                    timeline = lost(img, Path(tmp), mode, how)
                    results[f"{how} {mode}"].append(timeline)
                    print(f"{mode}: the lost pod's {'kill' if how == 'kill' else 'eviction'} to training again:",
                          flush=True)  # fmt: skip
                    for mark, at in sorted(timeline.items(), key=lambda kv: kv[1]):
                        print(f"  {at:7.2f} s  {mark}", flush=True)
    for how in hows:
        back = {m: statistics.median(list(t.values())[-1] for t in results[f"{how} {m}"]) for m in ("gang", "pod")}
        results[f"{how} ratio"] = back["pod"] / back["gang"]
        print(f"{how} to training again: gang {back['gang']:.1f} s, pod {back['pod']:.1f} s: ratio "
              f"{results[f'{how} ratio']:.2f} (target <= 0.5)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
