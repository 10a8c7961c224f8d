"""A 64-node x 8-GPU job on 64 simulated nodes: every pod made, bound to its own node, wired."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.cluster.wiring import layout
from tests.support.cluster import KEEP_RUNNING, RealCluster, cluster_command, scheduled_pods

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
