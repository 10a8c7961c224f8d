"""Topology requests under the real Kueue's Topology Aware Scheduling, on the kwok nodes' block
and rack labels (2 blocks x 2 racks x 2 nodes of 8 GPUs): where the pods land, read from the pods'
nodes, and that node ranks stay contiguous per rack."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support.cluster import KEEP_RUNNING, RealCluster, wait_until

pytestmark = pytest.mark.cluster

BLOCK = "cloud.ddpctl.io/topology-block"
RACK = "cloud.ddpctl.io/topology-rack"
HOST = "kubernetes.io/hostname"


@pytest.fixture
def tas_queue(kube: RealCluster, namespace: str) -> Iterator[str]:
    """A Topology (block > rack > host), a ResourceFlavor on the kwok nodes that names it, a
    ClusterQueue with room for every GPU, and LocalQueue `tas` in the namespace."""
    name = f"tas-{namespace}"

    def others_gone() -> bool:
        """Pods of earlier tests (their namespaces are deleted without waiting) still fill nodes, and a
        preferred level then honestly spreads: start from nodes that hold only this test's pods. A
        pod that ended (Failed, Succeeded) holds nothing the scheduler counts, even while a finalizer
        keeps its object."""
        bound = kube.get("pods", "-A", "--field-selector", "spec.nodeName!=")["items"]
        ended = ("Failed", "Succeeded")
        return not [
            p for p in bound if p["metadata"]["namespace"] != namespace and p["status"].get("phase") not in ended
        ]

    wait_until("the nodes free of earlier tests' pods", others_gone, 180)
    kube.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": name},
         "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name},
         "spec": {"nodeLabels": {"type": "kwok"}, "topologyName": name}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
             "flavors": [{"name": name, "resources": [
                 {"name": "cpu", "nominalQuota": 1000}, {"name": "memory", "nominalQuota": "10Ti"},
                 {"name": "nvidia.com/gpu", "nominalQuota": 64}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "tas", "namespace": namespace}, "spec": {"clusterQueue": name}},
    ]}))  # fmt: skip
    yield "tas"
    kube.kubectl("delete", "-n", namespace, "localqueue", "tas", "--wait=false", check=False)
    for kind in ("clusterqueue", "resourceflavor", "topology"):
        kube.kubectl("delete", kind, name, "--wait=false", check=False)


def placement(cli, kube: RealCluster, namespace: str, count: int) -> list[tuple[int, dict[str, str]]]:
    """(node rank, labels of the node its pod runs on), in rank order, once `ddpctl status` lists `count`
    running pods, each on a node. Waited for, not read once: pods bound a moment ago can still be replaced
    (Kueue re-placing a workload, a controller recreating a pod), and a placement is only the one that stays."""
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in kube.get("nodes", "-l", "type=kwok")["items"]}

    def settled() -> list[tuple[int, dict[str, str]]] | None:
        summary = json.loads(cli("status", "ddp-train", "-n", namespace, "-o", "json").out)
        rows = summary["pods"]
        if len(rows) != count or any(p["phase"] != "Running" for p in rows):
            return None
        bound = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in kube.pods(namespace)}
        if any(not bound.get(p["pod"]) for p in rows):
            return None
        return sorted((p["node"], nodes[bound[p["pod"]]]) for p in rows)

    return list(wait_until(f"{count} running pods in `ddpctl status` of {namespace}", settled, 90))


@pytest.mark.parametrize("target", ["job", "jobset", "pytorchjob", "trainjob"])
def test_required_rack_puts_every_pod_in_one_rack(cli, kube: RealCluster, namespace, tas_queue, target) -> None:
    # 8 GPUs a pod: each pod fills a node, so two pods in one rack is a real constraint
    r = cli("submit", "-n", namespace, "--target", target, "--nodes", "2", "--gpus", "8", "--queue", tas_queue,
            "--topology", f"required:{RACK}", "--annotation", KEEP_RUNNING)  # fmt: skip
    assert r.code == 0, r.err
    placed = placement(cli, kube, namespace, 2)
    assert [rank for rank, _ in placed] == [0, 1]
    assert len({labels[RACK] for _, labels in placed}) == 1, placed
    assert len({labels[HOST] for _, labels in placed}) == 2, placed  # one pod a node: the rack was needed
    (workload,) = kube.get("workloads", "-n", namespace)["items"]
    assignments = workload["status"]["admission"]["podSetAssignments"]
    assert all(a.get("topologyAssignment") for a in assignments), assignments  # Kueue placed it, not chance


@pytest.mark.parametrize("target", ["job", "jobset"])
def test_preferred_block_keeps_four_nodes_in_one_block_ranks_contiguous_per_rack(
    cli, kube: RealCluster, namespace, tas_queue, target
) -> None:
    r = cli("submit", "-n", namespace, "--target", target, "--nodes", "4", "--gpus", "8", "--queue", tas_queue,
            "--topology", f"preferred:{BLOCK}", "--annotation", KEEP_RUNNING)  # fmt: skip
    assert r.code == 0, r.err
    placed = placement(cli, kube, namespace, 4)
    assert [rank for rank, _ in placed] == [0, 1, 2, 3]
    assert len({labels[BLOCK] for _, labels in placed}) == 1, placed
    racks = [labels[RACK] for _, labels in placed]
    assert racks[0] == racks[1] != racks[2] == racks[3], placed  # consecutive ranks share a rack


def test_slices_of_two_each_fill_one_rack(cli, kube: RealCluster, namespace, tas_queue) -> None:
    r = cli("submit", "-n", namespace, "--target", "jobset", "--nodes", "4", "--gpus", "8", "--queue", tas_queue,
            "--topology-slice", f"{RACK}:2", "--annotation", KEEP_RUNNING)  # fmt: skip
    assert r.code == 0, r.err
    racks = [labels[RACK] for _, labels in placement(cli, kube, namespace, 4)]
    assert racks[0] == racks[1] and racks[2] == racks[3] and racks[0] != racks[2], racks
