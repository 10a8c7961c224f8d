"""The layout's parts a Plan is made of: each node (pod) in rank order, and each node group's
workload, pods, command and env."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ddpctl.spec.model import NodeGroup, Topology


@dataclass(frozen=True)
class Node:
    """One node (pod) of the job in rank order: its group, index in the group, processes and ranks."""

    rank: int  # node rank: 0 is the first group's first node
    group: NodeGroup
    group_index: int  # which group, in spec order
    index: int  # the completion index within its group
    first_rank: int  # global rank of its local rank 0 (ranks are contiguous per node)

    @property
    def nproc(self) -> int:
        return self.group.nproc

    @property
    def ranks(self) -> range:
        return range(self.first_rank, self.first_rank + self.nproc)


# What torch.distributed's env:// initialisation reads: a process torchrun did not start needs them.
PLAIN_DDP_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


@dataclass(frozen=True)
class GroupPlan:
    """One node group's workload and pods: its object's name, pods, command and container env."""

    group: NodeGroup
    index: int  # in spec order
    first_node: int  # the node rank of its first pod
    pods: int  # the pods its workload asks for (the elastic maximum when elastic)
    workload_name: str  # the object that runs its pods
    replicated_job: str | None  # its JobSet replicatedJob (JobSet-based engines)
    command: tuple[str, ...]  # the training container's command
    env: Mapping[str, str]  # the training container's literal env: wiring first, then the user's
    topology: Topology  # Kueue's topology request for its pods
    labels: Mapping[str, str]  # on its pods (and its workload object's template)
    pod_annotations: Mapping[str, str]  # on its pod template: the spec's and Kueue's topology request

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def nproc(self) -> int:
        return self.group.nproc
