"""N processes with batch B/N train exactly like one process with batch B (DDP and FSDP),
every rank ends with the same weights, and evaluation counts each sample exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.trainer import TINY, Run, assert_same_params, launch

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


def test_uneven_layout_trains_like_one_process(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`ddpctl run --local --layout 2+1 --gpus 0`: nodes of 2 and 1 processes (world size 3) give
    the weights one process gives with the same global batch (12: the world size must divide it)."""
    import subprocess
    import sys

    from tests.support.ports import free_port
    from tests.support.trainer import Run, clean_env

    root = tmp_path_factory.mktemp("uneven")
    uneven = [*COMMON, "--global-batch-size", "12", "--synthetic-samples", "48"]  # 4 steps/epoch, 2 epochs
    ref = launch(root / "reference", [*uneven, "--save-final", "final.pt"])
    assert ref.code == 0, ref.explain()
    workdir = root / "layout"
    workdir.mkdir()
    trainer_args = [*uneven, "--save-final", "final-{rank}.pt", "--metrics-file", str(workdir / "metrics.jsonl")]
    cmd = [sys.executable, "-m", "ddpctl", "run", "--local", "--layout", "2+1", "--gpus", "0"]
    cmd += ["--port", str(free_port()), "--color", "never", "--", *trainer_args]
    env = {k: v for k, v in clean_env().items() if not k.startswith("DDPCTL_")}
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    run = Run(proc.returncode, proc.stdout, proc.stderr, workdir)
    assert run.code == 0, run.explain()
    (start,) = run.events("start")
    assert start["world_size"] == 3 and start["global_batch"] == 12
    assert run.events("done")[0]["step"] == STEPS
    assert_same_params(run.final(0), ref.final(), atol=ATOL)
    for rank in (1, 2):
        assert_same_params(run.final(rank), run.final(0), atol=0.0)


def test_a_global_batch_the_world_size_does_not_divide_is_a_clear_error(tmp_path: Path) -> None:
    run = launch(tmp_path, [*COMMON], nproc=3)
    assert run.code != 0
    assert "--global-batch-size 16 is not divisible by world size x --grad-accum" in run.out + run.err
