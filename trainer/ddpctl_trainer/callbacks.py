"""Step hooks: what runs around the training loop, outside the batch itself.

``Trainer._run_epoch`` trains micro-batches and steps the optimizer; everything else that happens
after an optimizer step or at the end of an epoch is a ``Callback`` in one list, called in a fixed
order:

1. ``Heartbeat``: tells the stall watchdog the step finished;
2. ``FirstStepMetric``: the ``first_step`` metric, once per process;
3. ``ProgressLog``: the progress bar, and every ``--log-every`` steps (and at an epoch's last
   step) the loss and accuracy reduced over the ranks (an all-reduce) and reported by rank 0;
4. the user's callbacks (``--callback``), in the order given;
5. ``SaveCadence``: a checkpoint every ``--save-every`` steps, after every epoch, and when a
   callback asked for one (barriers);
6. ``MaxSteps``: ends training at ``--max-steps``;
7. ``StopVote``: after each step the ranks agree whether any of them got SIGTERM (an all-reduce),
   and if so every rank checkpoints this step and stops;
8. ``StragglerWatch``: the step's own work is timed up to here, and every ``--stragglers-every``
   steps the ranks gather their figures (an all-gather) and name a slow node
   (``ddpctl_trainer.stragglers``); last, so the next step's clock starts after every collective.

Every rank runs every hook in this order: the collectives some of them run (the logging
all-reduce, the checkpoint barriers, the stop vote) must be called by all ranks in the same
order. Only what they write is rank 0's.

Each hook is given a ``TrainerView``: where training is, what it has measured, and a few requests
(end training, save a checkpoint). The trainer's own hooks read the same view; what only they may
touch (the watchdog's beacon, the meter, the save itself) they are given when made.

A user's callback (``--callback MODULE:NAME``, or ``DDP_TRAINER_CALLBACK=MODULE:NAME[,...]``) is
any object with some of the methods of ``Callback``; NAME is such an object, or a class or
function that makes one when called without arguments.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any, Protocol

from .errors import UsageError
from .plugins import import_named
from .stragglers import StragglerStop

if TYPE_CHECKING:
    import torch
    from torch import nn

    from .config import TrainConfig
    from .dist import DistContext
    from .metrics import Meter, Progress
    from .stragglers import Stragglers
    from .watchdog import Beacon


class Metrics(Protocol):
    """Rank 0's metrics file (``--metrics-file``): one JSON line per ``emit``; a no-op elsewhere."""

    def emit(self, event: str, **fields: Any) -> None: ...


class _Waits(Protocol):
    def wait(self) -> None: ...


class _Run(Protocol):
    """What a TrainerView reads and sets of the training run (ddpctl_trainer.trainer.Trainer is one):
    typed here, so this module need not import the trainer that imports it."""

    done: bool
    save_requested: bool

    @property
    def cfg(self) -> TrainConfig: ...
    @property
    def ctx(self) -> DistContext: ...
    @property
    def model(self) -> nn.Module: ...
    @property
    def optimizer(self) -> torch.optim.Optimizer: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def meter(self) -> Meter: ...
    @property
    def checkpointer(self) -> _Waits: ...
    @property
    def epoch(self) -> int: ...
    @property
    def step(self) -> int: ...
    @property
    def batches_done(self) -> int: ...
    @property
    def steps_per_epoch(self) -> int: ...
    @property
    def total_steps(self) -> int: ...
    def step_in_epoch(self) -> int: ...


