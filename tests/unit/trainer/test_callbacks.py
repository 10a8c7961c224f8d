"""ddpctl_trainer.callbacks and the --callback seam: the flag (and DDP_TRAINER_CALLBACK), loading a
user's callback by MODULE:NAME, the hooks' fixed order, and when a real (one-process, in-process)
training run calls each hook."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import torch
from ddpctl_trainer import callbacks, stop
from ddpctl_trainer.callbacks import Callback, check_callback_specs, load_callbacks
from ddpctl_trainer.config import build_parser, parse_args
from ddpctl_trainer.dist import DistContext
from ddpctl_trainer.errors import UsageError

# --------------------------------------------------------------------------------------------
# The flag
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, ()),
        (["--callback", "a:B", "--callback", "c.d:e"], {}, ("a:B", "c.d:e")),  # repeatable, in order
        ([], {"DDP_TRAINER_CALLBACK": "a:B, c.d:e"}, ("a:B", "c.d:e")),  # the env: comma-separated
        ([], {"DDP_TRAINER_CALLBACK": ""}, ()),
        (["--callback", "x:Y"], {"DDP_TRAINER_CALLBACK": "a:B"}, ("x:Y",)),  # the command line wins
    ],
)
def test_the_callback_flag_is_repeatable_and_comes_from_the_env_too(
    argv: list[str], env: dict[str, str], expected: tuple[str, ...]
) -> None:
    assert parse_args(argv, env).callback == expected


@pytest.mark.parametrize("spec", ["nocolon", ":Name", "module:"])
def test_a_callback_not_written_module_name_is_a_usage_error_before_anything_imports(spec: str) -> None:
    with pytest.raises(UsageError, match=r"--callback .*: a callback is written module:name"):
        parse_args(["--callback", spec], {})


def test_the_trainers_help_names_the_hooks_and_the_env_variable() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "--callback MODULE:NAME" in text and "DDP_TRAINER_CALLBACK: comma-separated" in text
    for method in callbacks.HOOK_METHODS:
        assert method in text


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
# The order, and when a run calls each hook
# --------------------------------------------------------------------------------------------


class _Stub:
    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)


def test_the_users_callbacks_run_after_logging_and_before_checkpoints_and_the_stop_vote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ddpctl_trainer.trainer import Trainer

    monkeypatch.setitem(sys.modules, "mine_hooks", _Stub(mine=Callback()))
    cfg = parse_args(
        ["--synthetic-samples", "32", "--checkpoint-dir", str(tmp_path), "--callback", "mine_hooks:mine"], {}
    )
    trainer = Trainer.from_config(cfg, DistContext(0, 0, 1, 1, 0, 0, "single"), torch.device("cpu"), "gloo")
    names = [type(h).__name__ for h in trainer.hooks]
    assert names == ["Heartbeat", "FirstStepMetric", "ProgressLog", "Callback", "SaveCadence", "MaxSteps", "StopVote"]


class Recorder(Callback):
    """What a user's callback sees, hook by hook."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_epoch_start(self, trainer: Any) -> None:
        self.calls.append(("epoch_start", trainer.epoch, trainer.step))

    def on_step_end(self, trainer: Any) -> None:
        self.calls.append(("step_end", trainer.epoch, trainer.step, trainer.batches_done))

    def on_epoch_end(self, trainer: Any) -> None:
        self.calls.append(("epoch_end", trainer.epoch, trainer.step))

    def on_checkpoint_write(self, trainer: Any, step: int, file: IO[bytes]) -> None:
        self.calls.append(("checkpoint_write", step, file.tell() > 0))


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """A one-process run in this process (no process group): 64 samples / batch 16 = 4 steps an
    epoch, 2 epochs, a checkpoint every 3 steps; the recorder as its --callback."""
    recorder = Recorder()
    module = _Stub(recorder=recorder)
    monkeypatch.setitem(sys.modules, "recorded_hooks", module)
    from ddpctl_trainer.trainer import Trainer

    cfg = parse_args(
        [
            *("--synthetic-samples", "64", "--image-size", "8", "--batch-size", "16", "--epochs", "2"),
            *("--save-every", "3", "--no-eval", "--progress", "none", "--checkpoint-dir", str(tmp_path)),
            *("--callback", "recorded_hooks:recorder"),
        ],
        {},
    )
    stop.reset()
    try:
        Trainer.from_config(cfg, DistContext(0, 0, 1, 1, 0, 0, "single"), torch.device("cpu"), "gloo").fit()
    finally:
        stop.reset()
    return recorder


def test_a_run_calls_each_hook_at_its_moment(recorded: Recorder) -> None:
    steps = [c for c in recorded.calls if c[0] != "checkpoint_write"]
    assert steps == [
        ("epoch_start", 0, 0),
        ("step_end", 0, 1, 1),
        ("step_end", 0, 2, 2),
        ("step_end", 0, 3, 3),
        ("step_end", 0, 4, 0),  # the epoch's last step: the position is the next epoch's start
        ("epoch_end", 1, 4),  # after the epoch (and its eval): the epoch counts it
        ("epoch_start", 1, 4),
        ("step_end", 1, 5, 1),
        ("step_end", 1, 6, 2),
        ("step_end", 1, 7, 3),
        ("step_end", 1, 8, 0),
        ("epoch_end", 2, 8),
    ]
    # the hook sees every full checkpoint rank 0 writes (every 3 steps, each epoch's end), written
    writes = [c for c in recorded.calls if c[0] == "checkpoint_write"]
    assert sorted(writes) == [("checkpoint_write", step, True) for step in (3, 4, 6, 8)]
