"""ddpctl_trainer.callbacks and the --callback seam: loading a user's callback by MODULE:NAME, the
view every hook is given (read-only, with its requests), the trainer's own hooks' decisions, the
hooks' fixed order, and when a real (one-process, in-process) training run calls each hook. The
flag itself is tested with the other flags (test_config.py)."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from ddpctl_trainer import callbacks
from ddpctl_trainer.callbacks import (
    Callback,
    MaxSteps,
    ProgressLog,
    SaveCadence,
    StopVote,
    TrainerView,
    check_callback_specs,
    load_callbacks,
)
from ddpctl_trainer.errors import UsageError
from ddpctl_trainer.trainer import Trainer
from tests.support.trainer import in_process


class _Stub:
    """A view's attributes, as a table row gives them (the hooks read only what they need)."""

    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)


# --------------------------------------------------------------------------------------------
# Loading MODULE:NAME
# --------------------------------------------------------------------------------------------

USER_MODULE = """
class Counter:
    made = 0

    def __init__(self):
        Counter.made += 1
        self.steps = []

    def on_step_end(self, trainer):
        self.steps.append(trainer.step)


class Watcher:
    def on_epoch_end(self, trainer):
        pass


watcher = Watcher()


def make():
    return Watcher()


def broken():
    return 42


not_a_hook = 3
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"user_hooks_{abs(hash(tmp_path))}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_a_class_is_made_an_object_is_used_and_a_function_is_called(user_module: str) -> None:
    counter, watcher, made = load_callbacks([f"{user_module}:Counter", f"{user_module}:watcher", f"{user_module}:make"])
    module = sys.modules[user_module]
    assert module.Counter.made == 1
    assert all(isinstance(c, Callback) for c in (counter, watcher, made))  # wrapped: no base class needed
    counter.on_step_end(_Stub(step=7))
    counter.on_epoch_end(_Stub(step=7))  # a method it lacks: nothing happens
    assert counter.obj.steps == [7]
    assert watcher.obj is module.watcher


def test_a_callback_subclass_is_used_as_it_is() -> None:
    (hook,) = load_callbacks(["ddpctl_trainer.callbacks:MaxSteps"])
    assert type(hook) is callbacks.MaxSteps


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_xyz:Hook", r"cannot import 'no_such_module_xyz' .*is it on PYTHONPATH\?"),
        ("{module}:Missing", r"has no 'Missing'"),
        ("{module}:not_a_hook", r"'not_a_hook' is neither a callback .* nor a class or function that makes one"),
    ],
)
def test_a_callback_that_cannot_be_found_is_a_usage_error_before_the_process_group(
    user_module: str, name: str, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        check_callback_specs([name.format(module=user_module)])


def test_a_function_that_makes_no_callback_is_a_usage_error(user_module: str) -> None:
    with pytest.raises(UsageError, match=r"the int it made has none of the hook methods \(on_epoch_start, "):
        load_callbacks([f"{user_module}:broken"])


# --------------------------------------------------------------------------------------------
# The view: what a callback reads, and what it may ask
# --------------------------------------------------------------------------------------------

READS = (
    "epoch",
    "epochs",
    "step",
    "step_in_epoch",
    "steps_per_epoch",
    "total_steps",
    "batches_done",
    "ctx",
    "cfg",
    "last_loss",
    "last_accuracy",
    "lr",
    "metrics",
    "model",
    "optimizer",
    "stop_requested",
    "save_requested",
)


@pytest.mark.parametrize("name", READS)
def test_the_view_is_read_only(tmp_path: Path, name: str) -> None:
    view = in_process(tmp_path).view
    getattr(view, name)
    with pytest.raises(AttributeError):
        setattr(view, name, 1)


def test_the_view_shows_the_position_and_nothing_of_the_trainers_insides(tmp_path: Path) -> None:
    trainer = in_process(tmp_path, "--epochs", "3", "--batch-size", "8", "--grad-accum", "2", "--lr", "0.125")
    trainer.epoch, trainer.step, trainer.batches_done = 1, 3, 3
    view = trainer.view
    assert (view.epoch, view.epochs, view.step, view.step_in_epoch, view.steps_per_epoch) == (1, 3, 3, 2, 2)
    assert (view.total_steps, view.batches_done, view.lr, view.ctx.rank, view.ctx.world_size) == (6, 3, 0.125, 0, 1)
    assert view.last_loss is None and view.last_accuracy is None  # no report yet
    assert view.model is trainer.model and view.optimizer is trainer.optimizer and view.cfg is trainer.cfg
    for inside in ("writer", "store", "checkpointer", "save_checkpoint", "beacon", "meter", "hooks", "done"):
        assert not hasattr(view, inside), inside


class Requests(Callback):
    """Asks at the steps a test names: a checkpoint (``save_at``) or the end of training (``stop_at``)."""

    def __init__(self, save_at: tuple[int, ...] = (), stop_at: int = 0) -> None:
        self.save_at, self.stop_at = save_at, stop_at
        self.written: list[int] = []
        self.seen: list[tuple[int, bool]] = []

    def on_step_end(self, trainer: TrainerView) -> None:
        if trainer.step in self.save_at:
            trainer.request_save()
        if trainer.step == self.stop_at:
            trainer.request_stop()
        self.seen.append((trainer.step, trainer.stop_requested))

    def on_checkpoint_write(self, trainer: TrainerView, step: int, file: IO[bytes]) -> None:
        self.written.append(step)


def _with(tmp_path: Path, hook: Callback, *args: str) -> Trainer:
    """A one-process trainer with ``hook`` among its callbacks (as --callback would load it)."""
    made = in_process(tmp_path, *args)
    return Trainer(
        made.model,
        made.data,
        made.optimizer,
        made.checkpointer,
        made.cfg,
        made.ctx,
        made.device,
        scheduler=made.scheduler,
        callbacks=[hook],
        metrics=made.metrics,
        progress=made.progress,
    )


@pytest.mark.parametrize(
    ("save_at", "written"),
    [
        pytest.param((1,), [1, 2, 4], id="inside-an-epoch-that-step"),
        pytest.param((2,), [2, 4], id="at-an-epochs-last-step-the-epochs-checkpoint"),
        pytest.param((1, 3), [1, 2, 3, 4], id="each-time"),
        pytest.param((), [2, 4], id="none-asked-after-every-epoch"),
    ],
)
def test_a_callback_asks_for_a_checkpoint(tmp_path: Path, save_at: tuple[int, ...], written: list[int]) -> None:
    hook = Requests(save_at=save_at)
    _with(tmp_path, hook, "--epochs", "2", "--keep-last", "9").fit()
    assert sorted(hook.written) == written
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"ckpt-{s:08d}.pt" for s in written]


def test_a_callback_ends_training_after_a_step_as_max_steps_would(tmp_path: Path) -> None:
    hook = Requests(stop_at=3)
    trainer = _with(tmp_path, hook, "--epochs", "5")
    trainer.fit()
    assert trainer.step == 3 and hook.seen[-1] == (3, True) and len(hook.seen) == 3
    assert (tmp_path / "ckpt-00000003.pt").is_file()  # the last checkpoint: the next start goes on from it
    again = in_process(tmp_path, "--epochs", "5")
    again.resume()
    assert again.step == 3 and not again.checkpointer.already_complete(again.position)


def test_the_last_loss_is_the_last_reports(tmp_path: Path) -> None:
    """What a callback reads as last_loss is what rank 0 reported (and wrote as the train metric)."""
    seen: list[float | None] = []

    class Loss(Callback):
        def on_step_end(self, trainer: TrainerView) -> None:
            seen.append(trainer.last_loss)

    metrics = tmp_path / "metrics.jsonl"
    _with(tmp_path, Loss(), "--epochs", "1", "--log-every", "1", "--metrics-file", str(metrics)).fit()
    reported = [json.loads(line)["loss"] for line in metrics.read_text().splitlines() if '"train"' in line]
    assert len(seen) == 2 and seen == reported


# --------------------------------------------------------------------------------------------
# The trainer's own hooks: what each decides from the view
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("every", "step", "batches_done", "requested", "saves"),
    [
        (0, 3, 5, False, False),  # --save-every epoch: only after the epoch
        (3, 3, 5, False, True),
        (3, 4, 5, False, False),
        (3, 6, 0, False, False),  # an epoch's last step: the epoch's checkpoint comes after eval
        (0, 2, 5, True, True),  # a callback asked
        (0, 2, 0, True, False),  # asked at an epoch's last step: the epoch's checkpoint is the one
    ],
)
def test_save_cadence(every: int, step: int, batches_done: int, requested: bool, saves: bool) -> None:
    saved: list[int] = []
    view = _Stub(step=step, batches_done=batches_done, save_requested=requested, cfg=_Stub(save_every_steps=every))
    cadence = SaveCadence(lambda: saved.append(step))
    cadence.on_step_end(view)
    assert saved == ([step] if saves else [])
    cadence.on_epoch_end(view)  # after every epoch: always
    assert len(saved) == (2 if saves else 1)


@pytest.mark.parametrize(("max_steps", "step", "stops"), [(0, 100, False), (5, 4, False), (5, 5, True), (5, 6, True)])
def test_max_steps(max_steps: int, step: int, stops: bool) -> None:
    asked: list[bool] = []
    view = _Stub(step=step, cfg=_Stub(max_steps=max_steps), request_stop=lambda: asked.append(True))
    MaxSteps().on_step_end(view)
    assert asked == ([True] if stops else [])


@pytest.mark.parametrize(
    ("stop_requested", "batches_done", "agreed", "votes", "stops"),
    [
        (False, 3, False, True, False),
        (False, 3, True, True, True),
        (False, 0, True, False, False),  # an epoch's last step: the vote comes after the epoch
        (True, 3, True, False, False),  # training ends after this step anyway (its checkpoint is the last)
    ],
)
def test_stop_vote_after_a_step(
    stop_requested: bool, batches_done: int, agreed: bool, votes: bool, stops: bool
) -> None:
    calls: list[str] = []

    def vote() -> bool:
        calls.append("vote")
        return agreed

    hook = StopVote(vote, lambda: calls.append("stop"))
    hook.on_step_end(_Stub(stop_requested=stop_requested, batches_done=batches_done))
    assert calls == ["vote"] * votes + ["stop"] * stops


@pytest.mark.parametrize(
    ("epoch", "stop_requested", "votes"),
    [(1, False, True), (2, False, False), (1, True, False)],  # of 2 epochs: after the last, training ends anyway
)
def test_stop_vote_after_an_epoch(epoch: int, stop_requested: bool, votes: bool) -> None:
    calls: list[str] = []
    hook = StopVote(lambda: calls.append("vote") is None, lambda: calls.append("stop"))
    hook.on_epoch_end(_Stub(epoch=epoch, epochs=2, stop_requested=stop_requested))
    assert calls == (["vote", "stop"] if votes else [])


def test_the_eta_is_the_steps_left_at_the_pace_so_far_weighing_the_latest_most() -> None:
    log = ProgressLog(meter=None, progress=None)  # type: ignore[arg-type]  # eta reads neither
    log.on_epoch_start(_Stub(step=0))
    assert log.eta(_Stub(step=0, total_steps=10), 1.0) is None  # no step yet: no pace
    assert log.eta(_Stub(step=2, total_steps=10), 4.0) == pytest.approx(8 * 2.0)
    assert log.eta(_Stub(step=4, total_steps=10), 2.0) == pytest.approx(6 * (0.7 * 2.0 + 0.3 * 1.0))
    assert log.eta(_Stub(step=12, total_steps=10), 1.0) == 0.0  # past the end (max-steps lowered)


# --------------------------------------------------------------------------------------------
# The order, and when a run calls each hook
# --------------------------------------------------------------------------------------------


def test_the_users_callbacks_run_after_logging_and_before_checkpoints_and_the_stop_vote(tmp_path: Path) -> None:
    names = [type(h).__name__ for h in _with(tmp_path, Callback()).hooks]
    assert names == [
        "Heartbeat",
        "FirstStepMetric",
        "ProgressLog",
        "Callback",
        "SaveCadence",
        "MaxSteps",
        "StopVote",
        "StragglerWatch",
    ]


class Recorder(Callback):
    """What a user's callback sees, hook by hook."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_epoch_start(self, trainer: Any) -> None:
        self.calls.append(("epoch_start", trainer.epoch, trainer.step))

    def on_step_end(self, trainer: Any) -> None:
        self.calls.append(("step_end", trainer.epoch, trainer.step, trainer.batches_done, trainer.step_in_epoch))

    def on_epoch_end(self, trainer: Any) -> None:
        self.calls.append(("epoch_end", trainer.epoch, trainer.step))

    def on_checkpoint_write(self, trainer: Any, step: int, file: IO[bytes]) -> None:
        self.calls.append(("checkpoint_write", step, file.tell() > 0))


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """A one-process run in this process (no process group): 64 samples / batch 16 = 4 steps an
    epoch, 2 epochs, a checkpoint every 3 steps; the recorder loaded as --callback loads it."""
    recorder = Recorder()
    monkeypatch.setitem(sys.modules, "recorded_hooks", _Stub(recorder=recorder))
    args = ("--synthetic-samples", "64", "--epochs", "2", "--save-every", "3", "--callback", "recorded_hooks:recorder")
    in_process(tmp_path, *args).fit()
    return recorder


def test_a_run_calls_each_hook_at_its_moment(recorded: Recorder) -> None:
    steps = [c for c in recorded.calls if c[0] != "checkpoint_write"]
    assert steps == [
        ("epoch_start", 0, 0),
        ("step_end", 0, 1, 1, 1),
        ("step_end", 0, 2, 2, 2),
        ("step_end", 0, 3, 3, 3),
        ("step_end", 0, 4, 0, 4),  # the epoch's last step: the position is the next epoch's start
        ("epoch_end", 1, 4),  # after the epoch (and its eval): the epoch counts it
        ("epoch_start", 1, 4),
        ("step_end", 1, 5, 1, 1),
        ("step_end", 1, 6, 2, 2),
        ("step_end", 1, 7, 3, 3),
        ("step_end", 1, 8, 0, 4),
        ("epoch_end", 2, 8),
    ]
    # the hook sees every full checkpoint rank 0 writes (every 3 steps, each epoch's end), written
    writes = [c for c in recorded.calls if c[0] == "checkpoint_write"]
    assert sorted(writes) == [("checkpoint_write", step, True) for step in (3, 4, 6, 8)]
