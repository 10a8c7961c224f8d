"""The rendered layout wires up: world size = nodes x processes, node ranks 0..N-1 with one rank 0,
and the master address is the DNS name the engine really gives rank 0's pod (see tests/engines.py)."""

from __future__ import annotations

import pytest
from ddpctl.render import render
from ddpctl.spec import TARGETS, JobSpec

from tests.engines import launch, torchrun_settings

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
    assert port == spec.master_port
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
    from ddpctl.errors import SpecError

    with pytest.raises(SpecError, match=r"^nodes: the trainjob target has no elastic policy"):
        JobSpec.from_dict({"target": "trainjob", "nodes": "2:4", "name": "tj"})


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
