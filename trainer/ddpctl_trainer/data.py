"""Datasets, samplers and loaders.

* ``synthetic`` (default): deterministic tensors made from ``--seed``; no files, no network.
* ``cifar10``: torchvision's CIFAR-10 under ``--data-dir``, kept as uint8 in memory and
  normalised a whole batch at a time on the device (cheaper than per-sample transforms).
* ``imagefolder``: ``<data-dir>/train/<class>/*.jpg`` (or ``<data-dir>/<class>/...``), with an
  optional ``<data-dir>/val``.

Training uses ``ResumableDistributedSampler``: a ``DistributedSampler`` that can start part-way
into an epoch so a resumed run sees exactly the batches the interrupted one had left.
Evaluation uses ``EvalShardSampler`` + ``PaddedEvalDataset``: every rank gets the same number of
batches (FSDP needs that), and the padding samples carry ``valid=0`` so nothing counts twice.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, default_collate

from .config import TrainConfig
from .dist import DistContext
from .errors import TrainerFailure, UsageError

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


class TensorImages(Dataset[Any]):
    """Images and labels held as two tensors; fetches a whole batch with one index op."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]

    def __getitems__(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return self.images.index_select(0, idx), self.labels.index_select(0, idx)


class PaddedEvalDataset(Dataset[Any]):
    """Positions ``0..total-1`` over a dataset of ``n <= total`` samples; padding is marked invalid."""

    def __init__(self, base: Dataset[Any], total: int) -> None:
        self.base = base
        self.n = len(base)  # type: ignore[arg-type]  # Dataset has no __len__; ours are sized
        self.total = total

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, pos: int) -> tuple[Any, Any, torch.Tensor]:
        x, y = self.base[pos % self.n]
        return x, y, torch.tensor(pos < self.n)

    def __getitems__(self, positions: Sequence[int]) -> tuple[Any, Any, torch.Tensor]:
        pos = torch.as_tensor(positions, dtype=torch.long)
        valid = pos < self.n
        if hasattr(self.base, "__getitems__"):
            x, y = self.base.__getitems__((pos % self.n).tolist())
            return x, y, valid
        xs, ys = zip(*(self.base[int(p) % self.n] for p in pos))
        return default_collate(list(xs)), default_collate(list(ys)), valid


def collate(batch: Any) -> Any:
    """Pass through batches that a dataset's ``__getitems__`` already stacked."""
    if isinstance(batch, tuple):
        return batch
    return default_collate(batch)


class ResumableDistributedSampler(DistributedSampler[Any]):
    """``DistributedSampler`` (same shuffle, same shard: rank r gets ``perm[r::N]``) that can skip
    the first ``start`` samples of this rank's share, for an exact mid-epoch resume."""

    def __init__(self, dataset: Dataset[Any], num_replicas: int, rank: int, shuffle: bool, seed: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=False)
        self.start = 0

    def set_start(self, start: int) -> None:
        """Skip this many of this rank's samples in the next iteration (0: whole epoch)."""
        self.start = start

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        return iter(indices[self.start :])

    def __len__(self) -> int:
        return self.num_samples - self.start


class EvalShardSampler(Sampler[int]):
    """Rank r gets positions ``r, r+N, ...`` of ``0..total-1`` (total = n rounded up to N)."""

    def __init__(self, total: int, rank: int, world: int) -> None:
        self.total, self.rank, self.world = total, rank, world

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.total, self.world))

    def __len__(self) -> int:
        return len(range(self.rank, self.total, self.world))


@dataclass
class DataBundle:
    """What the trainer needs from the data side."""

    train_loader: DataLoader[Any]
    train_sampler: ResumableDistributedSampler
    eval_loader: DataLoader[Any] | None
    num_classes: int
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None  # applied on the device, per batch
    # The training loader's workers draw their seeds from this generator, which the trainer reseeds
    # every epoch, so the global RNG stream does not depend on when an iterator was made (exact resume).
    generator: torch.Generator

    @property
    def batches_per_epoch(self) -> int:
        """This rank's training batches an epoch (the last one may be short)."""
        batch = self.train_loader.batch_size
        assert batch is not None  # build_data gives the loader a batch size
        return math.ceil(self.train_sampler.num_samples / batch)


