"""N processes with batch B/N train exactly like one process with batch B (DDP and FSDP),
every rank ends with the same weights, and evaluation counts each sample exactly once."""

from __future__ import annotations

import pytest

from .conftest import TINY, Run, assert_same_params, launch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

GLOBAL_BATCH = 16
# 64 samples / 16 = 4 optimizer steps per epoch, 2 epochs: K = 8 steps. Evaluation over 61
# samples, which no world size here divides, so DistributedSampler-style padding would show.
COMMON = [
    *TINY,
    "--dtype",
    "float64",
    "--global-batch-size",
    str(GLOBAL_BATCH),
    "--epochs",
    "2",
    "--lr",
    "0.1",
    "--momentum",
    "0.9",
    "--seed",
    "3",
]
STEPS = 8
# float64 with a different summation order per world size: agreement to ~1e-12 is expected;
# 1e-9 leaves room while still catching any real difference (a wrong batch moves weights ~1e-2).
ATOL = 1e-9

CASES = {
    # name: (strategy, nproc, extra flags)
    "ddp-2": ("ddp", 2, []),
    "ddp-4": ("ddp", 4, []),
    "ddp-2-accum": ("ddp", 2, ["--grad-accum", "2"]),
    "fsdp-2": ("fsdp", 2, []),
    "fsdp-4": ("fsdp", 4, []),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Each configuration runs once per module, on first use."""
    root = tmp_path_factory.mktemp("equivalence")
    cache: dict[str, Run] = {}

    class Lazy(dict):
        def __missing__(self, name: str) -> Run:
            if name == "reference":
                run = launch(root / name, [*COMMON, "--save-final", "final.pt"])
            else:
                strategy, nproc, extra = CASES[name]
                run = launch(
                    root / name,
                    [*COMMON, "--strategy", strategy, *extra, "--save-final", "final-{rank}.pt"],
                    nproc=nproc,
                )
            assert run.code == 0, run.explain()
            self[name] = run
            return run

    return Lazy(cache)


def test_reference_trains_the_stated_number_of_steps(runs: dict[str, Run]) -> None:
    ref = runs["reference"]
    (done,) = ref.events("done")
    assert done["step"] == STEPS
    (start,) = ref.events("start")
    assert start["world_size"] == 1 and start["global_batch"] == GLOBAL_BATCH


@pytest.mark.parametrize("name", list(CASES))
def test_same_parameters_as_one_process(runs: dict[str, Run], name: str) -> None:
    ref = runs["reference"].final()
    run = runs[name]
    _, nproc, _ = CASES[name]
    (start,) = run.events("start")
    assert start["world_size"] == nproc and start["global_batch"] == GLOBAL_BATCH
    assert run.events("done")[0]["step"] == STEPS
    # the reference must have moved far from the initial weights for the comparison to mean anything
    assert_same_params(run.final(0), ref, atol=ATOL)


@pytest.mark.parametrize("name", list(CASES))
def test_every_rank_holds_identical_parameters(runs: dict[str, Run], name: str) -> None:
    run = runs[name]
    _, nproc, _ = CASES[name]
    first = run.final(0)
    for rank in range(1, nproc):
        assert_same_params(run.final(rank), first, atol=0.0)


@pytest.mark.parametrize("name", ["ddp-2", "ddp-4", "fsdp-4"])
def test_evaluation_counts_each_sample_once(runs: dict[str, Run], name: str) -> None:
    ref_evals = runs["reference"].events("eval")
    evals = runs[name].events("eval")
    assert len(evals) == len(ref_evals) == 2
    for got, want in zip(evals, ref_evals):
        assert got["samples"] == want["samples"] == 61
        assert got["accuracy"] == want["accuracy"]
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-9)


def test_training_moved_the_weights(runs: dict[str, Run]) -> None:
    """Guard against a vacuous equivalence: untrained weights would also be equal everywhere."""
    import torch
    from ddpctl_trainer.models import build_model

    torch.manual_seed(3)
    init = build_model("convnet", num_classes=4).double().state_dict()
    ref = runs["reference"].final()
    moved = max(float((ref[k] - init[k]).abs().max()) for k in ref)
    assert moved > 1e-3
