"""ddpctl_trainer.build: the parts made from the flags in the order the DDP recipe asks: the same
initial weights on every rank, the model wrapped first and the optimizer made after, over the
parameters training updates (FSDP replaces them); ``unwrap`` finds the module inside any wrapper;
the scheduler spans the run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from ddpctl_trainer.build import (
    build,
    make_optimizer,
    make_scheduler,
    param_dtype,
    steps_per_epoch,
    total_steps,
    unwrap,
    wrap,
)
from ddpctl_trainer.config import parse_args
from ddpctl_trainer.dist import DistContext, setup, teardown

ONE = DistContext(0, 0, 1, 1, 0, 0, "single")
CPU = torch.device("cpu")
SMALL = ["--synthetic-samples", "32", "--image-size", "8", "--batch-size", "16"]


@pytest.fixture
def group_of_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process group of this process alone (in memory): what DDP's and FSDP's wrappers need."""
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    setup(ONE, "gloo", 60, need_group=True)
    try:
        yield
    finally:
        teardown()


def test_every_rank_starts_from_the_same_weights_the_seeds() -> None:
    a, b, c = (build(parse_args([*SMALL, "--seed", seed], {}), ONE, CPU) for seed in ("3", "3", "4"))
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters()))
    assert not all(torch.equal(x, y) for x, y in zip(a.model.parameters(), c.model.parameters()))


def test_the_optimizer_holds_the_parameters_training_updates() -> None:
    parts = build(parse_args([*SMALL, "--dtype", "float64"], {}), ONE, CPU)
    held = parts.optimizer.param_groups[0]["params"]
    assert [id(p) for p in held] == [id(p) for p in unwrap(parts.model).parameters()]
    assert all(p.dtype == torch.float64 for p in held)


def test_under_fsdp_the_optimizer_is_made_after_wrapping(group_of_one: None) -> None:
    """fully_shard replaces the module's parameters with sharded ones: an optimizer made before
    would update tensors no forward uses any more."""
    from torch.distributed.tensor import DTensor

    cfg = parse_args([*SMALL, "--strategy", "fsdp"], {})
    module = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    before = [id(p) for p in module.parameters()]
    model = wrap(module, cfg, ONE, CPU)
    optimizer = make_optimizer(model, cfg)
    held = optimizer.param_groups[0]["params"]
    assert all(isinstance(p, DTensor) for p in held)
    assert [id(p) for p in held] == [id(p) for p in module.parameters()] != before


@pytest.mark.parametrize("how", ["plain", "dp", "ddp", "compile", "compiled-ddp"])
def test_unwrap_finds_the_module_inside_any_wrapper(how: str, group_of_one: None) -> None:
    module = nn.Linear(2, 2)
    ddp = lambda m: nn.parallel.DistributedDataParallel(m)
    made = {
        "plain": lambda: module,
        "dp": lambda: nn.DataParallel(module),
        "ddp": lambda: ddp(module),
        "compile": lambda: torch.compile(module),
        "compiled-ddp": lambda: torch.compile(ddp(module)),
    }[how]()
    assert unwrap(made) is module
    assert not any(k.startswith(("module.", "_orig_mod.")) for k in unwrap(made).state_dict())


@pytest.mark.parametrize(
    ("args", "wrapper"),
    [
        ([], "Linear"),  # one process of ddp: nothing to synchronise, no wrapper
        (["--strategy", "dp"], "Linear"),  # DataParallel only with several GPUs
        (["--compile"], "OptimizedModule"),
    ],
)
def test_what_wraps_the_model_in_one_process(args: list[str], wrapper: str) -> None:
    module = nn.Linear(2, 2)
    model = wrap(module, parse_args([*SMALL, *args], {}), ONE, CPU)
    assert type(model).__name__ == wrapper and unwrap(model) is module


@pytest.mark.parametrize(
    ("scheduler", "steps", "kind", "setting"),
    [
        ("none", 12, None, None),
        ("cosine", 12, "CosineAnnealingLR", ("T_max", 12)),
        ("cosine", 0, "CosineAnnealingLR", ("T_max", 1)),
        ("step", 12, "StepLR", ("step_size", 4)),
        ("step", 2, "StepLR", ("step_size", 1)),
    ],
)
def test_the_scheduler_spans_the_run(scheduler: str, steps: int, kind: str | None, setting: tuple | None) -> None:
    cfg = parse_args([*SMALL, "--scheduler", scheduler], {})
    made = make_scheduler(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1), cfg, steps)
    assert (type(made).__name__ if made else None) == kind
    if setting is not None:
        assert getattr(made, setting[0]) == setting[1]


@pytest.mark.parametrize(
    ("args", "per_epoch", "total"),
    [
        (["--epochs", "3"], 2, 6),  # 32 samples in batches of 16
        (["--epochs", "3", "--max-steps", "4"], 2, 4),
        (["--epochs", "3", "--max-steps", "40"], 2, 6),
        (["--epochs", "2", "--batch-size", "5", "--grad-accum", "3"], 3, 6),  # 7 batches: groups of 3, 3, 1
    ],
)
def test_steps_an_epoch_and_in_all(args: list[str], per_epoch: int, total: int) -> None:
    cfg = parse_args([*SMALL, *args], {})
    parts = build(cfg, ONE, CPU)
    assert steps_per_epoch(parts.data, cfg.grad_accum) == per_epoch
    assert total_steps(cfg, per_epoch) == total


@pytest.mark.parametrize(("dtype", "expected"), [("float32", torch.float32), ("float64", torch.float64)])
def test_the_parameters_dtype(dtype: str, expected: torch.dtype) -> None:
    cfg = parse_args([*SMALL, "--dtype", dtype], {})
    assert param_dtype(cfg) == expected
    assert {p.dtype for p in build(cfg, ONE, CPU).model.parameters()} == {expected}