def synthetic(n: int, classes: int, size: int, seed: int, split: int = 0) -> TensorImages:
    """Deterministic, learnable images: a class pattern from ``seed`` plus noise.

    ``split`` 0 is the training set; other values give held-out samples of the same classes.
    """
    # low-frequency class patterns (4x4 blocks scaled up) survive pooling, so a small net learns them
    coarse = torch.randn(classes, 3, 4, 4, generator=torch.Generator().manual_seed(seed))
    patterns = F.interpolate(coarse, size=(size, size), mode="nearest")
    g = torch.Generator().manual_seed(seed * 7919 + 1_000_003 * split + 1)
    labels = torch.randint(0, classes, (n,), generator=g)
    images = 0.5 * patterns[labels] + torch.randn(n, 3, size, size, generator=g)
    # 10% of the labels are random: the loss cannot reach 0, so long runs (benchmarks) never
    # drift into vanishing gradients, whose denormal floats make CPUs crawl
    noisy = torch.rand(n, generator=g) < 0.1
    labels = torch.where(noisy, torch.randint(0, classes, (n,), generator=g), labels)
    return TensorImages(images, labels)


def _torchvision(what: str) -> Any:
    try:
        import torchvision
    except ImportError:
        raise UsageError(f"{what} needs torchvision, which this image lacks: pip install torchvision") from None
    return torchvision


def _fetch_cifar10(root: Path) -> None:
    """Download and extract CIFAR-10 into ``root``; torchvision skips files that verify."""
    tv = _torchvision("--dataset cifar10")
    root.mkdir(parents=True, exist_ok=True)
    tv.datasets.CIFAR10(str(root), train=True, download=True)  # one archive holds both splits


def _read_cifar10(root: Path) -> tuple[TensorImages, TensorImages]:
    tv = _torchvision("--dataset cifar10")
    out = []
    for train in (True, False):
        try:
            ds = tv.datasets.CIFAR10(str(root), train=train, download=False)
        except Exception as exc:  # noqa: BLE001 - torchvision raises many kinds for a bad copy: one message
            raise TrainerFailure(f"cannot read CIFAR-10 from --data-dir {root}: {exc}") from None
        images = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()  # uint8 NCHW
        out.append(TensorImages(images, torch.as_tensor(ds.targets, dtype=torch.long)))
    return out[0], out[1]


def _try_fetch(root: Path) -> str | None:
    """The download's error as one message, or None: raising here would skip a collective."""
    try:
        _fetch_cifar10(root)
    except Exception as exc:  # noqa: BLE001 - network errors come in many types
        return f"--download of CIFAR-10 into {root} failed (offline?): {exc}"
    return None


def download_cifar10(root: Path, ctx: DistContext) -> None:
    """Collective (every rank calls it): CIFAR-10 is in ``root`` on every node when it returns.

    Global rank 0 downloads first while everyone waits; then local rank 0 of every other node
    checks its own ``root`` and downloads only what does not verify. A node-local data dir thus
    gets its own copy, and a shared (RWX) one is written by one process only: the other nodes
    find it complete and just read it (no two writers in one directory). Two collectives on
    every rank, whatever fails, so the ranks stay in step; the wait is bounded by --timeout-s.
    """
    from . import dist as d

    error = _try_fetch(root) if ctx.rank == 0 else None
    first = d.broadcast_object(error)  # also the barrier: nobody reads before rank 0 is done
    if first is not None:
        raise TrainerFailure(first if ctx.rank == 0 else f"rank 0 could not download CIFAR-10: {first}")
    if ctx.local_rank == 0 and ctx.rank != 0:
        error = _try_fetch(root)
    errors = d.all_gather_object((ctx.node_rank, error))  # the barrier before any rank reads
    if error is not None:
        raise TrainerFailure(error)
    if any(node == ctx.node_rank and err is not None for node, err in errors):
        raise TrainerFailure(f"local rank 0 of node {ctx.node_rank} could not download CIFAR-10 (see its error line)")


