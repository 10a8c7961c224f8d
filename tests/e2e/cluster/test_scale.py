"""At scale on kwok's simulated nodes: a 64-node x 8-GPU job, every pod made, bound to its own node,
wired; and a 256-node pod-recovery JobSet that replaces one deleted pod alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cluster.wiring import layout
from tests.support.cluster import KEEP_RUNNING, RealCluster, cluster_command, scheduled_pods, wait_until

pytestmark = pytest.mark.cluster


def set_nodes(count: int) -> None:
    r = cluster_command("nodes", str(count), timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.fixture
def sixty_four_nodes(real_cluster: RealCluster) -> Iterator[None]:
    set_nodes(72)  # 64 for the job, and room for what earlier tests' namespaces still hold
    yield
    set_nodes(8)


@pytest.mark.parametrize("target", ["job", "jobset"])
def test_64_nodes_of_8_gpus(cli, kube: RealCluster, namespace: str, sixty_four_nodes: None, target) -> None:
    r = cli("submit", "-n", namespace, "--target", target, "--nodes", "64", "--gpus", "8", "--annotation", KEEP_RUNNING)
    assert r.code == 0, r.err
    pods = scheduled_pods(kube, namespace, 64, timeout=180)
    wired = layout(kube, namespace, pods)
    assert len(wired) == 64
    assert {w.nproc for w in wired} == {8} and {w.gpus for w in wired} == {8}
    assert len({w.node_name for w in wired}) == 64  # 8 GPUs each: one pod per node, as the scheduler must
    assert cli("delete", "ddp-train", "-n", namespace, "--wait").code == 0


def test_a_256_node_jobset_replaces_one_deleted_pod_alone(cli, kube: RealCluster, namespace: str) -> None:
    """recovery: pod at scale (kwok's simulated nodes): deleting one of 256 running pods makes the
    JobSet's child Job create 1 pod, its index's, while the 255 others keep their UIDs (under
    gang recovery the failed child Job restarts the whole set: 256 pods made again)."""
    import time

    r = cli("submit", "-n", namespace, "--target", "jobset", "--nodes", "256", "--gpus", "0", "--recovery", "pod",
            "--annotation", KEEP_RUNNING)  # fmt: skip
    assert r.code == 0, r.err
    trainers = "app.kubernetes.io/component=trainer"

    def running() -> list[dict] | None:
        pods = [p for p in kube.pods(namespace, trainers) if p["status"].get("phase") == "Running"]
        return pods if len(pods) == 256 else None

    before = {p["metadata"]["uid"]: p for p in wait_until("256 running trainer pods", running, 300)}
    index = "batch.kubernetes.io/job-completion-index"
    (victim,) = [p for p in before.values() if p["metadata"]["labels"][index] == "100"]
    t0 = time.monotonic()
    kube.kubectl("delete", "pod", "-n", namespace, victim["metadata"]["name"], "--wait=false")

    def replaced() -> list[dict] | None:
        pods = running()
        return pods if pods and victim["metadata"]["uid"] not in {p["metadata"]["uid"] for p in pods} else None

    after = {p["metadata"]["uid"]: p for p in wait_until("index 100 running again", replaced, 300)}
    print(f"256-node JobSet, one pod deleted: all 256 running again after {time.monotonic() - t0:.1f} s")
    made = set(after) - set(before)
    assert len(made) == 1, len(made)  # one pod made: the deleted one's
    assert after[made.pop()]["metadata"]["labels"][index] == "100"
    assert set(before) - set(after) == {victim["metadata"]["uid"]}  # the 255 others are the same pods
    assert cli("delete", "ddp-train", "-n", namespace, "--wait").code == 0
