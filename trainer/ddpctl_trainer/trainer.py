"""The ``Trainer``: train the parts it is given, evaluate exactly, stop at step boundaries.

It reads like PyTorch's DDP tutorial (multi-GPU training with DDP): ``dist.setup``/``teardown``
around it (main.py); the parts made first (``build.py``: the data, the model on the local rank's
device, wrapped, and the optimizer made *after* wrapping), then ``Trainer(model, data, optimizer,
...)``; ``_run_batch`` trains one micro-batch, ``_run_epoch`` loops over an epoch's batches
(``sampler.set_epoch`` first) and steps the optimizer after each accumulation group, ``fit`` loops
over the epochs. The global rank decides who writes (rank 0), the local rank which device.

What runs after each optimizer step and epoch (the watchdog's heartbeat, metrics and progress,
the save cadence, ``--max-steps``, the stop vote, and the user's ``--callback``s) is a list of step
hooks in a fixed order, each given a ``TrainerView`` (callbacks.py). Saving and resuming are the
``Checkpointer``'s (checkpointer.py): the trainer asks it, at the moments the loop decides.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any, NoReturn

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from . import dist as d
from . import recovery, stop, watchdog
from .build import build, param_dtype, steps_per_epoch, total_steps, unwrap, wrap
from .callbacks import (
    Callback,
    FirstStepMetric,
    Heartbeat,
    MaxSteps,
    ProgressLog,
    SaveCadence,
    StopVote,
    StragglerWatch,
    TrainerView,
    load_callbacks,
)
from .checkpointer import Checkpointer, Position
from .config import TrainConfig, straggler_config
from .data import DataBundle
from .dist import DistContext
from .errors import (
    Left,
    PeersLeft,
    Preempted,
    StoreError,
    Straggling,
    Terminated,
    TrainerFailure,
    failure_reason,
    is_peer_lost,
    peer_lost,
)
from .metrics import Meter, MetricsLog, Progress
from .protocol import LEFT_ALONE, RECOVERY_TAG, STOPPED_BY_SIGTERM, rank_prefix, recovery_nodes_text
from .stragglers import Stragglers
from .watchdog import BACKWARD, CHECKPOINT, EVAL, FORWARD, OPTIMIZER, Beacon


class Trainer:
    """Trains ``model`` (wrapped) on ``data`` with ``optimizer`` (made after wrapping), and owns
    the training position (epoch, step, micro-batches of the epoch done)."""

    def __init__(
        self,
        model: nn.Module,
        data: DataBundle,
        optimizer: torch.optim.Optimizer,
        checkpointer: Checkpointer,
        cfg: TrainConfig,
        ctx: DistContext,
        device: torch.device,
        *,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        callbacks: Sequence[Callback] = (),
        metrics: MetricsLog,
        progress: Progress,
        backend: str = "gloo",
    ) -> None:
        self.model = model
        self.module = unwrap(model)  # the model inside DDP (``.module``), DataParallel or compile
        self.data = data
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.checkpointer = checkpointer
        self.cfg, self.ctx, self.device, self.backend = cfg, ctx, device, backend
        self.metrics, self.progress = metrics, progress

        self.dtype = param_dtype(cfg)
        self.batch = cfg.per_process_batch(ctx.world_size)
        self.global_batch = self.batch * ctx.world_size * cfg.grad_accum
        self.non_blocking = data.train_loader.pin_memory and device.type == "cuda"
        self.batches_per_epoch = data.batches_per_epoch
        self.steps_per_epoch = steps_per_epoch(data, cfg.grad_accum)
        self.total_steps = total_steps(cfg, self.steps_per_epoch)
        self.autocast = (
            torch.autocast(device_type=device.type, dtype=torch.bfloat16) if cfg.bf16 else contextlib.nullcontext()
        )

        self.epoch = 0
        self.step = 0
        self.batches_done = 0  # micro-batches of self.epoch already trained (this rank)
        # Pod recovery: the position after the last optimizer step and the RNG state there, what
        # this rank hands a replacement (or goes back to) when the group forms again
        self.membership = recovery.current()
        self.committed = Position()
        self._committed_rng = torch.get_rng_state()
        self.done = False  # set by a step hook (--max-steps, a callback's request) to end training after this step
        self.save_requested = False  # set by a callback: a checkpoint of this step
        # The stop flag's all-reduce runs on a CPU (gloo) group: with nccl it would otherwise make
        # the host wait for the GPU once per step. Created in fit(), where every rank arrives.
        self._control_group: Any = None
        self._partial_votes = 0  # pod recovery: consecutive votes where some ranks, not all, were asked to stop
        self.beacon = Beacon()  # where this rank is, for the stall watchdog (trainer/ddpctl_trainer/watchdog.py)
        self.meter = Meter(device)  # loss sum, correct, samples since the last report (this rank)
        self.view = TrainerView(self)  # what every step hook is given
        # each step's own work, judged across the ranks (DDP's comm hook stamps its gradients'
        # readiness); off, said once by rank 0, where a rank's own work cannot be timed (FSDP)
        self.stragglers = Stragglers(
            model,
            straggler_config(cfg),
            device_type=device.type,
            echo=progress.note,
        )
        # what runs after each step and epoch, in order: the trainer's own hooks and the user's --callback
        self.hooks: list[Callback] = [
            Heartbeat(self.beacon),
            FirstStepMetric(time.time()),
            ProgressLog(self.meter, progress),
            *callbacks,
            SaveCadence(self.save_checkpoint),
            MaxSteps(),
            StopVote(self.stop_agreed, self.preempt),
            StragglerWatch(self.stragglers, self.stop_for_straggler, self.replace_straggler),
        ]

    @classmethod
    def from_config(cls, cfg: TrainConfig, ctx: DistContext, device: torch.device, backend: str) -> Trainer:
        """A Trainer with every part made from the flags: the data, model and optimizer by the
        factory (``build``), its checkpointer (and the store it opens), the user's callbacks."""
        parts = build(cfg, ctx, device)
        metrics = MetricsLog(cfg.metrics_file, ctx.is_main)
        progress = Progress(cfg.progress, ctx.rank, cfg.epochs)
        checkpointer = Checkpointer(
            cfg,
            ctx,
            device,
            unwrap(parts.model),
            parts.optimizer,
            parts.scheduler,
            metrics=metrics,
            progress=progress,
        )
        return cls(
            parts.model,
            parts.data,
            parts.optimizer,
            checkpointer,
            cfg,
            ctx,
            device,
            scheduler=parts.scheduler,
            callbacks=load_callbacks(cfg.callback),
            metrics=metrics,
            progress=progress,
            backend=backend,
        )

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
            self.module.set_requires_gradient_sync(False)  # type: ignore[operator]  # an FSDP2 method
            try:
                yield
            finally:
                self.module.set_requires_gradient_sync(True)  # type: ignore[operator]  # an FSDP2 method
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

    def _optimizer_step(self) -> None:
        if self.cfg.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.cfg.clip_grad)
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
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
        sampler.set_start(self.batches_done * self.batch)
        self.data.generator.manual_seed(self.cfg.seed * 1_000_003 + epoch)
        self.meter.reset()
        i = self.batches_done
        self.progress.start_epoch(epoch, self.steps_per_epoch, i // accum)
        for hook in self.hooks:
            hook.on_epoch_start(self.view)
        try:
            for x, y in self.beacon.batches(self.data.train_loader):
                x, y = self._to_device(x, y)
                first = (i // accum) * accum  # the accumulation group's first micro-batch
                group = min(accum, nb - first)  # an epoch's last group may be shorter
                last = i == first + group - 1
                out, loss = self._run_batch(x, y, sync=last, group=group)
                self.meter.add(out, loss, y)
                i += 1
                self.batches_done = i
                if not last:
                    continue
                self.beacon.mark(OPTIMIZER)
                self._optimizer_step()
                if i == nb:  # position: the start of the next epoch
                    self.batches_done = 0
                if self.membership is not None:
                    self._commit(epoch + 1 if i == nb else epoch)
                for hook in self.hooks:
                    hook.on_step_end(self.view)
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
        if self.checkpointer.already_complete(self.position):
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
            self.stragglers.group = self._control_group  # its gather runs on CPU tensors
        t0 = time.perf_counter()
        steps0 = self.step
        self.done = self.max_steps_reached()
        stop.defer(True)
        try:
            while self.epoch < cfg.epochs and not self.done:
                try:
                    self._run_epoch(self.epoch)
                    if self.batches_done == 0:  # the epoch ended (not cut short by --max-steps)
                        if self.data.eval_loader is not None:
                            self.evaluate()
                        self.epoch += 1
                        for hook in self.hooks:
                            hook.on_epoch_end(self.view)
                except Exception as exc:
                    if self.membership is None or not (isinstance(exc, PeersLeft) or is_peer_lost(exc, True)):
                        raise
                    self._recover(exc)
        finally:
            stop.defer(False)
        elapsed = time.perf_counter() - t0
        self._save_now()  # the job's last checkpoint is stored before the process ends
        if cfg.save_final:
            self.checkpointer.save_final(cfg.save_final, self.step)
        steps_run = self.step - steps0
        rate = steps_run * self.global_batch / elapsed if elapsed > 0 else 0.0
        self.metrics.emit(
            "done", step=self.step, epoch=self.epoch, elapsed_s=elapsed, samples_per_s=rate, steps=steps_run
        )
        if self.ctx.is_main:
            self.progress.line(f"done: {self.step} steps, {rate:.1f} samples/s (global), {elapsed:.1f}s")
        self.metrics.close()

    # ----------------------------------------------------------------------------- position
    @property
    def position(self) -> Position:
        return Position(self.epoch, self.step, self.batches_done)

    def step_in_epoch(self) -> int:
        """Optimizer steps of this epoch done (all of them once its last step is done)."""
        if self.batches_done == 0:
            return self.steps_per_epoch
        return math.ceil(self.batches_done / self.cfg.grad_accum)

    def max_steps_reached(self) -> bool:
        return bool(self.cfg.max_steps) and self.step >= self.cfg.max_steps

    # ----------------------------------------------------------------------------- pod recovery
    def _commit(self, epoch: int) -> None:
        """After an optimizer step: the position a recovery goes back to (``epoch``: the next one
        when this step ended it), and this rank's RNG state there."""
        self.committed = Position(epoch, self.step, self.batches_done)
        self._committed_rng = torch.get_rng_state()

    def _recover(self, exc: BaseException) -> None:
        """A peer was lost: form the next generation of the group with its replacement, take the
        state of the rank furthest along, and train on from its position (nothing is lost)."""
        assert self.membership is not None
        t0 = time.monotonic()
        print(
            f"{rank_prefix(self.ctx.rank)}lost a peer after step {self.committed.step} ({failure_reason(exc)}); "
            "waiting for its replacement",
            flush=True,
        )
        with watchdog.waiting_for_a_replacement():
            stop.defer(False)  # waiting for a peer, nothing to save: a SIGTERM (the job failed or deleted) ends it now
            try:
                if stop.requested():
                    raise Terminated()
                self.membership.rejoin()
            finally:
                stop.defer(True)
            self.model = wrap(self.module, self.cfg, self.ctx, self.device)  # DDP over the new group
            self.stragglers.rearm(self.model)
            joined = self.handoff()
        self.metrics.emit(
            "recovered", step=self.step, generation=self.membership.generation, seconds=time.monotonic() - t0
        )
        if self.ctx.is_main:
            self.progress.note(
                f"{RECOVERY_TAG}the group formed again (generation {self.membership.generation}, "
                f"{recovery_nodes_text(joined)} joined), going on at step {self.step} after "
                f"{time.monotonic() - t0:.1f}s"
            )

    def handoff(self) -> list[int]:
        """Collective, once the group formed again: every rank takes the model, optimizer,
        scheduler and position of the rank furthest along among the survivors
        (``recovery.source_rank``); survivors go back to their own RNG state of that step, a
        replacement takes the source's. With no survivor (every rank lost at once) every rank
        resumes from the newest checkpoint instead. Returns the node ranks of the replacements."""
        rejoined = self.membership is not None and self.membership.rejoined
        seen = d.all_gather_object((self.committed.step, rejoined, self.ctx.node_rank))
        joined = sorted({node for _, was_lost, node in seen if was_lost})
        if all(was_lost for _, was_lost, _ in seen):  # no survivor holds the state: the checkpoint does
            self.resume()
            self._commit(self.epoch)
            return joined
        source = recovery.source_rank([step if not was_lost else -1 for step, was_lost, _ in seen])
        mine = self.ctx.rank == source
        sent = d.broadcast_object(self._memory_state() if mine else None, source)
        assert sent is not None  # the source sent its state
        state: dict[str, Any] = sent
        if not mine:
            self.module.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            if self.scheduler is not None and state["scheduler"] is not None:
                self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"] if rejoined else self._committed_rng)
        self.optimizer.zero_grad(set_to_none=True)  # a step cut short left its gradients
        self.committed = state["position"]
        self.epoch, self.step, self.batches_done = (
            self.committed.epoch,
            self.committed.step,
            self.committed.batches_done,
        )
        self.beacon.step = self.step
        self.done = self.max_steps_reached()
        return joined

    def _memory_state(self) -> dict[str, Any]:
        scheduler = self.scheduler.state_dict() if self.scheduler is not None else None
        return {"position": self.committed, "model": self.module.state_dict(), "scheduler": scheduler,
                "optimizer": self.optimizer.state_dict(), "rng": self._committed_rng}  # fmt: skip

    # ----------------------------------------------------------------------------- checkpoints
    def resume(self) -> None:
        """Collective: continue from the newest checkpoint, if the checkpointer finds one."""
        at = self.checkpointer.resume()
        if at is not None:
            self.epoch, self.step, self.batches_done = at.epoch, at.step, at.batches_done

    def save_checkpoint(self, background: bool = True) -> None:
        """Collective: a checkpoint of this position (see ``Checkpointer.save``); the step hooks'
        ``on_checkpoint_write`` see a full one's file before it is stored."""
        self.beacon.mark(CHECKPOINT)
        self.save_requested = False
        self.checkpointer.save(self.position, background, on_write=self._checkpoint_written)

    def _checkpoint_written(self, step: int, file: IO[bytes]) -> None:
        for hook in self.hooks:
            hook.on_checkpoint_write(self.view, step, file)

    def _save_now(self) -> None:
        """Collective: the save in flight finishes; then, unless it stored this very step, this
        step's checkpoint is written now (also when the save in flight failed: it is tried again)."""
        if self.checkpointer.unsaved(self.step):
            self.save_checkpoint(background=False)

    # ----------------------------------------------------------------------------- stopping
    def stop_agreed(self) -> bool:
        """Whether every rank stops after this step (``stop.decision``): called by every rank after
        the same step (one small all-reduce, carrying a straggler window's figures at its end).
        Under pod recovery, ranks asked alone leave and the others recover: neither returns."""
        local = stop.requested()
        if not d.group_active():
            return local
        device = torch.device("cpu") if self._control_group is not None else self.device
        riders = self.stragglers.riders(self.step)  # a window's figures, one slot per rank (MAX keeps each)
        # MAX of the flag: any rank asked; MAX of its negation: minus "every rank asked"
        flag = torch.tensor([float(local), -float(local), *(riders or ())], device=device, dtype=torch.float64)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._control_group)
        if riders is not None:
            self.stragglers.receive(self.step, flag[2:].tolist())
        anyone, everyone = bool(flag[0].item() > 0), bool(flag[1].item() < 0)
        self._partial_votes = self._partial_votes + 1 if anyone and not everyone else 0
        decision = stop.decision(anyone, everyone, self.membership is not None, self._partial_votes)
        if decision == "leave":
            self._partial_votes = 0
            if local:
                self.leave()
            raise PeersLeft(f"a peer left after step {self.step} (SIGTERM to its pod)")
        return decision == "stop"

    def leave(self) -> NoReturn:
        """Pod recovery: asked alone to stop, this rank leaves, writing nothing (the others hold its state)."""
        self.metrics.emit("left", step=self.step, epoch=self.epoch)
        self.metrics.close()
        raise Left(
            f"{STOPPED_BY_SIGTERM} after step {self.step}; {LEFT_ALONE} and hand its replacement their state "
            "(recovery: pod)"
        )

    def preempt(self) -> NoReturn:
        """Write a checkpoint of this step boundary (unless one exists) and stop every rank. The
        save in flight (if any) finishes first; a stop checkpoint that cannot be stored (the object
        store down) still stops the run, saying so: the next start resumes from the newest one."""
        failed: str | None = None
        try:
            self._save_now()
        except StoreError as exc:
            failed = str(exc)
        path = self.checkpointer.where(self.step)
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
        who = STOPPED_BY_SIGTERM if stop.requested() else f"{STOPPED_BY_SIGTERM} to another rank"
        if failed is not None:
            raise Preempted(
                f"{who} after step {self.step}; its checkpoint could not be stored ({failed}), the next "
                "start resumes from the newest complete one"
            )
        raise Preempted(f"{who} after step {self.step}; checkpoint {path} written, the next start resumes there")

    def stop_for_straggler(self, message: str) -> NoReturn:
        """``--stragglers fail``: every rank stops after this step, with a checkpoint of it (the
        resubmit that avoids the node resumes there)."""
        self._save_now()
        self.metrics.emit("straggler", step=self.step, epoch=self.epoch, message=message)
        self.metrics.close()
        raise Straggling(message)

    def replace_straggler(self, node: int, message: str) -> NoReturn:
        """``--stragglers replace``: the named node's ranks leave alone, the others recover."""
        if self.ctx.node_rank == node:
            self.metrics.emit("straggler", step=self.step, epoch=self.epoch, message=message, replaced=True)
            self.metrics.close()
            raise Left(message)
        raise PeersLeft(f"node {node}, a straggler, left after step {self.step} to be replaced")

    # ----------------------------------------------------------------------------- eval
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Loss and accuracy over the whole evaluation set, each sample counted exactly once."""
        assert self.data.eval_loader is not None
        # DDP needs no wrapper for a forward pass (every rank holds the same weights); FSDP does.
        model = self.module if self.cfg.strategy == "ddp" else self.model
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


def run_trainer(cfg: TrainConfig, ctx: DistContext, device: torch.device, backend: str) -> None:
    """Build, resume and train; a setup failure on one rank stops all ranks with one message.

    The process group exists when this is called (the network worked), so from here on a
    collective that fails because a peer went away is reported as ``PeerLost`` (exit 138): this
    also covers a peer preempted or killed while the others build the model or download data."""
    trainer: Trainer | None = None
    trained_from = False  # True once resume() has set the step training continues from
    try:
        trainer = d.on_every_rank(lambda: Trainer.from_config(cfg, ctx, device, backend), device)
        watch = watchdog.start(trainer.beacon, cfg.stall_timeout, ctx)
        try:
            membership = recovery.current()
            if membership is not None and membership.solo:  # a replacement: the others hold the state
                membership.solo = False
                trainer.handoff()
                trainer.metrics.emit("rejoined", step=trainer.step, generation=membership.generation)
                print(
                    f"{rank_prefix(ctx.rank)}{RECOVERY_TAG}replaced a lost process: joined the running job at step "
                    f"{trainer.step} (generation {membership.generation})",
                    flush=True,
                )
            else:
                trainer.resume()
                trainer._commit(trainer.epoch)  # where a recovery before the next step goes back to
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


__all__ = ["Trainer", "TrainerFailure", "run_trainer"]