def _cifar10(cfg: TrainConfig, ctx: DistContext) -> tuple[TensorImages, TensorImages]:
    _torchvision("--dataset cifar10")  # a usage error on every rank alike, before any collective
    root = Path(cfg.data_dir or ".")
    if cfg.download:
        download_cifar10(root, ctx)
    elif not (root / "cifar-10-batches-py").is_dir():
        raise UsageError(
            f"--data-dir {root} has no CIFAR-10 (cifar-10-batches-py): add --download, or copy the dataset there"
        )
    return _read_cifar10(root)


def _imagefolder(cfg: TrainConfig) -> tuple[Dataset[Any], Dataset[Any] | None, int]:
    tv = _torchvision("--dataset imagefolder")
    root = Path(cfg.data_dir or ".")
    train_root = root / "train" if (root / "train").is_dir() else root
    val_root = root / "val" if (root / "val").is_dir() else None
    t = tv.transforms
    transform = t.Compose(
        [
            t.Resize(cfg.image_size),
            t.CenterCrop(cfg.image_size),
            t.ToTensor(),
            t.Normalize(CIFAR_MEAN, CIFAR_STD),
        ]
    )
    try:
        train = tv.datasets.ImageFolder(str(train_root), transform=transform)
        val = tv.datasets.ImageFolder(str(val_root), transform=transform) if val_root else None
    except (FileNotFoundError, OSError) as exc:
        raise UsageError(f"--data-dir {root} is not an image folder (<class>/<image> files): {exc}") from None
    return train, val, len(train.classes)


def build_data(cfg: TrainConfig, ctx: DistContext, batch: int, pin_memory: bool) -> DataBundle:
    """Datasets, the resumable training sampler and both loaders."""
    normalize = None
    if cfg.dataset == "synthetic":
        train_ds: Dataset[Any] = synthetic(cfg.synthetic_samples, cfg.num_classes, cfg.image_size, cfg.seed)
        eval_ds: Dataset[Any] | None = (
            synthetic(cfg.eval_samples, cfg.num_classes, cfg.image_size, cfg.seed, split=1)
            if cfg.eval_samples
            else None
        )
        classes = cfg.num_classes
    elif cfg.dataset == "cifar10":
        train_ds, eval_ds = _cifar10(cfg, ctx)
        classes = 10
        normalize = (CIFAR_MEAN, CIFAR_STD)
    else:
        train_ds, eval_ds, classes = _imagefolder(cfg)
    n = len(train_ds)  # type: ignore[arg-type]  # Dataset has no __len__; ours are sized
    if n == 0:
        raise UsageError(f"--dataset {cfg.dataset} has no training samples")

    sampler = ResumableDistributedSampler(train_ds, ctx.world_size, ctx.rank, shuffle=True, seed=cfg.seed)
    workers = cfg.num_workers
    common: dict[str, Any] = {"num_workers": workers, "pin_memory": pin_memory, "collate_fn": collate}
    if workers > 0:
        common.update(persistent_workers=cfg.persistent_workers, prefetch_factor=cfg.prefetch_factor)
    generator = torch.Generator()
    train_loader = DataLoader(
        train_ds, batch_size=batch, sampler=sampler, drop_last=False, generator=generator, **common
    )

    eval_loader = None
    if eval_ds is not None and cfg.eval:
        total = math.ceil(len(eval_ds) / ctx.world_size) * ctx.world_size  # type: ignore[arg-type]  # Dataset has no __len__; ours are sized
        padded = PaddedEvalDataset(eval_ds, total)
        eval_loader = DataLoader(
            padded,
            batch_size=batch,
            sampler=EvalShardSampler(total, ctx.rank, ctx.world_size),
            **{**common, "persistent_workers": False} if workers > 0 else common,
        )
    return DataBundle(train_loader, sampler, eval_loader, classes, normalize, generator)
