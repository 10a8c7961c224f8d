"""ddpctl_trainer.dist: where this process sits in the job, read from each engine's environment;
the device from LOCAL_RANK, never the global rank; the backend; the process group and the
collective helpers of a single process."""

from __future__ import annotations

import pytest
import torch

from ddpctl_trainer.dist import (
    DistContext,
    all_gather_object,
    barrier,
    broadcast_object,
    detect,
    device_for,
    group_active,
    resolve_backend,
)
from ddpctl_trainer.errors import UsageError

TORCHRUN_2x2_RANK3 = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "job-master-0",
    "MASTER_PORT": "23456",
    "TORCHELASTIC_RUN_ID": "x",
    "TORCHELASTIC_RESTART_COUNT": "2",
}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({}, DistContext(0, 0, 1, 1, 0, 0, "single"), id="plain-python"),
        pytest.param(
            {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "1"},
            DistContext(0, 0, 1, 1, 0, 0, "single"),
            id="trainer-v2-one-node-one-proc",
        ),
        pytest.param(TORCHRUN_2x2_RANK3, DistContext(3, 1, 4, 2, 1, 2, "torchrun"), id="torchrun-2-nodes-x-2"),
        # PyTorchJob without torchrun: RANK is the pod index, right only with one process per pod
        pytest.param(
            {
                "RANK": "2",
                "WORLD_SIZE": "3",
                "MASTER_ADDR": "job-master-0",
                "MASTER_PORT": "23456",
                "PET_NPROC_PER_NODE": "1",
            },
            DistContext(2, 0, 3, 1, 2, 0, "pod-index"),
            id="pytorchjob-plain",
        ),
        pytest.param(
            {"JOB_COMPLETION_INDEX": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "job-0.svc", "MASTER_PORT": "29500"},
            DistContext(1, 0, 2, 1, 1, 0, "pod-index"),
            id="indexed-job-plain",
        ),
        # pod recovery: torchrun runs node 1 (2 processes) alone; the job's layout is ddpctl's
        pytest.param(
            {
                **TORCHRUN_2x2_RANK3,
                "RANK": "1",
                "WORLD_SIZE": "2",
                "GROUP_RANK": "0",
                "DDP_COORDINATOR": "job-coordinator:29510",
                "DDP_NODE_RANK": "1",
                "DDP_NODE_FIRST_RANK": "2",
                "DDP_WORLD_SIZE": "4",
            },
            DistContext(3, 1, 4, 2, 1, 2, "torchrun+coordinator", "job-coordinator:29510"),
            id="torchrun-per-node-with-a-coordinator",
        ),
    ],
)
def test_detect_reads_each_engine(env: dict[str, str], expected: DistContext) -> None:
    assert detect(env) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "0"},
            "launch with `torchrun",
            id="trainer-v2-without-torchrun",
        ),
        pytest.param(
            {"RANK": "0", "WORLD_SIZE": "8", "MASTER_ADDR": "m", "PET_NPROC_PER_NODE": "4"},
            "without torchrun",
            id="pytorchjob-4-procs-without-torchrun",
        ),
        pytest.param(
            {"RANK": "4", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "MASTER_ADDR": "m"},
            "outside 0..3",
            id="rank-past-world",
        ),
        pytest.param({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}, "MASTER_ADDR", id="no-master"),
        pytest.param({"RANK": "x", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "not an integer", id="garbage"),
        pytest.param(
            {**TORCHRUN_2x2_RANK3, "DDP_COORDINATOR": "nowhere"}, "is not HOST:PORT", id="coordinator-without-port"
        ),
        pytest.param(
            {**TORCHRUN_2x2_RANK3, "DDP_COORDINATOR": "c:1"},
            "DDP_NODE_FIRST_RANK is not set",
            id="coordinator-no-layout",
        ),
    ],
)
def test_detect_rejects_inconsistent_environments(env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        detect(env)


def test_device_comes_from_local_rank_not_global_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """The article's mistake: on node 2, global rank 3 is not a GPU index; LOCAL_RANK 1 is."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    ctx = detect(TORCHRUN_2x2_RANK3)
    assert device_for(ctx, "nccl") == torch.device("cuda", 1)
    too_many = DistContext(5, 2, 6, 3, 1, 0, "torchrun")
    with pytest.raises(UsageError, match="LOCAL_RANK=2 but only 2 GPU"):
        device_for(too_many, "nccl")


@pytest.mark.parametrize(
    ("choice", "cuda", "expected"), [("auto", False, "gloo"), ("auto", True, "nccl"), ("gloo", True, "gloo")]
)
def test_backend_auto(choice: str, cuda: bool, expected: str) -> None:
    assert resolve_backend(choice, cuda) == expected


def test_nccl_without_cuda_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--backend nccl needs CUDA"):
        resolve_backend("nccl", False)


def test_one_process_needs_no_group_and_its_collectives_are_its_own_values() -> None:
    """Without a group (one process, ddp) the helpers run no collective: each returns what it got."""
    assert not group_active()
    barrier()
    assert broadcast_object({"step": 3}) == {"step": 3}
    assert all_gather_object("rank 0") == ["rank 0"]


def test_setup_joins_a_group_only_when_it_needs_one() -> None:
    """A single process needs no group for DDP, but FSDP always runs inside one: an in-memory one
    then (no MASTER_ADDR needed); a group of one is no group for the collectives' helpers."""
    import torch.distributed as dist

    from ddpctl_trainer.dist import setup, teardown

    one = DistContext(0, 0, 1, 1, 0, 0, "single")
    try:
        assert setup(one, "gloo", 60, need_group=False) == torch.device("cpu") and not dist.is_initialized()
        setup(one, "gloo", 60, need_group=True)
        assert dist.is_initialized() and dist.get_world_size() == 1 and not group_active()
    finally:
        teardown()
    assert not dist.is_initialized()
    teardown()  # again, and after errors: safe
