"""A run's checkpoints: the ``Checkpointer`` saves, prunes and resumes; the trainer only asks it.

Where checkpoints live is the store's business (``store.open_store``: a directory or an object
store URL), how a file is written atomically ``checkpoint.py``'s. The checkpointer decides what a
checkpoint holds and when it is stored:

* **Full** (``ddp``, ``dp``, ``fsdp`` with ``--fsdp-state-dict full``): every rank takes part in
  gathering the model's and optimizer's state with the ``torch.distributed.checkpoint.state_dict``
  helpers (which fit every wrapper, so a checkpoint written under ``ddp`` resumes under ``fsdp`` and
  the other way round), rank 0 alone copies it off the device and a background writer
  (``checkpoint.Writer``) stores it, one save at a time: the step loop never waits for storage.
* **Sharded** (``--fsdp-state-dict sharded``): every rank saves its own shard with
  ``torch.distributed.checkpoint``, no gather to rank 0; the store publishes it.
* **Now** (``background=False``): the stop checkpoint and the last one are stored before the rank
  goes on, and a failure to store them raises on every rank alike.

Besides the weights a checkpoint holds the loop's ``Position`` (epoch, step, micro-batches of the
epoch done, as samples), the scheduler, every rank's RNG states and the flags, all as tensors and
plain values: everything loads with ``weights_only=True``. ``resume`` loads the newest complete
checkpoint (rank 0 reads it, every rank gets it by broadcast), so a resumed run ends bit-identical
to one that never stopped; ``already_complete`` tells a rerun of a finished job to train nothing.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import torch
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from . import checkpoint as ckpt
from . import dist as d
from .config import TrainConfig
from .dist import DistContext
from .errors import CheckpointError, StoreError, TrainerError, is_peer_lost, scrub
from .metrics import MetricsLog, Progress
from .protocol import ALREADY_COMPLETE, WARNING_TAG
from .store import CheckpointStore, ShardedSave, open_store

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)

OnWrite = Callable[[int, IO[bytes]], None]  # (step, the file with the state in it) before it is stored


def warn(message: str) -> None:
    print(f"{WARNING_TAG}{message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Position:
    """Where the training loop is: what a checkpoint records, and what a resume restores."""

    epoch: int = 0  # epochs done: the one in progress, counting from 0
    step: int = 0  # optimizer steps done
    batches_done: int = 0  # micro-batches of ``epoch`` done (this rank); 0 at an epoch's start


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


class Checkpointer:
    """Saves and restores ``module`` (the model inside its wrappers, see ``build.unwrap``), the
    optimizer and the scheduler with the loop's position, in the store ``--checkpoint-dir`` names.
    Every method that runs a collective says so: every rank calls it, in the same order."""

    def __init__(
        self,
        cfg: TrainConfig,
        ctx: DistContext,
        device: torch.device,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None,
        *,
        metrics: MetricsLog,
        progress: Progress,
        store: CheckpointStore | None = None,
    ) -> None:
        self.cfg, self.ctx, self.device = cfg, ctx, device
        self.module, self.optimizer, self.scheduler = module, optimizer, scheduler
        self.metrics, self.progress = metrics, progress
        self.batch = cfg.per_process_batch(ctx.world_size)
        # a local directory or an object store URL; only rank 0 reads and writes full checkpoints
        self.store = store if store is not None else open_store(cfg.checkpoint_dir, warn, timeout_s=cfg.timeout_s)
        self.writer = ckpt.Writer(warn)
        self.resumed_from: str | None = None  # the checkpoint this run started from
        self._last_saved_step = -1
        self._checked_newer = False

    @property
    def sharded(self) -> bool:
        """Whether checkpoints are FSDP sharded ones (every rank writes its shard)."""
        return self.cfg.strategy == "fsdp" and self.cfg.fsdp_state_dict == "sharded"

    def where(self, step: int) -> str:
        """The checkpoint of ``step``, as messages and metrics name it."""
        return self.store.where(step, self.sharded)

    def wait(self) -> None:
        """Until the checkpoint being stored in the background (if any) is stored, or failed."""
        self.writer.wait()

    # ----------------------------------------------------------------------------- saving
    def save(self, at: Position, background: bool = True, on_write: OnWrite | None = None) -> None:
        """Write a checkpoint of ``at`` (collective: every rank calls it). Rank 0 copies the state
        and the background writer stores it, unless ``background`` is off: then it is stored before
        this returns (or every rank raises ``StoreError``). Which of the two is decided by
        ``background`` alone, which every rank passes alike: a SIGTERM only this rank got must not
        make it run other collectives than the rest (the stop vote after the step waits for the
        save in flight, see ``unsaved``). ``on_write`` sees a full checkpoint's file before it is
        stored (on the writer's thread for a background save)."""
        rngs = d.all_gather_object(rng_state())
        payload: dict[str, Any] = {
            "format": ckpt.FORMAT,
            **self._position_fields(at),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "rng": rngs,
            "config": self.cfg.to_dict(),
        }
        error: str | None = None
        if self.sharded:
            self._save_sharded(payload, at, background)
        else:
            payload["model"] = get_model_state_dict(self.module, options=_FULL)
            payload["optimizer"] = get_optimizer_state_dict(self.module, self.optimizer, options=_FULL)
            if self.ctx.is_main:  # rank 0 writes
                if background:
                    copy = ckpt.snapshot(payload, copy=self.device.type == "cpu")
                    self.writer.submit(self.store.where(at.step, False), lambda: self._write(copy, on_write))
                else:
                    self.writer.wait()
                    try:
                        self._write(payload, on_write)
                        self.writer.failed = False
                    except StoreError as exc:  # every rank raises it (below), so all stop alike
                        error = str(exc)
            if not background:
                error = d.broadcast_object(error)
        self._last_saved_step = at.step
        d.barrier()
        if error is not None:
            raise StoreError(error)

    def unsaved(self, step: int) -> bool:
        """Collective: whether ``step`` still needs a checkpoint, once the save in flight has
        finished: unless that one stored this very step (and rank 0's writer, which publishes, did
        not fail: a failed save is tried again)."""
        self.writer.wait()
        failed = d.broadcast_object(self.writer.failed)
        return step != self._last_saved_step or failed

    def _position_fields(self, at: Position) -> dict[str, Any]:
        return {
            "epoch": at.epoch,
            "step": at.step,
            "batches_done": at.batches_done,
            "samples_done": at.batches_done * self.batch * self.ctx.world_size,
            "world_size": self.ctx.world_size,
            "batch_per_process": self.batch,
            "grad_accum": self.cfg.grad_accum,
        }

    def _write(self, payload: dict[str, Any], on_write: OnWrite | None) -> None:
        """Store one full checkpoint, then prune (on the writer's thread for a background save:
        the position comes from the payload, since training has moved on)."""
        step = payload["step"]

        def written(file: IO[bytes]) -> None:
            if on_write is not None:
                on_write(step, file)

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

    def _save_sharded(self, payload: dict[str, Any], at: Position, background: bool) -> None:
        """Every rank saves its own shard (``torch.distributed.checkpoint``, no gather to rank 0)
        where the store says; the store then publishes it: a shared directory renamed into place
        (now), or each rank's files uploaded (on its writer thread, unless ``background`` is off)
        and published by rank 0."""
        import torch.distributed.checkpoint as dcp

        self.writer.wait()
        save = self.store.begin_sharded(at.step, self.ctx)
        state = {
            "model": get_model_state_dict(self.module),
            "optimizer": get_optimizer_state_dict(self.module, self.optimizer),
        }
        try:
            try:
                dcp.save(state, checkpoint_id=str(save.dir))
            except CheckpointException as exc:  # a BaseException: any rank's failure, on every rank
                raise dcp_failure(f"saving the sharded checkpoint {save.where}", exc) from None
            if self.ctx.is_main:
                save.write_state(payload)
        except BaseException:
            save.abandon()
            raise
        if background and save.background:
            self.writer.submit(save.where, lambda: self._commit_sharded(save, at))
            return
        error: str | None = None
        try:
            self._commit_sharded(save, at)
            self.writer.failed = False  # as after a full checkpoint stored in the foreground
        except CheckpointError as exc:
            if not save.background:  # a shared directory: as it always did, the error ends the run
                raise
            error = str(exc)
        if save.background:  # every rank learns whether all stored theirs, so all go on (or stop) alike
            errors = [e for e in d.all_gather_object(error) if e]
            if errors:
                raise StoreError(errors[0])

    def _commit_sharded(self, save: ShardedSave, at: Position) -> None:
        where = save.commit()
        if where is not None:
            self._saved(where, at.step, at.epoch, sharded=True)

    def save_final(self, template: str, step: int) -> None:
        """Collective: the final full weights; ``{rank}`` in the path makes every rank write its own copy."""
        per_rank = "{rank}" in template
        options = StateDictOptions(full_state_dict=True, cpu_offload=not per_rank)
        state = get_model_state_dict(self.module, options=options)
        if per_rank or self.ctx.is_main:
            tensors = cast(dict[str, torch.Tensor], state)  # a module's state dict holds tensors only
            state = {k: v.detach().cpu() for k, v in tensors.items()}
            ckpt.atomic_save({"model": state, "step": step}, Path(template.replace("{rank}", str(self.ctx.rank))))
        d.barrier()

    # ----------------------------------------------------------------------------- resuming
    def resume(self) -> Position | None:
        """Collective: load the newest valid checkpoint (``--resume auto``) or the one named, and
        return its position; None when there is none (or ``--resume never``). Rank 0 reads it and
        every rank gets it by broadcast, so the checkpoint directory need not be shared between
        nodes for full checkpoints: only rank 0's copy is read."""
        cfg = self.cfg
        if cfg.resume == "never":
            return None
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
            return None
        _, path, payload = msg
        try:
            at = self._load(payload, path)
        except TrainerError:
            raise
        except (RuntimeError, KeyError, ValueError, TypeError) as exc:
            if is_peer_lost(exc, after_setup=True):  # loading a sharded checkpoint runs collectives
                raise
            raise CheckpointError(
                f"checkpoint {path} does not fit this run (--model {cfg.model}, --strategy {cfg.strategy}): "
                f"{str(exc)[:300]}"
            ) from None
        self.metrics.emit("resume", path=path, step=at.step, epoch=at.epoch, batches_done=at.batches_done)
        self.resumed_from = path
        if self.ctx.is_main and not self._at_end(at):  # a finished run says so in already_complete()
            self.progress.line(f"resumed from {path} (epoch {at.epoch + 1}, step {at.step})")
        return at

    def _load(self, payload: dict[str, Any], path: str) -> Position:
        if payload.get("sharded"):
            import torch.distributed.checkpoint as dcp

            if self.cfg.strategy != "fsdp":
                raise CheckpointError("a sharded checkpoint resumes only with --strategy fsdp")
            state: dict[str, Any] = {
                "model": get_model_state_dict(self.module),
                "optimizer": get_optimizer_state_dict(self.module, self.optimizer),
            }
            if "sharded_dir" in payload:  # a local directory (also --resume PATH under an object store)
                reader: Any = dcp.FileSystemReader(payload["sharded_dir"])
            else:  # in the object store: each rank downloads the files it reads
                reader = self.store.sharded_reader(payload)
            try:
                dcp.load(state, storage_reader=reader)
            except CheckpointException as exc:  # a BaseException: any rank's failure, on every rank
                raise dcp_failure(f"loading checkpoint {path}", exc) from None
            set_model_state_dict(self.module, state["model"])
            set_optimizer_state_dict(self.module, self.optimizer, state["optimizer"])
        else:
            full = StateDictOptions(full_state_dict=True)
            set_model_state_dict(self.module, payload["model"], options=full)
            set_optimizer_state_dict(self.module, self.optimizer, payload["optimizer"], options=full)
        if self.scheduler is not None and payload.get("scheduler"):
            self.scheduler.load_state_dict(payload["scheduler"])
        epoch, step = int(payload["epoch"]), int(payload["step"])
        self._last_saved_step = step
        per_step = self.batch * self.ctx.world_size
        accum = self.cfg.grad_accum
        samples = int(payload.get("samples_done", payload["batches_done"] * per_step))
        if samples % (per_step * accum):
            warn(
                f"the checkpoint stopped {samples} samples into epoch {epoch + 1}, which is not a whole "
                "number of this run's global batches; resuming at the nearest batch before it"
            )
        rngs = payload.get("rng") or []
        if rngs:
            if len(rngs) != self.ctx.world_size and self.ctx.is_main:
                warn(f"the checkpoint has RNG states of {len(rngs)} ranks, this run has {self.ctx.world_size}")
            set_rng_state(rngs[self.ctx.rank % len(rngs)])
        return Position(epoch, step, (samples // (per_step * accum)) * accum)

    def _at_end(self, at: Position) -> bool:
        """Whether ``at`` is past the run's end: every epoch done, or ``--max-steps`` reached."""
        return at.epoch >= self.cfg.epochs or (bool(self.cfg.max_steps) and at.step >= self.cfg.max_steps)

    def already_complete(self, at: Position) -> bool:
        """A resumed run whose checkpoint is already at the end: say so (rank 0), train nothing."""
        if self.resumed_from is None or not self._at_end(at):
            return False
        if self.ctx.is_main:
            epochs = self.cfg.epochs
            self.progress.line(
                f"{ALREADY_COMPLETE} at step {at.step} (epoch {min(at.epoch, epochs)}/{epochs}), "
                f"checkpoint {self.resumed_from}; nothing to train (to start over: --resume never, "
                "or remove the checkpoints)"
            )
        return True


def dcp_failure(what: str, exc: CheckpointException) -> BaseException:
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


__all__ = ["Checkpointer", "Position", "dcp_failure", "rng_state", "set_rng_state"]
