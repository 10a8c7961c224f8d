"""The real node (testcluster/node/): submit to the first step, and an eviction to the resumed step.

1. first step: `ddpctl submit` of a 2-pod x 2-process gloo job on the real node, to rank 0's
   `first_step` metrics event (the trainer's own wall clock, written to the job's checkpoints
   volume, which this machine sees), against the baseline: the same manifests, rendered
   beforehand with `ddpctl render`, applied with `kubectl apply` and polled the same way.
   Interleaved, a fresh namespace each; the medians' ratio. Target: ddpctl / kubectl <= 1.05.
2. eviction: node 1's pod of a running 2 x 1 job is evicted (the Eviction API) after step 5
   (where rank 1 holds: the tests' fault plugin, in an image of the trainer plus the plugin);
   reported is the time to the resumed job's first step, as a timeline of where it goes: the
   stop checkpoint durable (the trainer's `preempted` event), the old pod gone (the grace period
   used), both new trainers running (pod start), rendezvous (rank 0's "world size" line),
   the checkpoint loaded (its `resume` event) and the first step after it.

Needs the test cluster with its real node (`make cluster`, as root) and Docker with the CPU base.

    .venv/bin/python bench/bench_real_node.py [--reps 3] [--json out.json]
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
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("DDPCTL_CLUSTER_DIR") or REPO / ".cluster")
KUBECTL = [str(STATE / "bin" / "kubectl"), "--kubeconfig", str(STATE / "kubeconfig")]
NODE = "ddpctl-real-node"
ON_NODE = ["--node-selector", "node.ddpctl.io/real=true", "--toleration", "node.ddpctl.io/real=true:NoSchedule"]
TRAIN = ["--synthetic-samples", "64", "--eval-samples", "16", "--global-batch-size", "16", "--epochs", "1",
         "--metrics-file", "/checkpoints/metrics.jsonl"]  # fmt: skip
RESTART = ["--synthetic-samples", "128", "--eval-samples", "32", "--global-batch-size", "16", "--epochs", "2",
           "--save-every", "3", "--dtype", "float64", "--metrics-file", "/checkpoints/metrics.jsonl"]  # fmt: skip


def sh(*argv: str, input: str | None = None, cwd: Path | None = None) -> str:
    r = subprocess.run(argv, input=input, capture_output=True, text=True, check=False, cwd=cwd)
    if r.returncode:
        raise SystemExit(f"{' '.join(argv[:4])}: {r.stderr.strip()[-2000:]}")
    return r.stdout


def ddpctl(*args: str) -> str:
    return sh(sys.executable, "-m", "ddpctl", *args)


def cluster_cmd(*args: str) -> str:
    """`python -m testcluster ARGS`: the test cluster's commands, run from the clone's root."""
    return sh(sys.executable, "-m", "testcluster", *args, cwd=REPO)


def kubectl(*args: str, input: str | None = None) -> str:
    return sh(*KUBECTL, *args, input=input)


def image() -> str:
    """The trainer image on the CPU base, on the real node (a no-op when both are there)."""
    tag = ddpctl("build", "--quiet", "--no-latest", "--base-image", "ddpctl-base:cpu", "--repo", "ddpctl-trainer-test")
    cluster_cmd("load", tag.strip())
    return tag.strip()


def test_image(trainer: str) -> str:
    """The trainer image plus the tests' fault plugin (tests/e2e/cluster/user-image.Dockerfile), on
    the real node: the eviction holds rank 1 after step 5 with it."""
    tag = ddpctl("build", "--quiet", "--no-latest", "--base-image", trainer, "--repo", "ddpctl-user-test",
                 "--file", str(REPO / "tests/e2e/cluster/user-image.Dockerfile"),
                 "--context", str(REPO / "tests/support/models"))  # fmt: skip
    cluster_cmd("load", tag.strip())
    return tag.strip()


def namespace_with_volume(tmp: Path) -> tuple[str, Path]:
    """A restricted namespace and a `local` volume on the real node, claimed as `ckpt`."""
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    folder = tmp / ns
    folder.mkdir()
    os.chown(folder, 1000, 1000)
    kubectl("create", "namespace", ns)
    kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}
    docs = [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": ns},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "bench",
                  "local": {"path": str(folder)}, "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
                  "claimRef": {"namespace": ns, "name": "ckpt"}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "ckpt", "namespace": ns},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "bench", "volumeName": ns,
                  "resources": {"requests": {"storage": "1Gi"}}}},
    ]  # fmt: skip
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    return ns, folder


def cleanup(ns: str) -> None:
    subprocess.run([*KUBECTL, "delete", "namespace", ns, "--wait=false"], capture_output=True, check=False)
    subprocess.run([*KUBECTL, "delete", "pv", ns, "--wait=false"], capture_output=True, check=False)


def events(folder: Path, name: str) -> list[dict[str, Any]]:
    path = folder / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:  # a line being written
            continue
        if event.get("event") == name:
            out.append(event)
    return out


def poll(what: str, check: Callable[[], Any], timeout: float = 600) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def job_flags(img: str, *extra: str) -> list[str]:
    return ["--target", "job", "--name", "b", "--gpus", "0", "--image", img, *ON_NODE,
            "--volume", "checkpoints=ckpt:/checkpoints", *extra]  # fmt: skip


def first_step(img: str, tmp: Path, how: str) -> float:
    ns, folder = namespace_with_volume(tmp)
    try:
        flags = [*job_flags(img, "--nodes", "2", "--procs", "2"), "-n", ns, "--", *TRAIN]
        if how == "kubectl":
            manifests = tmp / f"{ns}.yaml"
            manifests.write_text(ddpctl("render", *flags))  # rendered before the clock starts
            t0 = time.time()
            kubectl("apply", "-f", str(manifests))
        else:
            t0 = time.time()
            ddpctl("submit", *flags)
        return float(poll("the first step", lambda: events(folder, "first_step"))[0]["time"]) - t0
    finally:
        cleanup(ns)


def log_time(ns: str, pod: str, text: str) -> float | None:
    """The kubelet's timestamp of the first log line of `pod` that holds `text`."""
    r = subprocess.run([*KUBECTL, "logs", "-n", ns, pod, "--timestamps"], capture_output=True, text=True, check=False)
    for line in r.stdout.splitlines():
        stamp, _, rest = line.partition(" ")
        if text in rest:
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return None


