"""Step hooks: what runs around the training loop, outside the batch itself.

``Trainer._run_epoch`` trains micro-batches and steps the optimizer; everything else that happens
after an optimizer step or at the end of an epoch is a ``Callback`` in one list, called in a fixed
order (``hooks``):

1. ``Heartbeat``: tells the stall watchdog the step finished;
2. ``FirstStepMetric``: the ``first_step`` metric, once per process;
3. ``ProgressLog``: the progress bar, and every ``--log-every`` steps (and at an epoch's last
   step) the loss and accuracy reduced over the ranks (an all-reduce) and reported by rank 0;
4. the user's callbacks (``--callback``), in the order given;
5. ``SaveCadence``: a checkpoint every ``--save-every`` steps and after every epoch (barriers);
6. ``MaxSteps``: ends training at ``--max-steps``;
7. ``StopVote``: after each step the ranks agree whether any of them got SIGTERM (an all-reduce),
   and if so every rank checkpoints this step and stops.

Every rank runs every hook in this order: the collectives some of them run (the logging
all-reduce, the checkpoint barriers, the stop vote) must be called by all ranks in the same
order. Only what they write is rank 0's.

A user's callback (``--callback MODULE:NAME``, or ``DDP_TRAINER_CALLBACK=MODULE:NAME[,...]``) is
any object with some of the methods of ``Callback``; NAME is such an object, or a class or
function that makes one when called without arguments.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

import torch
import torch.distributed as dist

from . import dist as d
from .errors import UsageError
from .plugins import import_named

if TYPE_CHECKING:
    from .trainer import Trainer


class Callback:
    """The hooks' interface; each method does nothing here. Subclass it (``from
    ddpctl_trainer.callbacks import Callback``) or give any object with some of these methods.

    A callback runs on every rank, in the training process's main thread (except
    ``on_checkpoint_write``, see there). What it reads from the trainer: ``trainer.step`` (optimizer
    steps done), ``trainer.epoch``, ``trainer.batches_done`` (micro-batches of the epoch done; 0
    once the epoch's last step is done), ``trainer.ctx`` (``rank``, ``local_rank``, ``world_size``,
    ``node_rank``, ``restart_count``, ``is_main``), ``trainer.model``, ``trainer.optimizer``,
    ``trainer.metrics`` (``emit``: rank 0's metrics file) and ``trainer.cfg`` (the flags). A
    callback that runs a collective must run it on every rank alike. An exception from a callback
    stops the run like any failure of this rank.
    """

    def on_epoch_start(self, trainer: Trainer) -> None:
        """Before the first batch of an epoch (of the rest of it, when a run resumes mid-epoch)."""

    def on_step_end(self, trainer: Trainer) -> None:
        """After each optimizer step: ``trainer.step`` counts it already."""

    def on_epoch_end(self, trainer: Trainer) -> None:
        """After an epoch's last step and its evaluation: ``trainer.epoch`` counts it already."""

    def on_checkpoint_write(self, trainer: Trainer, step: int, file: IO[bytes]) -> None:
        """Rank 0, once the full checkpoint of ``step`` is written into ``file`` (a local temp
        file), before it is stored: in a directory, before it is synced and renamed into place; in
        an object store (``--checkpoint-dir s3://...``), before it is uploaded and published. E.g. to
        check it, or in a test to end the process half-way through a save. A checkpoint saved in
        the background calls this on the writer's thread, while training goes on (``trainer.step``
        may be past ``step`` then). Not called for FSDP sharded checkpoints (``--fsdp-state-dict
        sharded``), which every rank writes with ``torch.distributed.checkpoint``."""


class Heartbeat(Callback):
    """The stall watchdog's mark: this rank finished a step (what follows is logging)."""

    def on_step_end(self, trainer: Trainer) -> None:
        trainer.beacon.step_done(trainer.step)


class FirstStepMetric(Callback):
    """How long this process took from its start to its first optimizer step (start-up cost)."""

    def __init__(self) -> None:
        self.emitted = False

    def on_step_end(self, trainer: Trainer) -> None:
        if not self.emitted:
            self.emitted = True
            trainer.metrics.emit("first_step", step=trainer.step, since_start_s=time.time() - trainer.started)


class ProgressLog(Callback):
    """Progress after each step; every ``--log-every`` steps (and at an epoch's last step) the
    interval's loss and accuracy reduced across ranks (one collective) and reported."""

    def __init__(self) -> None:
        self.t_last = time.perf_counter()
        self.cpu_last = time.process_time()
        self.step_last: int | None = None  # the step of the last report in this epoch (None: none yet)
        self.s_per_step: float | None = None  # seconds per optimizer step, smoothed, for the ETA

    def on_epoch_start(self, trainer: Trainer) -> None:
        self.t_last = time.perf_counter()
        self.cpu_last = time.process_time()
        self.step_last = trainer.step

    def eta(self, trainer: Trainer, dt: float) -> float | None:
        """Seconds to the last step (all epochs, or --max-steps), at the pace of the steps so far
        (an average that weighs the latest interval most); None before a pace is known."""
        steps = trainer.step - self.step_last if self.step_last is not None else 0
        if steps > 0:
            pace = dt / steps
            self.s_per_step = pace if self.s_per_step is None else 0.7 * self.s_per_step + 0.3 * pace
        self.step_last = trainer.step
        if self.s_per_step is None:
            return None
        total = trainer.steps_per_epoch * trainer.cfg.epochs
        if trainer.cfg.max_steps:
            total = min(total, trainer.cfg.max_steps)
        return max(total - trainer.step, 0) * self.s_per_step

    def on_step_end(self, trainer: Trainer) -> None:
        trainer.progress.step()
        if trainer.step % trainer.cfg.log_every == 0 or trainer.batches_done == 0:
            self.log(trainer)

    def log(self, trainer: Trainer) -> None:
        """Reduce the interval's loss and accuracy across ranks (one collective) and report them."""
        now = time.perf_counter()
        stats = trainer.stats  # loss sum, correct, samples since the last report (this rank)
        local_samples = float(stats[2].item())
        if d.group_active():
            dist.all_reduce(stats)
        loss_sum, correct, count = stats.tolist()
        dt = max(now - self.t_last, 1e-9)
        loss = loss_sum / max(count, 1.0)
        trainer.progress.report(
            trainer.epoch,
            trainer.step_in_epoch(),
            trainer.steps_per_epoch,
            loss,
            local_samples / dt,
            self.eta(trainer, dt),
        )
        cpu_now = time.process_time()
        trainer.metrics.emit(
            "train",
            epoch=trainer.epoch,
            step=trainer.step,
            loss=loss,
            accuracy=correct / max(count, 1.0),
            samples=int(count),
            samples_per_s=count / dt,
            lr=trainer.optimizer.param_groups[0]["lr"],
            wall_s=dt,
            cpu_s=cpu_now - self.cpu_last,
        )  # cpu_s: this process, for benchmarks
        self.cpu_last = cpu_now
        trainer.stats = torch.zeros_like(stats)
        self.t_last = time.perf_counter()


class SaveCadence(Callback):
    """A checkpoint every ``--save-every`` steps inside an epoch, and one after every epoch."""

    def on_step_end(self, trainer: Trainer) -> None:
        every = trainer.cfg.save_every_steps
        # At an epoch's last step the position is only complete after eval and the epoch count
        # move on: on_epoch_end saves there instead.
        if every and trainer.step % every == 0 and trainer.batches_done != 0:
            trainer.save_checkpoint()

    def on_epoch_end(self, trainer: Trainer) -> None:
        trainer.save_checkpoint()


class MaxSteps(Callback):
    """``--max-steps``: training ends after the step that reaches it."""

    def on_step_end(self, trainer: Trainer) -> None:
        if trainer.max_steps_reached():
            trainer.done = True


class StopVote(Callback):
    """Stop at a step boundary when any rank got SIGTERM: every rank votes after the same step
    (one 1-element all-reduce), so all of them stop there together, with a checkpoint of it."""

    def on_step_end(self, trainer: Trainer) -> None:
        # At an epoch's last step the position is only complete after eval: on_epoch_end votes.
        if not trainer.done and trainer.batches_done != 0 and trainer.stop_agreed():
            trainer.preempt()

    def on_epoch_end(self, trainer: Trainer) -> None:
        if trainer.epoch < trainer.cfg.epochs and not trainer.done and trainer.stop_agreed():
            trainer.preempt()


def hooks(user: Sequence[Callback]) -> list[Callback]:
    """Every hook of a run, in the order they run (see the module's doc)."""
    return [Heartbeat(), FirstStepMetric(), ProgressLog(), *user, SaveCadence(), MaxSteps(), StopVote()]


# --------------------------------------------------------------------------------------------
# The user's callbacks: --callback MODULE:NAME
# --------------------------------------------------------------------------------------------

HOOK_METHODS = ("on_epoch_start", "on_step_end", "on_epoch_end", "on_checkpoint_write")


class _Loaded(Callback):
    """A user's object with some of the hook methods (and no ``Callback`` base): the ones it has are called."""

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def on_epoch_start(self, trainer: Trainer) -> None:
        if hasattr(self.obj, "on_epoch_start"):
            self.obj.on_epoch_start(trainer)

    def on_step_end(self, trainer: Trainer) -> None:
        if hasattr(self.obj, "on_step_end"):
            self.obj.on_step_end(trainer)

    def on_epoch_end(self, trainer: Trainer) -> None:
        if hasattr(self.obj, "on_epoch_end"):
            self.obj.on_epoch_end(trainer)

    def on_checkpoint_write(self, trainer: Trainer, step: int, file: IO[bytes]) -> None:
        if hasattr(self.obj, "on_checkpoint_write"):
            self.obj.on_checkpoint_write(trainer, step, file)


def _has_hooks(obj: object) -> bool:
    return any(callable(getattr(obj, name, None)) for name in HOOK_METHODS)


def _resolve(spec: str) -> object:
    """``module:name`` -> the object it names; the one place that checks a callback's spec."""
    form = "a callback is written module:name, e.g. mypkg.hooks:Checkpointer"
    module_name, attr, found = import_named("--callback", spec, form)
    if found is None:
        raise UsageError(f"--callback {spec!r}: {module_name} has no {attr!r}")
    if not (_has_hooks(found) or callable(found)):
        raise UsageError(
            f"--callback {spec!r}: {attr!r} is neither a callback (an object with some of "
            f"{', '.join(HOOK_METHODS)}) nor a class or function that makes one"
        )
    return found


def check_callback_specs(specs: Sequence[str]) -> None:
    """Fail early (before the process group, on every rank alike) on a callback that cannot be imported."""
    for spec in specs:
        _resolve(spec)


def load_callbacks(specs: Sequence[str]) -> list[Callback]:
    """The user's callbacks: a class (or a function) named by ``--callback`` is called without
    arguments to make one; an object with hook methods is used as it is."""
    loaded: list[Callback] = []
    for spec in specs:
        found = _resolve(spec)
        obj = found() if callable(found) and (isinstance(found, type) or not _has_hooks(found)) else found
        if not _has_hooks(obj):
            raise UsageError(
                f"--callback {spec!r}: the {type(obj).__name__} it made has none of the hook methods "
                f"({', '.join(HOOK_METHODS)})"
            )
        loaded.append(obj if isinstance(obj, Callback) else _Loaded(obj))
    return loaded


__all__ = ["HOOK_METHODS", "Callback", "check_callback_specs", "hooks", "load_callbacks"]
