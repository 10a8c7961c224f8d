"""The Plan: a Layout (what the spec alone derives) and what its engine derives, in one frozen record.

`engine.plan(spec)` (ddpctl.engines) checks that the engine can run the spec and fills in what
depends on the target -- the pods' hostnames and DNS names, where rank 0 listens, each group's
workload name, command and env, the env the engine's controller injects into each pod, the
failure rules -- once. A Plan holds no reference to its engine: render, explain, the runners and
the cluster commands read values, never ask the target.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from ddpctl.errors import SpecError
from ddpctl.plan.layout import PLAIN_DDP_ENV, GroupPlan, Layout, Node
from ddpctl.records import record
from ddpctl.spec.model import NodeGroup
from ddpctl.spec.names import MAX_DNS_LABEL


class RetryRule(NamedTuple):
    """Which exit codes of a node its target retries: only `only` when given, else every failure
    but `but` (exit 0 never)."""

    only: frozenset[int] | None = None
    but: tuple[int, ...] = ()

    def retries(self, code: int) -> bool:
        if code == 0:
            return False
        return code in self.only if self.only is not None else code not in self.but


NEVER = RetryRule(only=frozenset())


@record(eq=False)
class Plan(Layout):
    """A Layout and its engine's facts (see the module docstring)."""

    target: str
    rank0_host: str  # the DNS name the engine gives rank 0's pod: MASTER_ADDR / rendezvous host
    master_port: int
    node_rank_from_index: bool  # we (not an operator) give PET_NODE_RANK from the completion index
    node_rank_source: str  # where each pod learns its node rank, for `render --explain`
    pod_hostnames: tuple[str, ...]  # every pod's hostname (without the subdomain), rank order
    dns_names: tuple[tuple[str, ...], ...]  # per node: the names other pods reach it by, the wired one last
    longest_generated_name: str  # the longest hostname/Service name the engine derives
    groups: tuple[GroupPlan, ...]  # each node group's workload and pods, spec order
    injected_env: tuple[Mapping[str, str], ...]  # per node: what the engine's controller adds to its env
    pod_restart_policy: str
    coordinator: str | None  # pod recovery: HOST:PORT of the store the pods meet in; None: gang
    coordinator_name: str | None  # pod recovery: the coordinator's workload name
    failure_handling: str  # what the rendered objects do when a pod fails or is preempted, in words
    restart_limit: int  # how many times the target restarts the whole group after a node fails
    retry: RetryRule  # which exit codes the target retries

    @property
    def rdzv_endpoint(self) -> str:
        return f"{self.rank0_host}:{self.master_port}"

    def check_names(self) -> None:
        """Every name the engine derives from the job's name fits a DNS label."""
        longest, name = self.longest_generated_name, self.spec.name
        if len(longest) > MAX_DNS_LABEL:
            raise SpecError(
                "name",
                f"{name!r} makes the {self.spec.target} name {longest!r} ({len(longest)} characters, the limit is "
                f"{MAX_DNS_LABEL})",
                f"shorten name to at most {MAX_DNS_LABEL - (len(longest) - len(name))} characters",
            )

    def group_of(self, group: NodeGroup) -> GroupPlan:
        return self.groups[self.spec.groups.index(group)]

    def node_env(self, node: Node) -> dict[str, str]:
        """The env of `node`'s training container as the pod gets it: what ddpctl renders, then what
        the engine's controller injects (the later wins, as in the pod)."""
        env = dict(self.groups[node.group_index].env)
        env.update(self.injected_env[node.rank])
        env.update(self.spec.env)  # the user's values win, as in the rendered container
        return env

    def retriable(self, code: int) -> bool:
        """Whether the target retries a node that ended with `code`."""
        return self.retry.retries(code)

    @property
    def plain_command_warning(self) -> str | None:
        """Why a --command that runs one plain process per pod cannot join the group as wired:
        the variables `init_process_group()` reads (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) are
        missing from its pods (only torchrun's PET_* are there), or WORLD_SIZE counts processes the
        command does not start. None with torchrun, a module or a script."""
        spec = self.spec
        if not spec.command or self.command_starts_torchrun:
            return None
        shown = " ".join(spec.command)
        env = self.node_env(self.nodes[0])
        missing = [k for k in PLAIN_DDP_ENV if k not in env]
        if missing:
            return (
                f"command `{shown}` runs once per pod, and its pods get torchrun's PET_* variables, not "
                f"{', '.join(missing)}: a plain init_process_group() cannot join; start it with torchrun "
                f"(--command torchrun {' '.join(spec.command[1:]) or shown}) or give the file with --script"
            )
        if env["WORLD_SIZE"] != str(self.replicas):
            return (
                f"command `{shown}` runs once per pod ({self.replicas} processes), but the pods get "
                f"WORLD_SIZE={env['WORLD_SIZE']} ({self.nproc_per_node} per node): the group would wait for "
                "processes that never start; use --procs 1, or start the processes with torchrun"
            )
        return None