class TrainerView:
    """What a callback sees of the training run, and what it may ask of it: read-only attributes
    (none can be set) and three requests. The same on every rank, except ``ctx``'s ranks.

    A callback runs on every rank, in the training process's main thread (except
    ``on_checkpoint_write``, see ``Callback``). A callback that runs a collective, or makes a
    request, must do so on every rank alike: the values here that come from the whole job
    (``last_loss``, ``last_accuracy``) are the same on every rank, so decisions taken on them are.
    """

    __slots__ = ("_trainer",)

    def __init__(self, trainer: _Run) -> None:
        self._trainer = trainer

    # -- where training is
    @property
    def epoch(self) -> int:
        """Epochs done: the one in progress, counting from 0 (``epochs`` once training is over)."""
        return self._trainer.epoch

    @property
    def epochs(self) -> int:
        """``--epochs``."""
        return self._trainer.cfg.epochs

    @property
    def step(self) -> int:
        """Optimizer steps done (over all epochs)."""
        return self._trainer.step

    @property
    def step_in_epoch(self) -> int:
        """Optimizer steps of this epoch done (all of them once its last step is done)."""
        return self._trainer.step_in_epoch()

    @property
    def steps_per_epoch(self) -> int:
        return self._trainer.steps_per_epoch

    @property
    def total_steps(self) -> int:
        """The run's last step: every epoch's, or ``--max-steps`` when that comes first."""
        return self._trainer.total_steps

    @property
    def batches_done(self) -> int:
        """Micro-batches of this epoch this rank has trained; 0 once the epoch's last step is done."""
        return self._trainer.batches_done

    # -- the job
    @property
    def ctx(self) -> DistContext:
        """Where this process sits: ``rank``, ``local_rank``, ``world_size``, ``node_rank``,
        ``restart_count``, ``is_main`` (rank 0)."""
        return self._trainer.ctx

    @property
    def cfg(self) -> TrainConfig:
        """The flags (frozen)."""
        return self._trainer.cfg

    # -- what training measures
    @property
    def last_loss(self) -> float | None:
        """The mean training loss over every rank since the report before, as of the last report
        (every ``--log-every`` steps and at an epoch's last step); None before the first."""
        last = self._trainer.meter.last
        return None if last is None else last.loss

    @property
    def last_accuracy(self) -> float | None:
        """The training accuracy of the same interval as ``last_loss``."""
        last = self._trainer.meter.last
        return None if last is None else last.accuracy

    @property
    def lr(self) -> float:
        """The learning rate of the next step (of the optimizer's first parameter group)."""
        return float(self._trainer.optimizer.param_groups[0]["lr"])

    @property
    def metrics(self) -> Metrics:
        """``metrics.emit(event, **fields)``: a line in rank 0's ``--metrics-file``."""
        return self._trainer.metrics

    @property
    def model(self) -> nn.Module:
        """The model training calls (wrapped: DDP, FSDP, DataParallel, compiled)."""
        return self._trainer.model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self._trainer.optimizer

    # -- requests
    def request_stop(self) -> None:
        """End training after this step (or epoch), as ``--max-steps`` does: its checkpoint is
        written and the process exits 0; the next start (``--resume auto``) goes on from there."""
        self._trainer.done = True

    @property
    def stop_requested(self) -> bool:
        """Whether training ends after this step (``request_stop``, ``--max-steps``)."""
        return self._trainer.done

    def request_save(self) -> None:
        """A checkpoint of this step, after the step's hooks (inside an epoch; at an epoch's last
        step, the checkpoint after the epoch is the one)."""
        self._trainer.save_requested = True

    @property
    def save_requested(self) -> bool:
        """Whether a checkpoint of this step was asked for and not written yet."""
        return self._trainer.save_requested

    def wait_for_checkpoint(self) -> None:
        """Block until the checkpoint being stored in the background (if any) is stored or failed."""
        self._trainer.checkpointer.wait()


