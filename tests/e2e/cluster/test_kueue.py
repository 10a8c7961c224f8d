"""A queued job under the real Kueue: suspended until admitted, and `status` says why it waits."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from tests.support.cluster import KEEP_RUNNING, RealCluster, scheduled_pods, wait_until

pytestmark = pytest.mark.cluster


def quota(name: str, flavor: str, gpus: int) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [{"name": flavor, "resources": [
                {"name": "cpu", "nominalQuota": 1000}, {"name": "memory", "nominalQuota": "10Ti"},
                {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]},
    }  # fmt: skip


@pytest.fixture
def team_queue(kube: RealCluster, namespace: str) -> Iterator[str]:
    """A ClusterQueue with 8 GPUs of its own flavor, and LocalQueue `team` in the namespace."""
    cq, flavor = f"cq-{namespace}", f"h100-{namespace}"
    kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}},
        quota(cq, flavor, 8),
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "team", "namespace": namespace}, "spec": {"clusterQueue": cq}},
    ]}))  # fmt: skip
    yield cq
    kube.kubectl("delete", "-n", namespace, "localqueue", "team", "--wait=false", check=False)
    kube.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
    kube.kubectl("delete", "resourceflavor", flavor, "--wait=false", check=False)


def test_a_job_waits_for_quota_with_kueues_reason_then_runs(cli, kube: RealCluster, namespace, team_queue) -> None:
    r = cli("submit", "-n", namespace, "--target", "job", "--nodes", "2", "--gpus", "8", "--queue", "team",
            "--annotation", KEEP_RUNNING)  # fmt: skip
    assert r.code == 0, r.err
    job = kube.get("job", "ddp-train", "-n", namespace)
    assert job["spec"]["suspend"] is True  # Kueue's webhook suspended it: no pod before admission
    line = wait_until(
        "Kueue's reason in status",
        lambda: next((ln for ln in cli("status", "ddp-train", "-n", namespace).out.splitlines()
                      if ln.startswith("Admission:") and "insufficient quota" in ln), None),
    )  # fmt: skip
    assert f"waiting for admission in ClusterQueue {team_queue}" in line and "nvidia.com/gpu" in line, line
    assert kube.pods(namespace) == []
    summary = json.loads(cli("status", "ddp-train", "-n", namespace, "-o", "json").out)
    assert summary["admission"]["state"] == "waiting"
    assert any(c["type"] == "QuotaReserved" for c in summary["admission"]["conditions"])

    flavor = f"h100-{namespace}"
    kube.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(quota(team_queue, flavor, 16))
    )
    scheduled_pods(kube, namespace, 2)
    out = wait_until(
        "admitted in status",
        lambda: (o := cli("status", "ddp-train", "-n", namespace).out) and f"admitted by ClusterQueue {team_queue}" in o
        and o,
    )  # fmt: skip
    assert "Admission:   admitted" in out
    table = cli("list", "-n", namespace).out.splitlines()
    assert table[0].split() == ["NAME", "TARGET", "NODES", "STATE", "ADMISSION", "AGE"], table
    assert table[1].split()[4] == "admitted", table


def test_a_missing_local_queue_is_named(cli, kube: RealCluster, namespace: str) -> None:
    r = cli("submit", "-n", namespace, "--target", "job", "--queue", "nowhere")
    assert r.code == 0, r.err
    out = cli("status", "ddp-train", "-n", namespace).out
    assert f'Admission:   LocalQueue "nowhere" does not exist in namespace "{namespace}"' in out, out


def test_dry_run_server_warns_of_a_missing_local_queue(cli, kube: RealCluster, namespace: str) -> None:
    r = cli("submit", "-n", namespace, "--target", "jobset", "--queue", "nowhere", "--dry-run", "server")
    assert r.code == 0, r.err
    warnings = [ln for ln in r.err.splitlines() if ln.startswith("ddpctl: warning: --queue nowhere")]
    assert len(warnings) == 1 and f'LocalQueue "nowhere" does not exist in namespace "{namespace}"' in warnings[0]
    # Kueue's webhook ran on the dry run too: the JobSet came back suspended, so no integration warning


@pytest.mark.parametrize("target", ["job", "jobset", "pytorchjob", "trainjob"])
def test_every_engine_is_queued_and_admitted(cli, kube: RealCluster, namespace, team_queue, target) -> None:
    r = cli("submit", "-n", namespace, "--target", target, "--nodes", "2", "--gpus", "4", "--queue", "team",
            "--annotation", KEEP_RUNNING)  # fmt: skip
    assert r.code == 0, r.err
    assert "ddpctl: warning: --queue" not in r.err  # suspended by Kueue: its integration is on
    scheduled_pods(kube, namespace, 2)
    out = cli("status", "ddp-train", "-n", namespace).out
    assert f"Admission:   admitted by ClusterQueue {team_queue}" in out, out


def test_an_unknown_workload_priority_class_is_named_by_submit_and_status(cli, kube, namespace, team_queue) -> None:
    r = cli("submit", "-n", namespace, "--target", "job", "--queue", "team", "--workload-priority-class", "nosuch")
    assert r.code == 0, r.err
    assert 'ddpctl: warning: --workload-priority-class nosuch: WorkloadPriorityClass "nosuch" does not exist' in r.err
    out = cli("status", "ddp-train", "-n", namespace).out
    assert 'Admission:   WorkloadPriorityClass "nosuch" does not exist' in out, out


def test_a_known_workload_priority_class_reaches_the_workload(cli, kube, namespace, team_queue) -> None:
    wpc = f"high-{namespace}"
    kube.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": wpc},
        "value": 1000}))  # fmt: skip
    try:
        r = cli("submit", "-n", namespace, "--target", "jobset", "--queue", "team", "--workload-priority-class", wpc)
        assert r.code == 0, r.err
        assert "ddpctl: warning: --" not in r.err
        wl = wait_until("a Workload", lambda: kube.get("workloads", "-n", namespace)["items"])[0]
        assert wl["spec"].get("priority") == 1000
    finally:
        kube.kubectl("delete", "workloadpriorityclass", wpc, "--wait=false", check=False)


def test_submit_wait_says_kueues_reason_and_times_out_naming_it(cli, kube: RealCluster, namespace, team_queue) -> None:
    r = cli("submit", "-n", namespace, "--target", "job", "--nodes", "2", "--gpus", "8", "--queue", "team",
            "--wait", "--timeout", "15s")  # fmt: skip
    assert r.code == 3, r.err  # --wait's timeout code
    said = [ln for ln in r.err.splitlines() if ln.startswith("ddpctl: Kueue: ")]
    assert said and f"waiting for admission in ClusterQueue {team_queue}" in said[-1], r.err
    assert "insufficient quota for nvidia.com/gpu" in said[-1] and "(needs 16, maximum capacity 8)" in said[-1], said
    assert len(said) == len(set(said)), said  # each reason once
    last = r.err.strip().splitlines()[-1]
    assert last.startswith("ddpctl: error: timed out after 15s") and "Kueue: waiting for admission" in last, last


def test_status_wait_follows_a_queued_job_from_pending_to_admitted(
    cli, kube: RealCluster, namespace, team_queue
) -> None:
    r = cli("submit", "-n", namespace, "--target", "jobset", "--nodes", "2", "--gpus", "8", "--queue", "team")
    assert r.code == 0, r.err
    waiter = subprocess.Popen(
        [sys.executable, "-m", "ddpctl", "status", "ddp-train", "-n", namespace, "--wait", "--timeout", "120s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(ln) for ln in waiter.stderr or []], daemon=True)
    reader.start()
    seen: list[str] = []

    def pending_said() -> bool:
        while not lines.empty():
            seen.append(lines.get())
        return any("Kueue: waiting for admission" in ln for ln in seen)

    try:
        wait_until("status --wait to print Kueue's reason", pending_said, 60)
        kube.kubectl(  # room for the job: Kueue admits it, kwok runs its pods to success
            "apply", "--server-side", "--force-conflicts", "-f", "-",
            input=json.dumps(quota(team_queue, f"h100-{namespace}", 16)),
        )  # fmt: skip
        assert waiter.wait(timeout=150) == 0
    finally:
        if waiter.poll() is None:
            waiter.kill()
    reader.join(10)
    while not lines.empty():
        seen.append(lines.get())
    text = "".join(seen)
    assert f"ddpctl: Kueue: admitted by ClusterQueue {team_queue}" in text, text
    assert text.index("Kueue: waiting for admission") < text.index("Kueue: admitted by")
