"""Where the test cluster lives and what it is made of: its folders, pinned versions and ports.

Read once from the environment: $DDPCTL_CLUSTER_DIR (state, default .cluster/ in the clone),
$DDPCTL_CLUSTER_PORT_BASE (first port, default 24400: below the kernel's ephemeral range, 32768 and up,
where a passing outbound connection could hold one of them) and $GOMODCACHE (where the build left the
modules whose manifests are applied). Stdlib only: `down` and `status` run without the venv.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STATE = Path(os.environ.get("DDPCTL_CLUSTER_DIR") or REPO / ".cluster")
BASE = int(os.environ.get("DDPCTL_CLUSTER_PORT_BASE", "24400"))
GOMOD = Path(os.environ.get("GOMODCACHE") or Path.home() / "go/pkg/mod")

# The pod sandbox image of the real node, imported there by the node itself (no registry exists).
# The training operator's init container runs it too: the one image every node has.
PAUSE_IMAGE = "localhost/ddpctl-pause:1"


def parse_env(text: str) -> dict[str, str]:
    """KEY=VALUE lines, as both make and bash read versions.env; comments and blank lines skipped."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def ports(base: int) -> dict[str, int]:
    """Every port the cluster binds on loopback, from `base` up. `up` refuses to start when one
    of them answers already (another program, or another cluster on the same base)."""
    out = {
        "etcd": base,
        "etcd-peer": base + 1,
        "apiserver": base + 2,
        "controller-manager": base + 3,
        "scheduler": base + 4,
        "kwok": base + 5,
        # the kubelet port of every kwok node, on loopback: reserved and never bound, so the API
        # server's log and exec requests are refused at once, whatever answers elsewhere
        "kwok-kubelet": base + 6,
        "kubelet": base + 50,
        "kubelet-healthz": base + 51,
    }
    # each manager serves its webhooks on its port and its health probes on the next one
    for name, offset in (("jobset", 10), ("kueue", 20), ("trainer", 30), ("training-operator", 40)):
        out[name] = base + offset
        out[f"{name}-health"] = base + offset + 1
    out["trainer-status"] = base + 32
    return out


V = parse_env((HERE / "versions.env").read_text())
PORTS = ports(BASE)
