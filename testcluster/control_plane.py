"""The Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

All on loopback with the admin kubeconfig, no leader election; each waits until it answers."""

from __future__ import annotations

import json
import urllib.request

from testcluster.kube import Cluster
from testcluster.procs import https_answers, start, wait_for
from testcluster.settings import PORTS, STATE


def etcd(c: Cluster) -> None:
    start("etcd", [
        c.exe("etcd"), "--name", "ddpctl", "--data-dir", str(STATE / "etcd"),
        "--listen-client-urls", f"http://127.0.0.1:{PORTS['etcd']}",
        "--advertise-client-urls", f"http://127.0.0.1:{PORTS['etcd']}",
        "--listen-peer-urls", f"http://127.0.0.1:{PORTS['etcd-peer']}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{PORTS['etcd-peer']}",
        "--initial-cluster", f"ddpctl=http://127.0.0.1:{PORTS['etcd-peer']}",
        "--unsafe-no-fsync", "--quota-backend-bytes", str(4 << 30), "--log-level", "warn",
    ])  # fmt: skip

    def healthy() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORTS['etcd']}/health", timeout=2) as r:
            return bool(json.loads(r.read()).get("health") == "true")

    wait_for("etcd /health", healthy, 30, "etcd")


def apiserver(c: Cluster) -> None:
    pki = STATE / "pki"
    start("kube-apiserver", [
        c.exe("kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{PORTS['etcd']}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={PORTS['apiserver']}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}", f"--requestheader-client-ca-file={pki / 'ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client", "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'kubelet-client.key'}", f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=Node,RBAC",
        "--allow-privileged=true", "--endpoint-reconciler-type=none", "--profiling=false",
        "--enable-priority-and-fairness=false", "--v=1",
    ])  # fmt: skip
    wait_for("kube-apiserver /readyz", lambda: https_answers(PORTS["apiserver"], "/readyz"), 60, "kube-apiserver")


def kube_component(c: Cluster, name: str, port: int, flags: list[str]) -> None:
    """kube-controller-manager or kube-scheduler: the admin kubeconfig, loopback, no leader election."""
    start(name, [
        c.exe(name), f"--kubeconfig={c.kubeconfig}",
        f"--authentication-kubeconfig={c.kubeconfig}", f"--authorization-kubeconfig={c.kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={port}", "--leader-elect=false", "--v=1", *flags,
    ])  # fmt: skip
    wait_for(f"{name} /healthz", lambda: https_answers(port, "/healthz", verify=False), 60, name)


def controller_manager(c: Cluster) -> None:
    pki = STATE / "pki"
    kube_component(c, "kube-controller-manager", PORTS["controller-manager"], [
        f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
        "--use-service-account-credentials=false", "--controllers=*,-nodeipam,-cloud-node-lifecycle",
        "--concurrent-job-syncs=10", "--node-monitor-grace-period=60s",
    ])  # fmt: skip


def scheduler(c: Cluster) -> None:
    kube_component(c, "kube-scheduler", PORTS["scheduler"], [])


def default_namespace_ready(c: Cluster) -> bool:
    """The service-account controller made the default ServiceAccount: pods can now be created."""
    return "default" in c.kubectl("get", "serviceaccount", "default", "-n", "default", "-o", "name", check=False)


def up(c: Cluster) -> None:
    """Start each component in order (idempotent: a running one is left alone)."""
    c.timed("etcd", lambda: etcd(c))
    c.timed("kube-apiserver", lambda: apiserver(c))
    c.timed("kube-controller-manager", lambda: controller_manager(c))
    c.timed("kube-scheduler", lambda: scheduler(c))
    c.timed("default namespace", lambda: wait_for("the default ServiceAccount", lambda: default_namespace_ready(c), 60))
