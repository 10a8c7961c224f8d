"""The ``Trainer``: wrap the model, train, evaluate exactly, checkpoint and resume.

It reads like PyTorch's DDP tutorial (multi-GPU training with DDP): ``dist.setup``/``teardown``
around it (main.py), the model on the local rank's device, wrapped (DDP, FSDP or DataParallel),
the optimizer created *after* wrapping; ``_run_batch`` trains one micro-batch, ``_run_epoch``
loops over an epoch's batches and steps the optimizer after each accumulation group, ``fit``
loops over the epochs. The global rank decides who writes (rank 0), the local rank which device.
What runs after each optimizer step and epoch (the watchdog's heartbeat, metrics and progress,
the save cadence, ``--max-steps``, the stop vote, and the user's ``--callback``s) is a list of
step hooks in a fixed order (callbacks.py). Checkpoints go through the
``torch.distributed.checkpoint.state_dict`` helpers, which fit every wrapper, so a checkpoint
written under ``ddp`` resumes under ``fsdp`` and the other way round.
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NoReturn, cast

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from . import callbacks, stop, watchdog
from . import checkpoint as ckpt
from . import dist as d
from .config import TrainConfig
from .data import build_data
from .dist import DistContext
from .errors import (
    CheckpointError,
    Preempted,
    StoreError,
    TrainerError,
    TrainerFailure,
    is_peer_lost,
    peer_lost,
    scrub,
)
from .metrics import MetricsLog, Progress
from .models import build_model
from .protocol import ALREADY_COMPLETE, WARNING_TAG
from .store import ShardedSave, open_store
from .watchdog import BACKWARD, CHECKPOINT, EVAL, FORWARD, OPTIMIZER, Beacon

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def warn(message: str) -> None:
    print(f"{WARNING_TAG}{message}", file=sys.stderr, flush=True)


def rng_state() -> dict[str, Any]:
    """This process's RNG states as tensors and plain values (loadable with weights_only)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        np_state = np.random.get_state(legacy=True)
        assert isinstance(np_state, tuple)  # the legacy (MT19937) form, as the global RandomState uses
        state["numpy"] = [np_state[0], torch.from_numpy(np_state[1].astype("int64")), *np_state[2:]]
    except ImportError:
        pass
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        try:
            import numpy as np

            name, key, *rest = state["numpy"]
            np.random.set_state((name, key.numpy().astype("uint32"), *rest))
        except ImportError:
            pass