def pods(ns: str) -> list[dict[str, Any]]:
    return list(json.loads(kubectl("get", "pods", "-n", ns, "-o", "json"))["items"])


def eviction(img: str, tmp: Path) -> dict[str, float]:
    ns, folder = namespace_with_volume(tmp)
    # the tests' fault plugin (in the test image): rank 1 writes /checkpoints/held after step 5 and waits
    hold = ["-e", "DDP_TRAINER_CALLBACK=test_faults:Faults", "-e", "DDPCTL_TEST_HOLD_AT_STEP=5", "-e",
            "DDPCTL_TEST_HOLD_RANK=1", "-e", "DDPCTL_TEST_HOLD_FILE=/checkpoints/held"]  # fmt: skip
    try:
        ddpctl("submit", *job_flags(img, "--nodes", "2", "--procs", "1", *hold), "-n", ns, "--", *RESTART)
        poll("rank 1 holding after step 5", lambda: (folder / "held").exists())
        old = {p["metadata"]["name"] for p in pods(ns)}
        victim = next(p["metadata"]["name"] for p in pods(ns) if p["metadata"]["labels"].get(
            "batch.kubernetes.io/job-completion-index") == "1")  # fmt: skip
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim, "namespace": ns}}
        t0 = time.time()
        kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/{victim}/eviction", "-f", "-", input=json.dumps(body))
        poll("the evicted pod gone", lambda: victim not in {p["metadata"]["name"] for p in pods(ns)})
        t_gone = time.time()

        def both_running() -> bool:
            new = [p for p in pods(ns) if p["metadata"]["name"] not in old]
            return len(new) == 2 and all(
                (p["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("running") for p in new
            )

        poll("both new pods running", both_running)
        t_running = time.time()
        steps = poll("the resumed first step", lambda: len(events(folder, "first_step")) >= 2 and events(
            folder, "first_step"))  # fmt: skip
        t_step = float(steps[-1]["time"])
        rank0 = next(p["metadata"]["name"] for p in pods(ns) if p["metadata"]["name"] not in old and p["metadata"][
            "labels"].get("batch.kubernetes.io/job-completion-index") == "0")  # fmt: skip
        marks = {
            "evicted": t0,
            "stop checkpoint durable": float(events(folder, "preempted")[-1]["time"]),
            "old pod gone (grace period over)": t_gone,
            "both new trainers running": t_running,
            "rendezvous done (world size line)": log_time(ns, rank0, "world size") or float("nan"),
            "checkpoint loaded": float(events(folder, "resume")[-1]["time"]),
            "first step after resume": t_step,
        }
        return {k: v - t0 for k, v in marks.items()}
    finally:
        cleanup(ns)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cluster_cmd("up")
    os.environ["KUBECONFIG"] = str(STATE / "kubeconfig")
    img = image()
    results: dict[str, Any] = {"ddpctl": [], "kubectl": []}
    with tempfile.TemporaryDirectory(prefix="ddpctl-bench-node-") as tmp:
        for _ in range(args.reps):
            for how in ("kubectl", "ddpctl"):
                results[how].append(first_step(img, Path(tmp), how))
                print(f"first step via {how}: {results[how][-1]:.2f} s", flush=True)
        ours, theirs = statistics.median(results["ddpctl"]), statistics.median(results["kubectl"])
        results["ratio"] = ours / theirs
        print(f"submit to first step: ddpctl {ours:.2f} s, kubectl apply {theirs:.2f} s: ratio {ours / theirs:.3f} "
              "(target <= 1.05)")  # fmt: skip
        results["eviction"] = ev = eviction(test_image(img), Path(tmp))
        print(f"eviction to the resumed first step: {ev['first step after resume']:.1f} s; the timeline:")
        for mark, at in sorted(ev.items(), key=lambda kv: kv[1]):
            print(f"  {at:7.2f} s  {mark}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
