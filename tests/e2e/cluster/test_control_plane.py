"""The test cluster is a real Kubernetes: its version, its OpenAPI, server-side apply of our YAML."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import REPO
from tests.support.cluster import RealCluster, wait_until

pytestmark = pytest.mark.cluster


def pinned(key: str) -> str:
    for line in (REPO / "testcluster/versions.env").read_text().splitlines():
        if line.startswith(key + "="):
            return line.split("=", 1)[1]
    raise AssertionError(key)


def test_the_server_is_the_pinned_kubernetes(real_cluster: RealCluster) -> None:
    version = json.loads(real_cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == pinned("KUBERNETES_VERSION")


def test_openapi_v3_is_served(real_cluster: RealCluster) -> None:
    paths = json.loads(real_cluster.kubectl("get", "--raw", "/openapi/v3").stdout)["paths"]
    for group in ("apis/batch/v1", "apis/jobset.x-k8s.io/v1alpha2", "apis/kubeflow.org/v1",
                  "apis/trainer.kubeflow.org/v1alpha1", "apis/kueue.x-k8s.io/v1beta2"):  # fmt: skip
        assert group in paths, group


@pytest.mark.parametrize("target", ["job", "jobset", "pytorchjob", "trainjob"])
def test_rendered_yaml_applies_server_side_with_validation(real_cluster: RealCluster, namespace: str, target) -> None:
    rendered = subprocess.run(
        [sys.executable, "-m", "ddpctl", "render", "-t", target, "--nodes", "2", "--gpus", "4", "-n", namespace],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    r = real_cluster.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", input=rendered)
    assert "serverside-applied" in r.stdout
    assert "Warning" not in r.stderr, r.stderr  # strict field validation found no unknown or duplicate field


def test_every_simulated_node_renews_its_lease(real_cluster: RealCluster) -> None:
    """A node whose Lease is not renewed is marked NotReady after the node controller's grace period,
    and Kueue then moves the workloads placed on it: pods that tests just saw bound vanish."""

    def renewals() -> dict[str, str]:
        leases = json.loads(real_cluster.kubectl("get", "leases", "-n", "kube-node-lease", "-o", "json").stdout)
        return {item["metadata"]["name"]: item["spec"].get("renewTime", "") for item in leases["items"]}

    nodes = json.loads(real_cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "json").stdout)["items"]
    names = {n["metadata"]["name"] for n in nodes}
    first = renewals()
    assert names and names <= set(first), sorted(names - set(first))
    # kwok renews every lease_duration / 4 (10 s for 40 s): each is renewed again within the grace period
    wait_until("every kwok node's Lease renewed", lambda: all(renewals()[n] > first[n] for n in names), timeout=60)