class Trainer:
    """Owns the model, optimizer, data and the training position (epoch, step, batch)."""

    def __init__(self, cfg: TrainConfig, ctx: DistContext, device: torch.device, backend: str) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.device = device
        self.backend = backend
        self.dtype = torch.float64 if cfg.dtype == "float64" else torch.float32
        self.batch = cfg.per_process_batch(ctx.world_size)
        self.global_batch = self.batch * ctx.world_size * cfg.grad_accum
        pin = cfg.pin_memory if cfg.pin_memory is not None else device.type == "cuda"
        self.non_blocking = pin and device.type == "cuda"
        self.data = build_data(cfg, ctx, self.batch, pin)
        # The loader draws its worker seed from its own generator, reseeded each epoch, so the
        # global RNG stream does not depend on when an iterator was created (exact resume).
        self.loader_generator = torch.Generator()
        self.data.train_loader.generator = self.loader_generator
        self.batches_per_epoch = math.ceil(self.data.train_sampler.num_samples / self.batch)
        self.steps_per_epoch = math.ceil(self.batches_per_epoch / cfg.grad_accum)

        torch.manual_seed(cfg.seed)  # the same initial weights on every rank
        raw = build_model(cfg.model, self.data.num_classes)
        raw = raw.to(device=device, dtype=self.dtype)
        if cfg.channels_last:
            raw = raw.to(memory_format=torch.channels_last)
        self.raw_model, self.model = self._wrap(raw)
        self.optimizer = self._make_optimizer()
        self.scheduler = self._make_scheduler()
        self.autocast = (
            torch.autocast(device_type=device.type, dtype=torch.bfloat16) if cfg.bf16 else contextlib.nullcontext()
        )

        self.epoch = 0
        self.step = 0
        self.batches_done = 0  # micro-batches of self.epoch already trained (this rank)
        self._last_saved_step = -1
        self._resumed_from: str | None = None
        self._checked_newer = False
        self.writer = ckpt.Writer(warn)
        # The stop flag's all-reduce runs on a CPU (gloo) group: with nccl it would otherwise make
        # the host wait for the GPU once per step. Created in fit(), where every rank arrives.
        self._control_group: Any = None
        # a local directory or an object store URL (store.py); only rank 0 reads and writes full checkpoints
        self.store = open_store(cfg.checkpoint_dir, warn, timeout_s=cfg.timeout_s)
        self.metrics = MetricsLog(cfg.metrics_file, ctx.is_main)
        self.progress = Progress(cfg.progress, ctx.rank, cfg.epochs)
        self.started = time.time()
        self.beacon = Beacon()  # where this rank is, for the stall watchdog (trainer/watchdog.py)
        self.stats = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, samples (see _track)
        self.done = False  # set by a step hook (--max-steps) to end training after this step
        # what runs after each step and epoch, in order: the trainer's own hooks and the user's --callback
        self.hooks = callbacks.hooks(callbacks.load_callbacks(cfg.callback))

    @property
    def sharded(self) -> bool:
        """Whether checkpoints are FSDP sharded ones (every rank writes its shard)."""
        return self.cfg.strategy == "fsdp" and self.cfg.fsdp_state_dict == "sharded"

    # ----------------------------------------------------------------------------- setup
    def _wrap(self, raw: nn.Module) -> tuple[nn.Module, nn.Module]:
        """Returns (module whose parameters/state dict we save, module we call)."""
        cfg = self.cfg
        model: nn.Module = raw
        if cfg.strategy == "ddp" and self.ctx.is_distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(
                raw,
                device_ids=[self.device.index] if self.device.type == "cuda" else None,
                bucket_cap_mb=cfg.bucket_cap_mb,
                gradient_as_bucket_view=cfg.gradient_as_bucket_view,
                static_graph=cfg.static_graph,
                find_unused_parameters=cfg.find_unused_parameters,
            )
        elif cfg.strategy == "fsdp":
            from torch.distributed.fsdp import fully_shard

            # FULL_SHARD: parameters, gradients and optimizer state sharded; each top-level
            # block is its own unit so only one block's full parameters exist at a time.
            for child in raw.children():
                if any(p.requires_grad for p in child.parameters()):
                    fully_shard(child, reshard_after_forward=True)
            fully_shard(raw, reshard_after_forward=True)
            model = raw
        elif cfg.strategy == "dp":
            model = nn.DataParallel(raw) if torch.cuda.device_count() > 1 else raw
        if cfg.compile:
            model = torch.compile(model)  # type: ignore[assignment]  # typed as a callable; returns a Module
        return raw, model

    def _make_optimizer(self) -> torch.optim.Optimizer:
        params = [p for p in self.raw_model.parameters() if p.requires_grad]
        if self.cfg.optimizer == "adamw":
            return torch.optim.AdamW(params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        return torch.optim.SGD(params, lr=self.cfg.lr, momentum=self.cfg.momentum, weight_decay=self.cfg.weight_decay)

    def _make_scheduler(self) -> torch.optim.lr_scheduler.LRScheduler | None:
        total = self.steps_per_epoch * self.cfg.epochs
        if self.cfg.max_steps:
            total = min(total, self.cfg.max_steps)
        if self.cfg.scheduler == "cosine":
            return torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=max(total, 1))
        if self.cfg.scheduler == "step":
            return torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=max(total // 3, 1), gamma=0.1)
        return None

    # ----------------------------------------------------------------------------- data
    def _to_device(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.to(self.device, non_blocking=self.non_blocking)
        y = y.to(self.device, non_blocking=self.non_blocking)
        if self.data.normalize is not None:  # uint8 images: normalise the whole batch at once
            mean, std = (
                torch.tensor(v, device=self.device, dtype=self.dtype).view(1, -1, 1, 1) for v in self.data.normalize
            )
            x = (x.to(self.dtype) / 255.0 - mean) / std
        elif x.dtype != self.dtype:
            x = x.to(self.dtype)
        if self.cfg.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y

    # ----------------------------------------------------------------------------- loop
    @contextlib.contextmanager
    def _grad_sync(self, sync: bool) -> Iterator[None]:
        """Skip the gradient all-reduce on accumulation micro-steps (DDP ``no_sync``)."""
        if sync or not self.ctx.is_distributed:
            yield
            return
        if self.cfg.strategy == "ddp":
            wrapped = getattr(self.model, "_orig_mod", self.model)
            with wrapped.no_sync():  # type: ignore[operator]  # Module.__getattr__ hides DDP's methods
                yield
        elif self.cfg.strategy == "fsdp":
            self.raw_model.set_requires_gradient_sync(False)  # type: ignore[operator]  # an FSDP2 method
            try:
                yield
            finally:
                self.raw_model.set_requires_gradient_sync(True)  # type: ignore[operator]  # an FSDP2 method
        else:
            yield

    def _run_batch(self, x: torch.Tensor, y: torch.Tensor, sync: bool, group: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One micro-batch: forward, loss, backward. ``sync``: the last micro-batch of an
        accumulation group of ``group``, whose backward all-reduces the gradients (the others run
        under ``no_sync``; each loss is divided by ``group``, so the group's gradients add up to
        its mean). Returns the model's output and the loss."""
        self.beacon.mark(FORWARD)
        with self._grad_sync(sync):
            with self.autocast:
                out = self.model(x)
                loss = F.cross_entropy(out, y)
            self.beacon.mark(BACKWARD)
            (loss / group if group > 1 else loss).backward()
        return out, loss

    def _track(self, out: torch.Tensor, loss: torch.Tensor, y: torch.Tensor) -> None:
        """Add a micro-batch to the running loss sum, correct count and samples (``stats``), on the
        device: the logging hook reduces them across ranks every ``--log-every`` steps."""
        with torch.no_grad():
            n = y.shape[0]
            self.stats += torch.stack(
                [
                    loss.detach().double() * n,
                    (out.detach().argmax(1) == y).sum().double(),
                    torch.tensor(float(n), dtype=torch.float64, device=self.device),
                ]
            )

    def _optimizer_step(self) -> None:
        if self.cfg.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), self.cfg.clip_grad)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()
        self.step += 1

    def _run_epoch(self, epoch: int) -> None:
        """One epoch (the rest of one, when resuming mid-epoch): micro-batches in accumulation
        groups of ``--grad-accum``, an optimizer step at the end of each group, and after it the
        step hooks. Returns early when a hook ends training (``done``)."""
        accum, nb = self.cfg.grad_accum, self.batches_per_epoch
        sampler = self.data.train_sampler
        sampler.set_epoch(epoch)
        sampler.set_start(self.batches_done * self.batch)
        self.loader_generator.manual_seed(self.cfg.seed * 1_000_003 + epoch)
        self.stats = torch.zeros(3, dtype=torch.float64, device=self.device)
        i = self.batches_done
        self.progress.start_epoch(epoch, self.steps_per_epoch, i // accum)
        for hook in self.hooks:
            hook.on_epoch_start(self)
        try:
            for x, y in self.beacon.batches(self.data.train_loader):
                x, y = self._to_device(x, y)
                first = (i // accum) * accum  # the accumulation group's first micro-batch
                group = min(accum, nb - first)  # an epoch's last group may be shorter
                last = i == first + group - 1
                out, loss = self._run_batch(x, y, sync=last, group=group)
                self._track(out, loss, y)
                i += 1
                self.batches_done = i
                if not last:
                    continue
                self.beacon.mark(OPTIMIZER)
                self._optimizer_step()
                if i == nb:  # position: the start of the next epoch
                    self.batches_done = 0
                for hook in self.hooks:
                    hook.on_step_end(self)
                if self.done:
                    return
        finally:
            self.progress.end_epoch()
        self.batches_done = 0

    def fit(self) -> None:
        """Train from the current position to the end (or ``--max-steps``), checkpointing."""
        cfg = self.cfg
        self.metrics.emit(
            "start",
            world_size=self.ctx.world_size,
            strategy=cfg.strategy,
            backend=self.backend,
            model=cfg.model,
            dataset=cfg.dataset,
            batch_per_process=self.batch,
            global_batch=self.global_batch,
            steps_per_epoch=self.steps_per_epoch,
            epochs=cfg.epochs,
            restart=self.ctx.restart_count,
            launcher=self.ctx.launcher,
            resumed_step=self.step,
        )
        if self._already_complete():
            self.metrics.emit("done", step=self.step, epoch=self.epoch, elapsed_s=0.0, samples_per_s=0.0, steps=0)
            self.metrics.close()
            return
        if self.ctx.is_main:
            self.progress.line(
                f"world size {self.ctx.world_size} ({cfg.strategy}, {self.backend}, {self.device.type}), "
                f"batch {self.batch}/process = {self.global_batch} global, {self.steps_per_epoch} steps/epoch"
            )
        self.model.train()
        if self.backend == "nccl" and d.group_active():
            self._control_group = dist.new_group(backend="gloo")
        t0 = time.perf_counter()
        steps0 = self.step
        self.done = self.max_steps_reached()
        stop.defer(True)
        try:
            while self.epoch < cfg.epochs and not self.done:
                self._run_epoch(self.epoch)
                if self.batches_done == 0:  # the epoch ended (not cut short by --max-steps)
                    if self.data.eval_loader is not None:
                        self.evaluate()
                    self.epoch += 1
                    for hook in self.hooks:
                        hook.on_epoch_end(self)
        finally:
            stop.defer(False)
        elapsed = time.perf_counter() - t0
        self._save_now()  # the job's last checkpoint is stored before the process ends
        if cfg.save_final:
            self.save_final(cfg.save_final)
        steps_run = self.step - steps0
        rate = steps_run * self.global_batch / elapsed if elapsed > 0 else 0.0
        self.metrics.emit(
            "done", step=self.step, epoch=self.epoch, elapsed_s=elapsed, samples_per_s=rate, steps=steps_run
        )
        if self.ctx.is_main:
            self.progress.line(f"done: {self.step} steps, {rate:.1f} samples/s (global), {elapsed:.1f}s")
        self.metrics.close()

    # ----------------------------------------------------------------------------- position
    def step_in_epoch(self) -> int:
        """Optimizer steps of this epoch done (all of them once its last step is done)."""
        if self.batches_done == 0:
            return self.steps_per_epoch
        return math.ceil(self.batches_done / self.cfg.grad_accum)

    def max_steps_reached(self) -> bool:
        return bool(self.cfg.max_steps) and self.step >= self.cfg.max_steps

    def _already_complete(self) -> bool:
        """A resumed run whose checkpoint is already at the end: say so, train nothing."""
        if self._resumed_from is None or not (self.epoch >= self.cfg.epochs or self.max_steps_reached()):
            return False
        if self.ctx.is_main:
            self.progress.line(
                f"{ALREADY_COMPLETE} at step {self.step} (epoch {min(self.epoch, self.cfg.epochs)}/{self.cfg.epochs}), "
                f"checkpoint {self._resumed_from}; nothing to train (to start over: --resume never, "
                "or remove the checkpoints)"
            )
        return True

    # ----------------------------------------------------------------------------- stopping
    def stop_agreed(self) -> bool:
        """Whether any rank was asked to stop: called by every rank after the same step, so all
        of them stop after that step together (one 1-element all-reduce)."""
        local = stop.requested()
        if not d.group_active():
            return local
        device = torch.device("cpu") if self._control_group is not None else self.device
        flag = torch.tensor([1.0 if local else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._control_group)
        return bool(flag.item() > 0)

    def preempt(self) -> NoReturn:
        """Write a checkpoint of this step boundary (unless one exists) and stop every rank. The
        save in flight (if any) finishes first; a stop checkpoint that cannot be stored (the object
        store down) still stops the run, saying so: the next start resumes from the newest one."""
        failed: str | None = None
        try:
            self._save_now()
        except StoreError as exc:
            failed = str(exc)
        path = self.store.where(self.step, self.sharded)
        since = stop.seconds_since_signal()
        self.metrics.emit(
            "preempted",
            step=self.step,
            epoch=self.epoch,
            path=path,
            signal_to_durable_s=since,
            signalled=since is not None,
            saved=failed is None,
        )
        self.metrics.close()
        who = "SIGTERM" if stop.requested() else "SIGTERM to another rank"
        if failed is not None:
            raise Preempted(
                f"stopped by {who} after step {self.step}; its checkpoint could not be stored ({failed}), the next "
                "start resumes from the newest complete one"
            )
        raise Preempted(
            f"stopped by {who} after step {self.step}; checkpoint {path} written, the next start resumes there"
        )

    def _save_now(self) -> None:
        """Collective: the save in flight finishes; then, unless it stored this very step, this
        step's checkpoint is written now (also when the save in flight failed: it is tried again)."""
        self.writer.wait()
        failed = d.broadcast_object(self.writer.failed)  # rank 0's writer publishes
        if self.step != self._last_saved_step or failed:
            self.save_checkpoint(background=False)

    # ----------------------------------------------------------------------------- eval
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Loss and accuracy over the whole evaluation set, each sample counted exactly once."""
        assert self.data.eval_loader is not None
        # DDP needs no wrapper for a forward pass (every rank holds the same weights); FSDP does.
        model = self.raw_model if self.cfg.strategy == "ddp" else self.model
        model.eval()
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)
        for x, y, valid in self.beacon.batches(self.data.eval_loader, EVAL):
            x, y = self._to_device(x, y)
            valid = valid.to(self.device)
            with self.autocast:
                out = model(x)
            losses = F.cross_entropy(out.float(), y, reduction="none")
            totals[0] += (losses.double() * valid).sum()
            totals[1] += ((out.argmax(1) == y) & valid).sum()
            totals[2] += valid.sum()
        if d.group_active():
            dist.all_reduce(totals)
        model.train()
        loss_sum, correct, count = totals.tolist()
        result = {"loss": loss_sum / max(count, 1.0), "accuracy": correct / max(count, 1.0), "samples": int(count)}
        self.metrics.emit("eval", epoch=self.epoch, step=self.step, **result)
        self.progress.line(
            f"eval epoch {self.epoch + 1}/{self.cfg.epochs}: loss {result['loss']:.4f} "
            f"accuracy {result['accuracy']:.4f} ({result['samples']} samples)"
        )
        return result

    # ----------------------------------------------------------------------------- checkpoints
    def _position(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "step": self.step,
            "batches_done": self.batches_done,
            "samples_done": self.batches_done * self.batch * self.ctx.world_size,
            "world_size": self.ctx.world_size,
            "batch_per_process": self.batch,
            "grad_accum": self.cfg.grad_accum,
        }

    def save_checkpoint(self, background: bool = True) -> None:
        """Write a checkpoint of the current position (collective: every rank calls it). Rank 0
        copies the state and a background writer stores it, unless ``background`` is off: a stop
        checkpoint (and the last one) is stored before this returns (or every rank raises
        ``StoreError``). Whether it is decided by ``background`` alone, which every rank passes
        alike: a SIGTERM only this rank got must not make it run other collectives than the rest
        (the stop vote after this step waits for the save in flight, see ``_save_now``)."""
        self.beacon.mark(CHECKPOINT)
        rngs = d.all_gather_object(rng_state())
        payload: dict[str, Any] = {
            "format": ckpt.FORMAT,
            **self._position(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "rng": rngs,
            "config": self.cfg.to_dict(),
        }
        error: str | None = None
        if self.sharded:
            self._save_sharded(payload, background)
        else:
            payload["model"] = get_model_state_dict(self.raw_model, options=_FULL)
            payload["optimizer"] = get_optimizer_state_dict(self.raw_model, self.optimizer, options=_FULL)
            if self.ctx.is_main:
                if background:
                    copy = ckpt.snapshot(payload, copy=self.device.type == "cpu")
                    self.writer.submit(self.store.where(self.step, False), lambda: self._write(copy))
                else:
                    self.writer.wait()
                    try:
                        self._write(payload)
                        self.writer.failed = False
                    except StoreError as exc:  # every rank raises it (below), so all stop alike
                        error = str(exc)
            if not background:
                error = d.broadcast_object(error)
        self._last_saved_step = self.step
        d.barrier()
        if error is not None:
            raise StoreError(error)

    def _write(self, payload: dict[str, Any]) -> None:
        """Store one full checkpoint, then prune (on the writer's thread for a background save:
        the position comes from the payload, since training has moved on)."""
        step = payload["step"]

        def written(file: IO[bytes]) -> None:  # the hooks see the file before it is stored and published
            for hook in self.hooks:
                hook.on_checkpoint_write(self, step, file)

        where = self.store.save(payload, on_write=written)
        self._saved(where, step, payload["epoch"], sharded=False)

    def _saved(self, where: str, step: int, epoch: int, sharded: bool) -> None:
        """After a checkpoint is published: prune, and say once whether newer ones exist. The
        checkpoint stays saved if either fails (the object store went away meanwhile)."""
        try:
            removed = self.store.prune(self.cfg.keep_last, step, sharded)
        except StoreError as exc:
            warn(f"{where} is saved, but removing older checkpoints failed ({exc}); the next save tries again")
            removed = []
        if not self._checked_newer:  # once per process: later saves only add older-than-them files
            self._checked_newer = True
            try:
                self._warn_newer_checkpoints(step)
            except StoreError:
                self._checked_newer = False  # look again after the next save
        self.metrics.emit("checkpoint", step=step, epoch=epoch, path=where, removed=removed)

    def _warn_newer_checkpoints(self, step: int) -> None:
        """Loadable checkpoints past this run's step (another run's, e.g. after ``--resume never``)
        are kept, not pruned, but a later ``--resume auto`` would pick them: say so once."""
        newer = self.store.newer_than(step)
        if newer:
            warn(
                f"{self.store.location} holds {len(newer)} checkpoint(s) past step {step} from another run "
                f"(newest {newer[0]}); they are kept, and --resume auto would pick them over this run's"
            )

    def _save_sharded(self, payload: dict[str, Any], background: bool) -> None:
        """Every rank saves its own shard (``torch.distributed.checkpoint``, no gather to rank 0)
        where the store says; the store then publishes it: a shared directory renamed into place
        (now), or each rank's files uploaded (on its writer thread, unless ``background`` is off)
        and published by rank 0."""
        import torch.distributed.checkpoint as dcp

        self.writer.wait()
        step, epoch = self.step, self.epoch
        save = self.store.begin_sharded(step, self.ctx)
        state = {
            "model": get_model_state_dict(self.raw_model),
            "optimizer": get_optimizer_state_dict(self.raw_model, self.optimizer),
        }
        try:
            try:
                dcp.save(state, checkpoint_id=str(save.dir))
            except CheckpointException as exc:  # a BaseException: any rank's failure, on every rank
                raise _dcp_failure(f"saving the sharded checkpoint {save.where}", exc) from None
            if self.ctx.is_main:
                save.write_state(payload)
        except BaseException:
            save.abandon()
            raise
        if background and save.background:
            self.writer.submit(save.where, lambda: self._commit_sharded(save, step, epoch))
            return
        error: str | None = None
        try:
            self._commit_sharded(save, step, epoch)
            self.writer.failed = False  # as after a full checkpoint stored in the foreground
        except CheckpointError as exc:
            if not save.background:  # a shared directory: as it always did, the error ends the run
                raise
            error = str(exc)
        if save.background:  # every rank learns whether all stored theirs, so all go on (or stop) alike
            errors = [e for e in d.all_gather_object(error) if e]
            if errors:
                raise StoreError(errors[0])

    def _commit_sharded(self, save: ShardedSave, step: int, epoch: int) -> None:
        where = save.commit()
        if where is not None:
            self._saved(where, step, epoch, sharded=True)

    def resume(self) -> None:
        """Load the newest valid checkpoint (rank 0 reads it; every rank gets it by broadcast).

        The checkpoint directory need not be shared between nodes for full checkpoints: only
        rank 0's copy is read.
        """
        cfg = self.cfg
        if cfg.resume == "never":
            return
        msg: tuple[Any, ...] = ("none",)
        if self.ctx.is_main:
            try:
                if cfg.resume == "auto":
                    self.store.remove_stale()
                    found = self.store.find_latest(warn)
                    if found is not None:
                        msg = ("ok", found[0], found[1])
                else:
                    path = Path(cfg.resume)
                    if not path.exists():
                        raise CheckpointError(f"--resume {path}: no such file")
                    msg = ("ok", str(path), ckpt.load_file(path))
            except TrainerError as exc:
                msg = ("error", str(exc))
        msg = d.broadcast_object(msg)
        if msg[0] == "error":
            raise CheckpointError(msg[1] if self.ctx.is_main else f"rank 0 could not load a checkpoint: {msg[1]}")
        if msg[0] == "none":
            return
        _, path, payload = msg
        try:
            self._load(payload, path)
        except TrainerError:
            raise
        except (RuntimeError, KeyError, ValueError, TypeError) as exc:
            if is_peer_lost(exc, after_setup=True):  # loading a sharded checkpoint runs collectives
                raise
            raise CheckpointError(
                f"checkpoint {path} does not fit this run (--model {cfg.model}, --strategy {cfg.strategy}): "
                f"{str(exc)[:300]}"
            ) from None
        self.metrics.emit("resume", path=path, step=self.step, epoch=self.epoch, batches_done=self.batches_done)
        self._resumed_from = path
        finished = self.epoch >= cfg.epochs or self.max_steps_reached()
        if self.ctx.is_main and not finished:  # a finished run says so in fit()
            self.progress.line(f"resumed from {path} (epoch {self.epoch + 1}, step {self.step})")

    def _load(self, payload: dict[str, Any], path: str) -> None:
        if payload.get("sharded"):
            import torch.distributed.checkpoint as dcp

            if self.cfg.strategy != "fsdp":
                raise CheckpointError("a sharded checkpoint resumes only with --strategy fsdp")
            state: dict[str, Any] = {
                "model": get_model_state_dict(self.raw_model),
                "optimizer": get_optimizer_state_dict(self.raw_model, self.optimizer),
            }
            if "sharded_dir" in payload:  # a local directory (also --resume PATH under an object store)
                reader: Any = dcp.FileSystemReader(payload["sharded_dir"])
            else:  # in the object store: each rank downloads the files it reads
                reader = self.store.sharded_reader(payload)
            try:
                dcp.load(state, storage_reader=reader)
            except CheckpointException as exc:  # a BaseException: any rank's failure, on every rank
                raise _dcp_failure(f"loading checkpoint {path}", exc) from None
            set_model_state_dict(self.raw_model, state["model"])
            set_optimizer_state_dict(self.raw_model, self.optimizer, state["optimizer"])
        else:
            full = StateDictOptions(full_state_dict=True)
            set_model_state_dict(self.raw_model, payload["model"], options=full)
            set_optimizer_state_dict(self.raw_model, self.optimizer, payload["optimizer"], options=full)
        if self.scheduler is not None and payload.get("scheduler"):
            self.scheduler.load_state_dict(payload["scheduler"])
        self.epoch = int(payload["epoch"])
        self.step = int(payload["step"])
        self._last_saved_step = self.step
        per_step = self.batch * self.ctx.world_size
        samples = int(payload.get("samples_done", payload["batches_done"] * per_step))
        if samples % (per_step * self.cfg.grad_accum):
            warn(
                f"the checkpoint stopped {samples} samples into epoch {self.epoch + 1}, which is not a whole "
                "number of this run's global batches; resuming at the nearest batch before it"
            )
        self.batches_done = (samples // (per_step * self.cfg.grad_accum)) * self.cfg.grad_accum
        rngs = payload.get("rng") or []
        if rngs:
            if len(rngs) != self.ctx.world_size and self.ctx.is_main:
                warn(f"the checkpoint has RNG states of {len(rngs)} ranks, this run has {self.ctx.world_size}")
            set_rng_state(rngs[self.ctx.rank % len(rngs)])

    def save_final(self, template: str) -> None:
        """Final full weights: ``{rank}`` in the path makes every rank write its own copy."""
        per_rank = "{rank}" in template
        options = StateDictOptions(full_state_dict=True, cpu_offload=not per_rank)
        state = get_model_state_dict(self.raw_model, options=options)
        if per_rank or self.ctx.is_main:
            tensors = cast(dict[str, torch.Tensor], state)  # a module's state dict holds tensors only
            state = {k: v.detach().cpu() for k, v in tensors.items()}
            ckpt.atomic_save({"model": state, "step": self.step}, Path(template.replace("{rank}", str(self.ctx.rank))))
        d.barrier()


def _dcp_failure(what: str, exc: CheckpointException) -> BaseException:
    """What to raise for a failure ``torch.distributed.checkpoint`` wrapped (it gathers every
    rank's and raises them on all, as a ``BaseException`` no ``except Exception`` sees): a second
    SIGTERM (``Terminated``) or Ctrl-C, a ``TrainerError`` (e.g. the object store's ``StoreError``)
    or a lost peer as it is, anything else as one ``CheckpointError`` line with its type and
    scrubbed message."""
    failures: list[tuple[int, BaseException]] = [(rank, f) for rank, (f, _) in sorted(exc.failures.items())]
    for _, failure in failures:
        if not isinstance(failure, Exception):
            return failure.with_traceback(None)
    for _, failure in failures:
        if isinstance(failure, Exception) and (
            isinstance(failure, TrainerError) or is_peer_lost(failure, after_setup=True)
        ):
            return failure.with_traceback(None)
    rank, first = failures[0] if failures else (0, exc)
    text = scrub(str(first))
    if len(text) > 300:
        text = text[:297] + "..."
    return CheckpointError(f"{what} failed on rank {rank} ({type(first).__name__}: {text})")


def run_trainer(cfg: TrainConfig, ctx: DistContext, device: torch.device, backend: str) -> None:
    """Build, resume and train; a setup failure on one rank stops all ranks with one message.

    The process group exists when this is called (the network worked), so from here on a
    collective that fails because a peer went away is reported as ``PeerLost`` (exit 138): this
    also covers a peer preempted or killed while the others build the model or download data."""
    trainer: Trainer | None = None
    trained_from = False  # True once resume() has set the step training continues from
    try:
        trainer = _build(cfg, ctx, device, backend)
        watch = watchdog.start(trainer.beacon, cfg.stall_timeout, ctx)
        try:
            trainer.resume()
            trainer.beacon.step = trainer.step
            trained_from = True
            trainer.fit()
        finally:
            if watch is not None:
                watch.stop()
    except Exception as exc:
        if is_peer_lost(exc, after_setup=d.group_active()):
            raise peer_lost(exc, trainer.step if trainer is not None and trained_from else None) from exc
        raise


def _build(cfg: TrainConfig, ctx: DistContext, device: torch.device, backend: str) -> Trainer:
    """The ``Trainer``, once every rank has built its own: a ``TrainerError`` on any rank stops all."""
    trainer: Trainer | None = None
    error: TrainerError | None = None
    try:
        trainer = Trainer(cfg, ctx, device, backend)
    except TrainerError as exc:
        error = exc
    if d.group_active():
        flag = torch.tensor([0.0 if error else 1.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if error is None and flag.item() < 1:
            raise TrainerFailure("another rank failed while setting up (see its error line); stopping")
    if error is not None:
        raise error
    assert trainer is not None
    return trainer


__all__ = ["Trainer", "TrainerFailure", "run_trainer"]
