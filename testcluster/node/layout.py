"""The real node's names, addresses and paths, and what this machine must have to run it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from testcluster.settings import STATE

NAME = "ddpctl-real-node"
LABEL = "node.ddpctl.io/real"
BRIDGE = "ddpctl0"
GATEWAY = "10.88.0.1"  # the bridge's address: the node's InternalIP, the kubelet's and CoreDNS's
SUBNET = "10.88.0.0/16"
NAMESPACE = "k8s.io"  # containerd's namespace for CRI (kubelet) images and containers
RUNC = "/usr/sbin/runc"
CNI_BIN = Path("/usr/lib/cni")
CGROUPS = Path("/sys/fs/cgroup")
CGROUP_ROOT = "ddpctl-node"  # the kubelet's cgroupRoot: its pods go to <hierarchy>/ddpctl-node/kubepods
COMPONENTS = ["kubelet", "coredns", "containerd"]  # stop order
# Docker sets the FORWARD policy to DROP; pods on our bridge talk to each other through this rule.
FORWARD_RULE = ["FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT", "-m", "comment", "--comment", "ddpctl-node"]

DIR = STATE / "node"
SOCK = DIR / "containerd" / "containerd.sock"


def missing() -> list[str]:
    """What this machine lacks for the real node (empty: it can start), each with its fix."""
    out = []
    if os.geteuid() != 0:
        out.append("root (a bridge, iptables, mounts and cgroups)")
    for tool, package in (("ip", "iproute2"), ("iptables", "iptables")):
        if not shutil.which(tool):
            out.append(f"{tool} (apt-get install {package})")
    if not Path(RUNC).exists():
        out.append(f"{RUNC} (apt-get install runc)")
    if not (CNI_BIN / "bridge").exists():
        out.append(f"{CNI_BIN}/bridge (apt-get install containernetworking-plugins)")
    return out