class Callback:
    """The hooks' interface; each method does nothing here. Subclass it (``from
    ddpctl_trainer.callbacks import Callback``) or give any object with some of these methods.
    Each is given a ``TrainerView`` (named ``trainer`` here). An exception from a callback stops
    the run like any failure of this rank."""

    def on_epoch_start(self, trainer: TrainerView) -> None:
        """Before the first batch of an epoch (of the rest of it, when a run resumes mid-epoch)."""

    def on_step_end(self, trainer: TrainerView) -> None:
        """After each optimizer step: ``trainer.step`` counts it already."""

    def on_epoch_end(self, trainer: TrainerView) -> None:
        """After an epoch's last step and its evaluation: ``trainer.epoch`` counts it already."""

    def on_checkpoint_write(self, trainer: TrainerView, step: int, file: IO[bytes]) -> None:
        """Rank 0, once the full checkpoint of ``step`` is written into ``file`` (a local temp
        file), before it is stored: in a directory, before it is synced and renamed into place; in
        an object store (``--checkpoint-dir s3://...``), before it is uploaded and published. E.g. to
        check it, or in a test to end the process half-way through a save. A checkpoint saved in
        the background calls this on the writer's thread, while training goes on (``trainer.step``
        may be past ``step`` then). Not called for FSDP sharded checkpoints (``--fsdp-state-dict
        sharded``), which every rank writes with ``torch.distributed.checkpoint``."""


# --------------------------------------------------------------------------------------------
# The trainer's own hooks
# --------------------------------------------------------------------------------------------


class Heartbeat(Callback):
    """The stall watchdog's mark: this rank finished a step (what follows is logging)."""

    def __init__(self, beacon: Beacon) -> None:
        self.beacon = beacon

    def on_step_end(self, trainer: TrainerView) -> None:
        self.beacon.step_done(trainer.step)


class FirstStepMetric(Callback):
    """How long this process took from ``started`` (its trainer made) to its first optimizer step."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.emitted = False

    def on_step_end(self, trainer: TrainerView) -> None:
        if not self.emitted:
            self.emitted = True
            trainer.metrics.emit("first_step", step=trainer.step, since_start_s=time.time() - self.started)


class ProgressLog(Callback):
    """Progress after each step; every ``--log-every`` steps (and at an epoch's last step) the
    interval's loss and accuracy reduced across ranks (one collective, the meter's) and reported."""

    def __init__(self, meter: Meter, progress: Progress) -> None:
        self.meter = meter
        self.progress = progress
        self.t_last = time.perf_counter()
        self.cpu_last = time.process_time()
        self.step_last: int | None = None  # the step of the last report in this epoch (None: none yet)
        self.s_per_step: float | None = None  # seconds per optimizer step, smoothed, for the ETA

    def on_epoch_start(self, trainer: TrainerView) -> None:
        self.t_last = time.perf_counter()
        self.cpu_last = time.process_time()
        self.step_last = trainer.step

    def eta(self, trainer: TrainerView, dt: float) -> float | None:
        """Seconds to the last step (all epochs, or --max-steps), at the pace of the steps so far
        (an average that weighs the latest interval most); None before a pace is known."""
        steps = trainer.step - self.step_last if self.step_last is not None else 0
        if steps > 0:
            pace = dt / steps
            self.s_per_step = pace if self.s_per_step is None else 0.7 * self.s_per_step + 0.3 * pace
        self.step_last = trainer.step
        if self.s_per_step is None:
            return None
        return max(trainer.total_steps - trainer.step, 0) * self.s_per_step

    def on_step_end(self, trainer: TrainerView) -> None:
        self.progress.step()
        if trainer.step % trainer.cfg.log_every == 0 or trainer.batches_done == 0:
            self.log(trainer)

    def log(self, trainer: TrainerView) -> None:
        """Reduce the interval's loss and accuracy across ranks (one collective) and report them."""
        now = time.perf_counter()
        got = self.meter.reduce()
        dt = max(now - self.t_last, 1e-9)
        self.progress.report(
            trainer.epoch,
            trainer.step_in_epoch,
            trainer.steps_per_epoch,
            got.loss,
            got.local_samples / dt,
            self.eta(trainer, dt),
        )
        cpu_now = time.process_time()
        trainer.metrics.emit(
            "train",
            epoch=trainer.epoch,
            step=trainer.step,
            loss=got.loss,
            accuracy=got.accuracy,
            samples=int(got.samples),
            samples_per_s=got.samples / dt,
            lr=trainer.lr,
            wall_s=dt,
            cpu_s=cpu_now - self.cpu_last,
        )  # cpu_s: this process, for benchmarks
        self.cpu_last = cpu_now
        self.t_last = time.perf_counter()


