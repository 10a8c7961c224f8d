"""testcluster.node.kubelet, the parts that need no kubelet: its configuration for this sandbox and
CoreDNS's Corefile, both on the bridge address, agreeing with containerd's and the host's."""

from __future__ import annotations

from pathlib import Path

from testcluster.node.kubelet import corefile, kubelet_config
from testcluster.node.layout import CGROUP_ROOT, DIR, GATEWAY, LABEL, SOCK
from testcluster.settings import PORTS

CERT = (Path("/pki/kubelet.crt"), Path("/pki/kubelet.key"))


def test_the_kubelet_runs_on_containerds_socket_under_our_cgroup_root() -> None:
    cfg = kubelet_config(DIR, CERT, Path("/pki/ca.crt"))
    assert cfg["containerRuntimeEndpoint"] == f"unix://{SOCK}"
    assert cfg["cgroupRoot"] == f"/{CGROUP_ROOT}"
    assert (cfg["cgroupDriver"], cfg["failCgroupV1"], cfg["oomScoreAdj"]) == ("cgroupfs", False, 0)


def test_the_kubelet_serves_on_the_bridge_with_its_certificate_and_trusts_our_ca() -> None:
    cfg = kubelet_config(DIR, CERT, Path("/pki/ca.crt"))
    assert (cfg["address"], cfg["port"]) == (GATEWAY, PORTS["kubelet"])
    assert (cfg["healthzBindAddress"], cfg["healthzPort"]) == ("127.0.0.1", PORTS["kubelet-healthz"])
    assert cfg["readOnlyPort"] == 0
    assert (cfg["tlsCertFile"], cfg["tlsPrivateKeyFile"]) == tuple(map(str, CERT))
    assert cfg["authentication"]["anonymous"] == {"enabled": False}
    assert cfg["authentication"]["x509"] == {"clientCAFile": "/pki/ca.crt"}


def test_only_pods_that_ask_land_on_the_node_and_what_they_load_stays() -> None:
    cfg = kubelet_config(DIR, CERT, Path("/pki/ca.crt"))
    assert cfg["registerWithTaints"] == [{"key": LABEL, "value": "true", "effect": "NoSchedule"}]
    assert (
        cfg["imageGCHighThresholdPercent"] == 100
    )  # images loaded by `python -m testcluster load` are never collected


def test_pods_resolve_names_with_coredns_on_the_bridge() -> None:
    cfg = kubelet_config(DIR, CERT, Path("/pki/ca.crt"))
    assert cfg["clusterDNS"] == [GATEWAY]
    assert cfg["clusterDomain"] == "cluster.local"
    text = corefile(Path("/state/kubeconfig"))
    assert text.count(f"bind {GATEWAY}") == 2
    assert "kubernetes cluster.local in-addr.arpa {" in text
    assert "kubeconfig /state/kubeconfig" in text
    assert "forward" not in text  # nothing outside can be reached here
