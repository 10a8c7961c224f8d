"""Start the real node (idempotent) and take it down with everything it made."""

from __future__ import annotations

import os
from pathlib import Path

from testcluster import binaries
from testcluster.kube import Cluster
from testcluster.node.containerd import containerd, ctr
from testcluster.node.host import (
    cni_config,
    kill_pods,
    kill_shims,
    make_cgroup_root,
    network_down,
    network_up,
    unmount_all,
)
from testcluster.node.kubelet import coredns, kubelet
from testcluster.node.layout import DIR, SOCK, missing
from testcluster.procs import fail, log, running, stop


def up(c: Cluster) -> None:
    """Start the real node, or say why not: without root (or its tools) the cluster runs without
    it and its tests skip; under CI=true that is an error."""
    lacking = missing()
    if lacking:
        msg = "the real node needs " + ", ".join(lacking)
        if os.environ.get("CI") == "true":
            fail(msg)
        log(f"note: {msg}; starting without it (its tests skip)")
        return
    bin_ = binaries.real_node()
    DIR.mkdir(parents=True, exist_ok=True)
    (DIR / "bin").write_text(str(bin_))  # for `down`, which builds nothing
    for d in ("containerd", "pod-logs", "kubelet"):
        (DIR / d).mkdir(parents=True, exist_ok=True)
    network_up()
    make_cgroup_root()
    cni_config()
    c.timed("containerd", lambda: containerd(bin_))
    c.timed("coredns", lambda: coredns(bin_, c))
    c.timed("kubelet", lambda: kubelet(c))


def down() -> None:
    """Stop the node's processes and containers, unmount, remove the bridge, the rule, the cgroups."""
    stop("kubelet")
    if running("containerd") and SOCK.exists():
        bin_ = Path((DIR / "bin").read_text()) if (DIR / "bin").exists() else None
        if bin_:
            for task in ctr(bin_, "tasks", "ls", "-q", check=False).split():
                ctr(bin_, "tasks", "kill", "-s", "SIGKILL", task, check=False)
    kill_pods()
    for name in ("coredns", "containerd"):
        stop(name)
    kill_shims()
    unmount_all(DIR)
    if os.geteuid() == 0:
        network_down()