class SaveCadence(Callback):
    """A checkpoint every ``--save-every`` steps inside an epoch, one after every epoch, and one
    when a callback asked (``request_save``); ``save`` writes it (a collective)."""

    def __init__(self, save: Callable[[], None]) -> None:
        self.save = save

    def on_step_end(self, trainer: TrainerView) -> None:
        every = trainer.cfg.save_every_steps
        # At an epoch's last step the position is only complete after eval and the epoch count
        # move on: on_epoch_end saves there instead.
        due = trainer.save_requested or bool(every and trainer.step % every == 0)
        if due and trainer.batches_done != 0:
            self.save()

    def on_epoch_end(self, trainer: TrainerView) -> None:
        self.save()


class MaxSteps(Callback):
    """``--max-steps``: training ends after the step that reaches it."""

    def on_step_end(self, trainer: TrainerView) -> None:
        if trainer.cfg.max_steps and trainer.step >= trainer.cfg.max_steps:
            trainer.request_stop()


class StopVote(Callback):
    """Stop at a step boundary when any rank got SIGTERM: every rank votes after the same step
    (``agreed``: one 1-element all-reduce), so all of them stop there together, with a checkpoint
    of it (``stop``, which does not return)."""

    def __init__(self, agreed: Callable[[], bool], stop: Callable[[], object]) -> None:
        self.agreed = agreed
        self.stop = stop

    def on_step_end(self, trainer: TrainerView) -> None:
        # At an epoch's last step the position is only complete after eval: on_epoch_end votes.
        if not trainer.stop_requested and trainer.batches_done != 0 and self.agreed():
            self.stop()

    def on_epoch_end(self, trainer: TrainerView) -> None:
        if trainer.epoch < trainer.epochs and not trainer.stop_requested and self.agreed():
            self.stop()


class StragglerWatch(Callback):
    """Times each step's own work and judges it across the ranks (``stragglers.Stragglers``); under
    ``--stragglers fail`` a named node makes every rank call ``stop``, under ``replace`` ``replace``
    (node, message) (neither returns)."""

    def __init__(
        self, detector: Stragglers, stop: Callable[[str], object], replace: Callable[[int, str], object]
    ) -> None:
        self.detector = detector
        self.stop = stop
        self.replace = replace

    def on_epoch_start(self, trainer: TrainerView) -> None:
        self.detector.begin()

    def on_step_end(self, trainer: TrainerView) -> None:
        try:
            self.detector.end(trainer.step)
        except StragglerStop as exc:
            if exc.node is None:
                self.stop(str(exc))
            else:
                self.replace(exc.node, str(exc))
        self.detector.begin()


# --------------------------------------------------------------------------------------------
# The user's callbacks: --callback MODULE:NAME
# --------------------------------------------------------------------------------------------

HOOK_METHODS = ("on_epoch_start", "on_step_end", "on_epoch_end", "on_checkpoint_write")


class _Loaded(Callback):
    """A user's object with some of the hook methods (and no ``Callback`` base): the ones it has are called."""

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def on_epoch_start(self, trainer: TrainerView) -> None:
        if hasattr(self.obj, "on_epoch_start"):
            self.obj.on_epoch_start(trainer)

    def on_step_end(self, trainer: TrainerView) -> None:
        if hasattr(self.obj, "on_step_end"):
            self.obj.on_step_end(trainer)

    def on_epoch_end(self, trainer: TrainerView) -> None:
        if hasattr(self.obj, "on_epoch_end"):
            self.obj.on_epoch_end(trainer)

    def on_checkpoint_write(self, trainer: TrainerView, step: int, file: IO[bytes]) -> None:
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


__all__ = ["HOOK_METHODS", "Callback", "Metrics", "TrainerView", "check_callback_specs", "load_callbacks"]
