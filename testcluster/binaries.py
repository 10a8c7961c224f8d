"""The folders of built binaries: the build scripts print them (building once, cached by a key
outside the clone; see the scripts for what the keys hash)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from testcluster.procs import fail
from testcluster.settings import HERE


def _build(script: Path, what: str) -> Path:
    r = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, text=True, check=False)
    if r.returncode:
        fail(f"building {what} failed (see above)")
    return Path(r.stdout.strip().splitlines()[-1])


def control_plane() -> Path:
    """etcd, the Kubernetes binaries (kubelet and kubectl too), kwok and the engines' managers."""
    if os.environ.get("DDPCTL_CLUSTER_BIN"):  # a folder of binaries built elsewhere (development)
        return Path(os.environ["DDPCTL_CLUSTER_BIN"])
    return _build(HERE / "scripts/build.sh", "the cluster's binaries")


def real_node() -> Path:
    """containerd (its shim, ctr), CoreDNS and the pause program."""
    return _build(HERE / "node/build.sh", "the real node's binaries")
