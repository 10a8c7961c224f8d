"""A straggler on the real node (testcluster/node/): three pods train (the user image of
test_real_node.py, built from this checkout); once rank 0 has reported step 30, node 1's pod gets
its CPU lowered in place (the pod's `resize` subresource, as a vertical autoscaler or an operator
would), so its own work slows mid-run while its peers' does not. Under `--stragglers fail` rank 0
names that pod and its Kubernetes node, every pod exits 202, the Job's rules fail it at once
(no retry), and `ddpctl status` names the node and the resubmit.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import pytest

from tests.e2e.cluster.test_real_node import NODE, ON_NODE
from tests.support.cluster import RealCluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SLOW_FROM = 30
PROGRESS = re.compile(r"^\[node 0\] \[rank 0\] epoch 1/1 step (\d+)/\d+")
STRAGGLER = "[node 0] [rank 0] ddpctl-trainer: straggler: "
# 3 ranks x 4 samples a step, 400 steps: long enough that the slowed pod is judged several windows
TRAIN = ["--synthetic-samples", "4800", "--eval-samples", "12", "--global-batch-size", "12", "--epochs", "1"]
CPU = "500m"
SLOWED = "100m"  # 0.2 of the others: named at ~0.25 x the median; 50m took 3x as long to judge


def _resize(kube: RealCluster, ns: str, pod: dict) -> None:
    """Lower the pod's CPU request and limit in place (its QoS class stays as it is)."""
    container = pod["spec"]["containers"][0]["name"]
    patch = {"spec": {"containers": [{"name": container, "resources": {
        "requests": {"cpu": SLOWED}, "limits": {"cpu": SLOWED}}}]}}  # fmt: skip
    kube.kubectl("patch", "pod", pod["metadata"]["name"], "-n", ns, "--subresource", "resize", "--type", "strategic",
                 "-p", json.dumps(patch))  # fmt: skip


def test_a_pod_whose_cpu_is_lowered_mid_run_is_named_and_fail_ends_the_job_with_202(
    cli, kube: RealCluster, restricted: str, node_image: str
) -> None:
    ns = restricted
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpctl", "submit", "-n", ns, "--target", "job", "--name", "sg", "--nodes", "3",
         "--procs", "1", "--gpus", "0", "--cpu", CPU, "--cpu-limit", CPU, "--image", node_image, *ON_NODE,
         "--stragglers", "fail", "--backoff-limit", "2", "--follow", "--timeout", "15m",
         "--", *TRAIN, "--log-every", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    errors: list[str] = []
    drain = threading.Thread(target=lambda: errors.extend(proc.stderr or []), daemon=True)  # type: ignore[arg-type]
    drain.start()
    resized_at, named = None, []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            found = PROGRESS.match(line)
            if found and resized_at is None and int(found.group(1)) >= SLOW_FROM:
                (pod,) = [p for p in kube.pods(ns) if p["metadata"]["labels"].get(
                    "batch.kubernetes.io/job-completion-index") == "1"]  # fmt: skip
                _resize(kube, ns, pod)
                resized_at = int(found.group(1))
            if line.startswith(STRAGGLER):
                named.append(line.rstrip("\n"))
        code = proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
        drain.join(10)
    err = "".join(errors)
    assert resized_at is not None, "the job never reached the step the test slows it at: " + err[-3000:]
    assert code == 1, err[-3000:]
    # node 1's pod and the Kubernetes node it ran on, named once, after the resize
    assert len(named) == 1, named
    assert re.search(rf"straggler: node 1 \(pod sg-1-\w+, k8s node {NODE}\): own work ", named[0]), named
    since = int(re.search(r"since step (\d+)", named[0]).group(1))  # type: ignore[union-attr]
    assert since > resized_at - 10, (resized_at, named)
    codes = {p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] for p in kube.pods(ns)}
    assert codes == {202}, codes
    job = kube.get("job", "sg", "-n", ns)
    assert job["status"].get("failed", 0) <= 3 and all(  # failed at once by its rule, not after retries
        c["reason"] == "PodFailurePolicy" for c in job["status"]["conditions"] if c["type"] == "Failed"
    ), job["status"]
    status = cli("status", "sg", "-n", ns)
    assert "node 1" in status.out and "202" in status.out, status.out
