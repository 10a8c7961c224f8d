"""The factory: the parts a ``Trainer`` trains with, made from the flags.

As in PyTorch's DDP tutorial (``load_train_objs``, then ``Trainer(model, train_data, optimizer,
...)``), the trainer does not build what it trains: ``build`` makes the data, the model on this
rank's device (from ``LOCAL_RANK``, see ``dist.device_for``), wrapped (DDP, FSDP or DataParallel,
then ``torch.compile``), and only *then* the optimizer and its scheduler, from the wrapped model's
parameters: FSDP replaces a module's parameters with sharded ones, so an optimizer made before
wrapping would hold tensors that no longer train. ``unwrap`` gives the module inside the wrappers
(DDP's ``.module``), whose state dict is what a checkpoint saves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from .config import TrainConfig
from .data import DataBundle, build_data
from .dist import DistContext
from .models import build_model


@dataclass
class Parts:
    """What ``Trainer`` takes: the data, the wrapped model, and the optimizer made after wrapping."""

    data: DataBundle
    model: nn.Module  # what training calls: the wrapped (and maybe compiled) model
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None


def param_dtype(cfg: TrainConfig) -> torch.dtype:
    """``--dtype``: the parameters' dtype (float64 makes the equivalence tests exact)."""
    return torch.float64 if cfg.dtype == "float64" else torch.float32


def steps_per_epoch(data: DataBundle, grad_accum: int) -> int:
    """Optimizer steps an epoch takes: its batches in groups of ``--grad-accum`` (the last may be short)."""
    return math.ceil(data.batches_per_epoch / grad_accum)


def total_steps(cfg: TrainConfig, per_epoch: int) -> int:
    """The run's last step: every epoch's, or ``--max-steps`` when that comes first."""
    total = per_epoch * cfg.epochs
    return min(total, cfg.max_steps) if cfg.max_steps else total


def wrap(module: nn.Module, cfg: TrainConfig, ctx: DistContext, device: torch.device) -> nn.Module:
    """The model training calls: ``module`` (already on ``device``) wrapped for ``--strategy``,
    then compiled with ``--compile``."""
    model: nn.Module = module
    if cfg.strategy == "ddp" and ctx.is_distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        from .recovery import current

        membership = current()
        model = DDP(
            module,
            device_ids=[device.index] if device.type == "cuda" else None,
            # A group formed again (pod recovery) must not take rank 0's parameters: rank 0 may be
            # a replacement, fresh from its init; the rank furthest along hands its state over
            init_sync=membership is None or membership.generation == 0,
            bucket_cap_mb=cfg.bucket_cap_mb,
            gradient_as_bucket_view=cfg.gradient_as_bucket_view,
            static_graph=cfg.static_graph,
            find_unused_parameters=cfg.find_unused_parameters,
        )
    elif cfg.strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        # FULL_SHARD: parameters, gradients and optimizer state sharded; each top-level block is
        # its own unit so only one block's full parameters exist at a time. In place: the module
        # itself becomes the sharded model.
        for child in module.children():
            if any(p.requires_grad for p in child.parameters()):
                fully_shard(child, reshard_after_forward=True)
        fully_shard(module, reshard_after_forward=True)
    elif cfg.strategy == "dp":
        model = (
            nn.DataParallel(module)  # ddpctl: ignore[DDP013] --strategy dp asks for it; ddp is the default
            if torch.cuda.device_count() > 1
            else module
        )
    if cfg.compile:
        model = torch.compile(model)  # type: ignore[assignment]  # typed as a callable; returns a Module
    return model


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside the wrappers: ``torch.compile``'s ``_orig_mod``, then DDP's or
    DataParallel's ``.module`` (FSDP shards in place: the model is the module). Its state dict has
    no ``module.`` prefix, so a checkpoint loads whatever wraps the model next time."""
    inner: nn.Module = getattr(model, "_orig_mod", model)
    if isinstance(inner, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
        inner = inner.module
    return inner


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """``--optimizer`` over the wrapped model's trainable parameters (call it after ``wrap``)."""
    params = [p for p in unwrap(model).parameters() if p.requires_grad]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def make_scheduler(
    optimizer: torch.optim.Optimizer, cfg: TrainConfig, steps: int
) -> torch.optim.lr_scheduler.LRScheduler | None:
    """``--scheduler`` over ``steps`` optimizer steps (the whole run)."""
    if cfg.scheduler == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(steps, 1))
    if cfg.scheduler == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=max(steps // 3, 1), gamma=0.1)
    return None


def build(cfg: TrainConfig, ctx: DistContext, device: torch.device) -> Parts:
    """The data, then the model moved to ``device`` and wrapped, then the optimizer and scheduler.
    Every rank calls it (DDP's wrapper and a CIFAR-10 download run collectives)."""
    batch = cfg.per_process_batch(ctx.world_size)
    pin = cfg.pin_memory if cfg.pin_memory is not None else device.type == "cuda"
    data = build_data(cfg, ctx, batch, pin)

    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    module = build_model(cfg.model, data.num_classes).to(device=device, dtype=param_dtype(cfg))
    if cfg.channels_last:
        module = module.to(memory_format=torch.channels_last)
    model = wrap(module, cfg, ctx, device)

    optimizer = make_optimizer(model, cfg)  # after wrapping: FSDP has replaced the parameters
    scheduler = make_scheduler(optimizer, cfg, total_steps(cfg, steps_per_epoch(data, cfg.grad_accum)))
    return Parts(data, model, optimizer, scheduler)


__all__ = ["Parts", "build", "make_optimizer", "make_scheduler", "unwrap", "wrap"]
