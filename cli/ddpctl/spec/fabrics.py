"""What each network fabric a job may ask for (`fabric:`) needs in its pods: the device its
transport uses, counted by a device plugin's extended resource (a default name, as plugins name
them differently: resources.fabricResource changes it), the environment NCCL and libfabric read,
and the capabilities the transport needs (RDMA registers pinned memory: IPC_LOCK, which only Pod
Security "privileged" allows; rules.fabric refuses it under the other profiles).

`socket` is NCCL's (and gloo's) TCP transport: nothing is added, the pods are today's.

NCCL's transport is not pinned (no NCCL_NET): a pod without a working RDMA device falls back to
sockets, and the preflight (ddpctl_trainer.preflight.nccl) names that rank with NCCL's own line,
where a pinned transport would fail NCCL's initialisation with an error about the plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

IPC_LOCK = "IPC_LOCK"
# The namespace label a Pod Security profile is enforced by (Pod Security Admission).
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"


class Fabric(NamedTuple):
    """One fabric's needs. (A NamedTuple, not a frozen dataclass: see engines/base.py's WorkloadKind.)"""

    name: str
    title: str  # for `render --explain`
    resource: str | None  # the device plugin's extended resource, by default
    env: Mapping[str, str]  # for NCCL and libfabric; the user's env wins
    capabilities: tuple[str, ...]  # added to the training container's


PROFILES: dict[str, Fabric] = {
    "socket": Fabric("socket", "TCP sockets (NCCL's Socket transport, gloo)", None, {}, ()),
    # The Mellanox/NVIDIA RDMA shared device plugin's default resource (k8s-rdma-shared-dev-plugin,
    # the NVIDIA Network Operator); SR-IOV setups name theirs (e.g. nvidia.com/hostdev).
    "infiniband": Fabric(
        "infiniband",
        "InfiniBand (NCCL's IB verbs transport)",
        "rdma/rdma_shared_device_a",
        {"NCCL_IB_DISABLE": "0"},
        (IPC_LOCK,),
    ),
    # RoCE v2 is NCCL's IB transport over Ethernet; GID index 3 is RoCE v2 over IPv4 on most NICs.
    "roce": Fabric(
        "roce",
        "RoCE (NCCL's IB verbs transport over Ethernet)",
        "rdma/rdma_shared_device_a",
        {"NCCL_IB_DISABLE": "0", "NCCL_IB_GID_INDEX": "3"},
        (IPC_LOCK,),
    ),
    # AWS EFA: its device plugin's resource, and libfabric's EFA provider for the aws-ofi-nccl plugin.
    "efa": Fabric(
        "efa",
        "AWS EFA (libfabric's efa provider through the aws-ofi-nccl plugin)",
        "vpc.amazonaws.com/efa",
        {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"},
        (IPC_LOCK,),
    ),
}
