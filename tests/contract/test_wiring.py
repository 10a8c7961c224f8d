"""The rendered layout wires up: world size = nodes x processes, node ranks 0..N-1 with one rank 0,
and the master address is the DNS name the engine really gives rank 0's pod (see tests/support/engines.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddpctl.engines import plan_for
from ddpctl.errors import SpecError
from ddpctl.manifests.render import render
from ddpctl.spec.model import JobSpec
from ddpctl.spec.schema import TARGETS
from tests.support.engines import launch, torchrun_settings

# The container port each engine's rank-0 pod declares, by name. TrainJob declares none of its own:
# the torch-distributed runtime's template does, and its port is always 29500 (JobSpec.master_port).
DECLARED_PORTS = {
    "job": lambda port: {"rendezvous": port},
    "jobset": lambda port: {"rendezvous": port},
    "pytorchjob": lambda port: {"pytorchjob-port": port},
    "trainjob": lambda port: {},
}
STATIC_LAYOUTS = [(1, 0, None), (2, 0, 2), (2, 4, None), (3, 8, None), (8, 1, None), (64, 8, None), (5, 0, 3)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("nodes,gpus,procs", STATIC_LAYOUTS)
def test_static_layout_wiring(target: str, nodes: int, gpus: int, procs: int | None) -> None:
    spec = JobSpec(target=target, nodes=nodes, gpus_per_node=gpus, procs_per_node=procs, name="wire")
    expected_nproc = procs or gpus or 2
    pods = launch(render(spec))
    runs = [torchrun_settings(p) for p in pods]

    assert len(pods) == nodes
    assert {r.nnodes for r in runs} == {str(nodes)}
    assert {r.nproc_per_node for r in runs} == {expected_nproc}
    world = nodes * expected_nproc
    assert all(int(r.nnodes) * r.nproc_per_node == world for r in runs)
    ranks = sorted(r.node_rank for r in runs)  # type: ignore[type-var]
    assert ranks == list(range(nodes)), "node ranks must be 0..N-1, each once"
    (rank0,) = [p for p, r in zip(pods, runs) if r.node_rank == 0]
    assert {r.master_addr for r in runs} == {rank0.dns_name}, "MASTER_ADDR must resolve to rank 0's pod"
    (port,) = {r.master_port for r in runs}
    assert port == plan_for(spec).master_port
    assert rank0.ports == DECLARED_PORTS[target](port), "rank 0 must declare the port the others connect to"
    assert {r.rdzv_backend for r in runs} == {"static"}
    if gpus:
        assert all(p.env["DDP_TRAINER_BACKEND"] == "nccl" for p in pods)
    else:
        assert all(p.env["DDP_TRAINER_BACKEND"] == "gloo" for p in pods)


@pytest.mark.parametrize("target", ["job", "jobset", "pytorchjob"])
@pytest.mark.parametrize("low,high", [(1, 2), (2, 8), (1, 64)])
def test_elastic_layout_wiring(target: str, low: int, high: int) -> None:
    spec = JobSpec.from_dict({"target": target, "nodes": f"{low}:{high}", "gpusPerNode": 4, "name": "elastic"})
    pods = launch(render(spec))
    runs = [torchrun_settings(p) for p in pods]
    assert len(pods) == high, "the elastic maximum of pods is created"
    assert {r.nnodes for r in runs} == {f"{low}:{high}"}
    assert {r.rdzv_backend for r in runs} == {"c10d"}
    (endpoint,) = {r.rdzv_endpoint for r in runs}
    host, _, port = endpoint.rpartition(":")
    assert host == pods[0].dns_name, "the c10d store lives on a pod that exists in every layout"
    assert int(port) in pods[0].ports.values()
    assert all(r.node_rank is None for r in runs), "elastic ranks come from the rendezvous"


def test_trainjob_refuses_elastic_layouts() -> None:
    with pytest.raises(SpecError, match=r"^nodes: the trainjob target has no elastic policy"):
        plan_for(JobSpec.from_dict({"target": "trainjob", "nodes": "2:4", "name": "tj"}))


def test_user_script_and_args_reach_torchrun() -> None:
    spec = JobSpec.from_dict({"module": None, "script": "train.py", "args": ["--lr", "0.1"], "name": "s"})
    (pod, *_) = launch(render(spec))
    assert pod.command == ["torchrun", "train.py"] and pod.args == ["--lr", "0.1"]


def test_trainer_gets_volume_paths() -> None:
    spec = JobSpec.from_dict(
        {
            "volumes": {
                "checkpoints": {"claimName": "ck", "mountPath": "/ckpt"},
                "data": {"claimName": "d", "mountPath": "/data", "readOnly": True},
            }
        }
    )
    (pod, *_) = launch(render(spec))
    assert pod.args[:4] == ["--checkpoint-dir", "/ckpt", "--data-dir", "/data"]


@pytest.mark.parametrize(
    "target,connect_port", [("job", 23456), ("jobset", 23456), ("pytorchjob", 23456), ("trainjob", 29500)]
)
def test_a_chosen_port_is_where_rank0_listens_and_the_others_connect(target: str, connect_port: int) -> None:
    spec = JobSpec.from_dict({"target": target, "nodes": 3, "name": "port", "rendezvous": {"port": 23456}})
    pods = launch(render(spec))
    runs = [torchrun_settings(p) for p in pods]
    assert {r.master_port for r in runs} == {connect_port}
    (rank0,) = [p for p, r in zip(pods, runs) if r.node_rank == 0]
    assert rank0.ports == DECLARED_PORTS[target](connect_port)


# --layout text -> processes of each node in rank order
GROUP_LAYOUTS = {"4+3": [4, 3], "2x8+1x4": [8, 8, 4], "1x1+3x2": [1, 2, 2, 2]}


def _layout_spec(target: str, layout: str, gpus: int | None = None) -> JobSpec:
    from ddpctl.commands.options import parse_layout
    from ddpctl.spec.sources import merged_layers

    flags = {"target": target, "name": "wire", "nodeGroups": parse_layout("--layout", layout)}
    if gpus is not None:
        flags["gpusPerNode"] = gpus
    return JobSpec.from_dict(merged_layers(flags, Path(os.devnull), environ={}))


def _supported(target: str, layout: str) -> bool:
    """PyTorchJob has a Master (one node) and a Worker template: a first group of one node only."""
    return target != "pytorchjob" or layout.split("+")[0] in ("4", "1x1")


@pytest.mark.parametrize("target", ["job", "jobset", "pytorchjob"])
@pytest.mark.parametrize("layout", list(GROUP_LAYOUTS))
def test_node_group_wiring(target: str, layout: str) -> None:
    from tests.support.k8s_schemas import require_crds, validate_object

    if not _supported(target, layout):
        with pytest.raises(SpecError, match=r"^nodeGroups: the pytorchjob target .*use target job or jobset"):
            plan_for(_layout_spec(target, layout))
        return
    objects = render(_layout_spec(target, layout))
    require_crds()
    for obj in objects:
        assert validate_object(obj) == [], f"{obj['kind']} {obj['metadata']['name']} is invalid"
    pods = launch(objects)
    runs = [torchrun_settings(p) for p in pods]
    procs = GROUP_LAYOUTS[layout]
    nodes = len(procs)

    assert len(pods) == nodes
    assert {r.nnodes for r in runs} == {str(nodes)}
    ranks = sorted(r.node_rank for r in runs)  # type: ignore[type-var]
    assert ranks == list(range(nodes)), "node ranks must be 0..N-1, each once"
    by_rank = sorted(zip(runs, pods), key=lambda rp: rp[0].node_rank)  # type: ignore[arg-type, return-value]
    assert [r.nproc_per_node for r, _ in by_rank] == procs, "ranks contiguous per node, groups in order"
    assert sum(r.nproc_per_node for r in runs) == sum(procs), "world size = the sum of the nodes' processes"
    assert all(p.gpus == r.nproc_per_node for r, p in zip(runs, pods)), "each template's GPU limit = its processes"
    rank0 = by_rank[0][1]
    assert (rank0.owner, rank0.index) == (pods[0].owner, 0), "rank 0 is the first group's first pod"
    assert {r.master_addr for r in runs} == {rank0.dns_name}, "MASTER_ADDR must resolve to rank 0's pod"
    assert {r.rdzv_backend for r in runs} == {"static"}


@pytest.mark.parametrize("target", ["job", "jobset", "pytorchjob"])
def test_cpu_layout_has_no_gpu_limits(target: str) -> None:
    pods = launch(render(_layout_spec(target, "2+1", gpus=0)))
    runs = [torchrun_settings(p) for p in pods]
    assert sorted(r.nproc_per_node for r in runs) == [1, 2]
    assert all(p.gpus == 0 and p.env["DDP_TRAINER_BACKEND"] == "gloo" for p in pods)


def test_trainjob_refuses_node_groups() -> None:
    with pytest.raises(SpecError, match=r"^nodeGroups: .*Trainer v2 has a single numProcPerNode"):
        plan_for(_layout_spec("trainjob", "4+3"))


@pytest.mark.parametrize(
    "groups,field",
    [
        (
            [{"name": "a", "nodes": 1, "gpusPerNode": 4}, {"name": "b", "nodes": 1, "gpusPerNode": 0}],
            "nodeGroups[1].gpusPerNode",
        ),
        (
            [{"name": "a", "nodes": 1, "gpusPerNode": 4}, {"name": "a", "nodes": 1, "gpusPerNode": 2}],
            "nodeGroups[1].name",
        ),
        ([{"name": "A_1", "nodes": 1, "gpusPerNode": 4}], "nodeGroups[0].name"),
        ([{"name": "a", "nodes": 0, "gpusPerNode": 4}], "nodeGroups[0].nodes"),
        ([{"name": "a", "nodes": 1, "gpusPerNode": 2, "procsPerNode": 3}], "nodeGroups[0].procsPerNode"),
        ([{"name": "a", "nodes": 1}], "nodeGroups[0].gpusPerNode"),
        ([{"name": "a", "nodes": 1, "gpusPerNode": 1, "resources": {"gpu": "1"}}], "nodeGroups[0].resources"),
        ([{"name": "a", "nodes": 1, "gpusPerNode": 1, "colour": "red"}], "nodeGroups[0].colour"),
        ([{"name": "a", "nodes": 1, "gpusPerNode": 1, "nodeSelector": {"k": "a b"}}], "nodeGroups[0].nodeSelector.k"),
    ],
)
def test_node_group_errors_name_the_field(groups: list, field: str) -> None:
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict({"nodeGroups": groups})
    assert info.value.field == field


def test_node_groups_with_uniform_keys_or_elastic_are_refused() -> None:
    groups = [{"name": "a", "nodes": 1, "gpusPerNode": 4}]
    with pytest.raises(SpecError, match=r"^nodeGroups: is set together with nodes"):
        JobSpec.from_dict({"nodeGroups": groups, "nodes": 2})
    with pytest.raises(SpecError, match=r"^rendezvous.mode: node groups need static rendezvous"):
        plan_for(JobSpec.from_dict({"nodeGroups": groups, "rendezvous": {"mode": "c10d"}}))


def test_group_scheduling_fields_reach_their_pods_only() -> None:
    spec = JobSpec.from_dict(
        {
            "nodeSelector": {"pool": "gpu"},
            "resources": {"cpu": "4", "memory": "16Gi"},
            "nodeGroups": [
                {"name": "a100", "nodes": 1, "gpusPerNode": 4, "nodeSelector": {"gpu": "a100"}},
                {
                    "name": "l4",
                    "nodes": 2,
                    "gpusPerNode": 3,
                    "nodeSelector": {"gpu": "l4"},
                    "tolerations": [{"key": "l4", "operator": "Exists"}],
                    "resources": {"memory": "8Gi"},
                    "gpuResource": "example.com/gpu",
                },
            ],
        }
    )
    jobs = {o["metadata"]["name"]: o for o in render(spec) if o["kind"] == "Job"}
    a100 = jobs["ddp-train-a100"]["spec"]["template"]["spec"]
    l4 = jobs["ddp-train-l4"]["spec"]["template"]["spec"]
    assert a100["nodeSelector"] == {"pool": "gpu", "gpu": "a100"} and l4["nodeSelector"] == {"pool": "gpu", "gpu": "l4"}
    assert a100["containers"][0]["resources"] == {
        "limits": {"memory": "16Gi", "nvidia.com/gpu": 4},
        "requests": {"cpu": "4", "memory": "16Gi"},
    }
    assert l4["containers"][0]["resources"] == {
        "limits": {"memory": "8Gi", "example.com/gpu": 3},
        "requests": {"cpu": "4", "memory": "8Gi"},
    }
    assert {t["key"] for t in l4["tolerations"]} == {"l4", "example.com/gpu"}
    assert {t["key"] for t in a100["tolerations"]} == {"nvidia.com/gpu"}
    assert JobSpec.from_dict(spec.to_dict()) == spec


def test_uniform_layout_is_the_one_group_case() -> None:
    spec = JobSpec(nodes=3, gpus_per_node=2)
    nodes = plan_for(spec).nodes
    assert [n.nproc for n in nodes] == [2, 2, 2]
    assert [n.ranks for n in nodes] == [range(2), range(2, 4), range(4, 6)]
    assert spec.to_dict()["nodeGroups"] == []
