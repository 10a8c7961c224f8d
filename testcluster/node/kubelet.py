"""The real node's Kubernetes side: the kubelet (the control plane's build) and CoreDNS, the
cluster DNS its pods use, both on the bridge address."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from testcluster.kube import Cluster
from testcluster.node.layout import CGROUP_ROOT, DIR, GATEWAY, LABEL, NAME
from testcluster.pki import issue
from testcluster.procs import start, wait_for
from testcluster.settings import PORTS, STATE

# ------------------------------------------------------------------------------------------ CoreDNS


def corefile(kubeconfig: Path) -> str:
    """As kubeadm's Corefile: names and reverse lookups of Services and pods (c10d asks for the
    peer's name); nothing is forwarded, since nothing outside can be reached here."""
    return f"""cluster.local:53 in-addr.arpa:53 {{
    bind {GATEWAY}
    errors
    kubernetes cluster.local in-addr.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
    }}
}}
.:53 {{
    bind {GATEWAY}
    errors
}}
"""


def coredns(bin_: Path, c: Cluster) -> None:
    path = DIR / "Corefile"
    path.write_text(corefile(c.kubeconfig))
    start("coredns", [str(bin_ / "coredns"), "-conf", str(path)], cwd=DIR)

    def answers() -> bool:
        with socket.create_connection((GATEWAY, 53), timeout=1):
            return True

    wait_for("CoreDNS on the bridge", answers, 30, "coredns")


# ------------------------------------------------------------------------------------------ kubelet


def kubelet_cert() -> tuple[Path, Path]:
    """The kubelet's serving certificate, signed by the cluster CA for the node's IP: the API server
    verifies it (--kubelet-certificate-authority) when it asks the kubelet for logs."""
    pki = DIR / "pki"
    if (pki / "kubelet.crt").exists():
        return pki / "kubelet.crt", pki / "kubelet.key"
    pki.mkdir(parents=True, exist_ok=True)
    return issue(pki, "kubelet", STATE / "pki/ca", f"/CN={NAME}", f"IP:{GATEWAY},DNS:{NAME}")


def kubelet_config(node: Path, cert: tuple[Path, Path], client_ca: Path) -> dict[str, Any]:
    """The KubeletConfiguration, for this sandbox (cgroup v1, no lowering of OOM scores, a shared
    disk) with its files under `node`, serving with `cert` (crt, key)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # this sandbox has cgroup v1 only
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "oomScoreAdj": 0,  # the sandbox may not lower scores
        "address": GATEWAY,
        "port": PORTS["kubelet"],
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": PORTS["kubelet-healthz"],
        "readOnlyPort": 0,
        "clusterDNS": [GATEWAY],
        "clusterDomain": "cluster.local",
        "tlsCertFile": str(cert[0]),
        "tlsPrivateKeyFile": str(cert[1]),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(client_ca)}},
        "authorization": {"mode": "Webhook"},
        "failSwapOn": False,
        # a shared dev disk: evict only when it is really full, and never collect images we loaded
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "registerWithTaints": [{"key": LABEL, "value": "true", "effect": "NoSchedule"}],
        "containerRuntimeEndpoint": f"unix://{node / 'containerd' / 'containerd.sock'}",
        "resolvConf": str(node / "resolv.conf"),  # pods with dnsPolicy Default; ClusterFirst pods get CoreDNS
        "podLogsDir": str(node / "pod-logs"),
        "staticPodPath": "",
    }  # fmt: skip


def node_ready(c: Cluster) -> bool:
    ready = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
    return c.kubectl("get", "node", NAME, "-o", ready, check=False).strip() == "True"


def kubelet(c: Cluster) -> None:
    import yaml  # here, not above: `down` and `status` import this package without the venv

    (DIR / "resolv.conf").write_text(f"nameserver {GATEWAY}\n")
    cfg = DIR / "kubelet.yaml"
    cfg.write_text(yaml.safe_dump(kubelet_config(DIR, kubelet_cert(), STATE / "pki/ca.crt"), sort_keys=False))
    start("kubelet", [
        c.exe("kubelet"), f"--config={cfg}", f"--kubeconfig={c.kubeconfig}", f"--root-dir={DIR / 'kubelet'}",
        f"--cert-dir={DIR / 'kubelet' / 'pki'}", f"--hostname-override={NAME}", f"--node-ip={GATEWAY}",
        f"--node-labels={LABEL}=true", "--v=1",
    ])  # fmt: skip
    wait_for(f"node {NAME} Ready", lambda: node_ready(c), 90, "kubelet")
