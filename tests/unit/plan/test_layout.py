"""ddpctl.plan.layout: what a spec derives on any engine, asked of no engine: the node table in
rank order, world size, backend and rendezvous, and each group's container env around the
engine's wiring; table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from ddpctl.plan import Layout
from ddpctl.spec.model import JobSpec


def laid_out(data: dict[str, Any]) -> Layout:
    return Layout(JobSpec.from_dict(data))


VALID = [
    ({}, 2, 2, 4),
    ({"nodes": 1, "gpusPerNode": 8}, 1, 8, 8),
    ({"nodes": 4, "gpusPerNode": 4, "procsPerNode": 2}, 4, 2, 8),
    ({"nodes": 3, "procsPerNode": 5}, 3, 5, 15),
    ({"nodes": "1:4", "gpusPerNode": 2}, 4, 2, 8),
    ({"nodes": 64, "gpusPerNode": 8, "target": "pytorchjob"}, 64, 8, 512),
]


@pytest.mark.parametrize("data,replicas,nproc,world", VALID)
def test_layout_is_derived(data: dict, replicas: int, nproc: int, world: int) -> None:
    plan = laid_out(data)
    assert (plan.replicas, plan.nproc_per_node, plan.world_size) == (replicas, nproc, world)


@pytest.mark.parametrize(
    "data,backend,mode",
    [
        ({}, "gloo", "static"),
        ({"gpusPerNode": 1}, "nccl", "static"),
        ({"nodes": "1:2"}, "gloo", "c10d"),
        ({"gpusPerNode": 1, "backend": "gloo"}, "gloo", "static"),
    ],
)
def test_backend_and_rendezvous_auto(data: dict, backend: str, mode: str) -> None:
    plan = laid_out(data)
    assert (plan.backend, plan.rdzv_mode) == (backend, mode)


UNEVEN = [
    {"name": "a", "nodes": 2, "gpusPerNode": 0, "procsPerNode": 3},
    {"name": "b", "nodes": 3, "gpusPerNode": 0, "procsPerNode": 1},
]


def test_nodes_are_in_rank_order_with_contiguous_global_ranks() -> None:
    layout = laid_out({"nodeGroups": UNEVEN})
    nodes = layout.nodes
    assert [(n.rank, n.group.name, n.index, n.first_rank) for n in nodes] == [
        (0, "a", 0, 0), (1, "a", 1, 3), (2, "b", 0, 6), (3, "b", 1, 7), (4, "b", 2, 8),
    ]  # fmt: skip
    assert [r for n in nodes for r in n.ranks] == list(range(layout.world_size))
    assert layout.first_node == nodes[0]
    assert layout.edge_nodes() == [nodes[0], nodes[1], nodes[2], nodes[4]]  # each group's first and last
    assert [layout.group_offset(g) for g in layout.spec.groups] == [0, 2]


def test_the_container_env_puts_the_wiring_first_and_the_users_last() -> None:
    layout = laid_out({"env": {"PET_NNODES": "7", "MINE": "1"}})
    group = layout.spec.groups[0]
    env = layout.container_env(group, {"PET_NNODES": "2", "PET_MASTER_PORT": "29500"})
    assert (env["PET_NNODES"], env["PET_MASTER_PORT"], env["MINE"]) == ("7", "29500", "1")  # the user wins
    assert "PET_MASTER_PORT" not in layout.container_env(group, {})
    assert list(env) == sorted(env)


def test_a_group_plan_holds_what_the_engine_named_and_the_groups_labels() -> None:
    layout = laid_out({"name": "w", "nodeGroups": UNEVEN})
    second = layout.spec.groups[1]
    plan = layout.group_plan(second, workload_name="w-b", replicated_job=None, command=("run",), wiring={"X": "1"})
    assert (plan.index, plan.first_node, plan.pods, plan.workload_name, plan.command) == (1, 2, 3, "w-b", ("run",))
    assert plan.labels["ddpctl.io/node-group"] == "b"
    assert plan.env["X"] == "1"
