"""ddpctl_trainer.data: the samplers an exact resume and an exact evaluation rest on, and the
loaders build_data makes."""

from __future__ import annotations

import math

import pytest
import torch

from ddpctl_trainer.config import parse_args
from ddpctl_trainer.data import EvalShardSampler, PaddedEvalDataset, ResumableDistributedSampler, build_data, synthetic
from ddpctl_trainer.dist import DistContext


@pytest.mark.parametrize("world", [2, 3, 4])
def test_step_k_batches_of_all_ranks_are_the_single_process_batch(world: int) -> None:
    """The design equivalence rests on: union over ranks of step-k batches == perm[kB:(k+1)B]."""
    ds = synthetic(48, 4, 4, seed=0)
    global_batch = 12
    per_rank = global_batch // world
    single = list(ResumableDistributedSampler(ds, 1, 0, shuffle=True, seed=5).__iter__())
    shards = [list(ResumableDistributedSampler(ds, world, r, shuffle=True, seed=5)) for r in range(world)]
    for k in range(len(ds) // global_batch):
        union = sorted(i for shard in shards for i in shard[k * per_rank : (k + 1) * per_rank])
        assert union == sorted(single[k * global_batch : (k + 1) * global_batch])


def test_resumable_sampler_skips_consumed_samples() -> None:
    ds = synthetic(20, 4, 4, seed=0)
    s = ResumableDistributedSampler(ds, 2, 1, shuffle=True, seed=1)
    s.set_epoch(3)
    full = list(s)
    s.set_start(6)
    assert list(s) == full[6:] and len(s) == len(full) - 6


@pytest.mark.parametrize(("n", "world"), [(61, 4), (61, 3), (5, 8), (64, 4)])
def test_eval_sharding_counts_each_sample_once(n: int, world: int) -> None:
    ds = synthetic(n, 4, 4, seed=0)
    total = math.ceil(n / world) * world
    padded = PaddedEvalDataset(ds, total)
    seen: list[int] = []
    per_rank = set()
    for rank in range(world):
        positions = list(EvalShardSampler(total, rank, world))
        per_rank.add(len(positions))
        _, labels, valid = padded.__getitems__(positions)
        seen += [p for p, v in zip(positions, valid.tolist()) if v]
        assert torch.equal(labels[valid], ds.labels[torch.tensor(positions)[valid]])
    assert sorted(seen) == list(range(n))
    assert len(per_rank) == 1  # same number of samples on every rank: FSDP forwards stay in lockstep


@pytest.mark.parametrize(
    ("world", "batch", "batches"),
    [(1, 16, 4), (2, 16, 2), (3, 16, 2), (4, 5, 4)],  # 64 samples: 64/world a rank (rounded up), in batches
)
def test_build_data_shards_the_training_set_and_evaluates_every_sample_once(
    world: int, batch: int, batches: int
) -> None:
    cfg = parse_args(["--synthetic-samples", "64", "--eval-samples", "10", "--image-size", "8"], {})
    counted = 0
    for rank in range(world):
        data = build_data(cfg, DistContext(rank, rank, world, world, 0, 0, "torchrun"), batch, pin_memory=False)
        assert data.batches_per_epoch == batches == len(list(data.train_loader))
        assert data.train_loader.generator is data.generator  # reseeded every epoch by the trainer
        assert data.eval_loader is not None and data.num_classes == 10 and data.normalize is None
        counted += sum(int(valid.sum()) for _, _, valid in data.eval_loader)
    assert counted == 10
