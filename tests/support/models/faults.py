"""Fault injection for the trainer's tests, loaded into the trainer through its step-hook seam.

The trainer ships no test hooks. A test loads this plugin like any user's callback, from the
checkout (``DDP_TRAINER_CALLBACK=tests.support.models.faults:Faults``, the repository on
PYTHONPATH) or in the test image (``test_faults:Faults``: tests/e2e/cluster/user-image.Dockerfile
copies this file there), and tells it what to do in variables that only this plugin reads. Every
fault acts on the first attempt only (torchrun's restart count 0):

* ``DDPCTL_TEST_KILL_AT_STEP=K`` (``DDPCTL_TEST_KILL_RANK=R``, default 0): rank R SIGKILLs itself
  after step K, as the OOM killer or a lost node would end it. With ``DDPCTL_TEST_KILL_SETTLED=1``
  every rank first waits at step K for its checkpoint writer (a background save still storing is
  lost with its process: this makes "the newest save before the kill" deterministic). With
  ``DDPCTL_TEST_KILL_ONCE_FILE=PATH`` it kills only while PATH does not exist, and writes it first:
  a whole group restarted (new pods: restart count 0 again) goes past step K.
* ``DDPCTL_TEST_CRASH_FROM_STEP=K`` (``DDPCTL_TEST_CRASH_RANK=R``, default 0): rank R fails (exit 1)
  after step K or any later step, on every attempt: a pod that keeps failing, whatever replaces it.
* ``DDPCTL_TEST_HOLD_AT_STEP=K`` (``DDPCTL_TEST_HOLD_RANK=R``, default 0; ``DDPCTL_TEST_HOLD_FILE=PATH``):
  rank R writes PATH (the step and its pid) after step K and waits there until it gets SIGTERM (at
  most ``HOLD_LIMIT_S``), so a test can signal or kill it between two known steps without sleeping. Once PATH exists the
  hold is spent: a group that its runner restarted (new agents, restart count 0 again) goes on.
* ``DDPCTL_TEST_KILL_IN_CHECKPOINT=K`` (``DDPCTL_TEST_KILL_IN_CHECKPOINT_SIGNAL=KILL`` or ``TERM``):
  half-way through writing the checkpoint of step K, rank 0 cuts the temp file to half its size
  and sends itself the signal (SIGTERM: the grace period's end, or a second SIGTERM).
* ``DDPCTL_TEST_PAUSE_IN_CHECKPOINT=K[,K2...]`` (``DDPCTL_TEST_PAUSE_FILE=PATH``): once the
  checkpoint of step K is written into its temp file, before it is stored, rank 0 writes
  ``PATH.K`` and waits (at most ``HOLD_LIMIT_S``) until ``PATH.K.go`` exists: a test can take the
  storage away (or bring it back) in the middle of that save. A background save pauses on the
  writer's thread, so training goes on meanwhile (up to the next save, which waits for this one).

``plugin_env`` and the functions after it build that environment for a test. The module imports
only the standard library and the trainer, as the image has nothing else.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ddpctl_trainer import stop
from ddpctl_trainer.errors import TrainerFailure

if TYPE_CHECKING:
    from ddpctl_trainer.callbacks import TrainerView

CALLBACK_ENV = "DDP_TRAINER_CALLBACK"  # the trainer's --callback
CALLBACK = "tests.support.models.faults:Faults"  # from the checkout
IMAGE_CALLBACK = "test_faults:Faults"  # in the test image

KILL_AT_STEP = "DDPCTL_TEST_KILL_AT_STEP"
KILL_RANK = "DDPCTL_TEST_KILL_RANK"
KILL_SETTLED = "DDPCTL_TEST_KILL_SETTLED"
KILL_ONCE_FILE = "DDPCTL_TEST_KILL_ONCE_FILE"
CRASH_FROM_STEP = "DDPCTL_TEST_CRASH_FROM_STEP"
CRASH_RANK = "DDPCTL_TEST_CRASH_RANK"
HOLD_AT_STEP = "DDPCTL_TEST_HOLD_AT_STEP"
HOLD_RANK = "DDPCTL_TEST_HOLD_RANK"
HOLD_FILE = "DDPCTL_TEST_HOLD_FILE"
HOLD_UNTIL_GO = "DDPCTL_TEST_HOLD_UNTIL_GO"  # 1: held until <file>.go appears, not until a SIGTERM
KILL_IN_CHECKPOINT = "DDPCTL_TEST_KILL_IN_CHECKPOINT"
KILL_IN_CHECKPOINT_SIGNAL = "DDPCTL_TEST_KILL_IN_CHECKPOINT_SIGNAL"  # KILL (default) or TERM
PAUSE_IN_CHECKPOINT = "DDPCTL_TEST_PAUSE_IN_CHECKPOINT"
PAUSE_FILE = "DDPCTL_TEST_PAUSE_FILE"
HOLD_LIMIT_S = 120.0


def _int(name: str) -> int:
    return int(os.environ.get(name, "0") or 0)


class Faults:
    """The faults the environment asks for (read once, when the trainer loads the plugin). A
    callback needs no base class: the trainer calls the hook methods it has (see
    ddpctl_trainer.callbacks.Callback); so this module imports no torch, and the tests that only
    build its environment stay light."""

    def __init__(self) -> None:
        self.kill_step, self.kill_rank = _int(KILL_AT_STEP), _int(KILL_RANK)
        self.kill_settled = _int(KILL_SETTLED) == 1
        self.kill_once = os.environ.get(KILL_ONCE_FILE)
        self.crash_step, self.crash_rank = _int(CRASH_FROM_STEP), _int(CRASH_RANK)
        self.hold_step, self.hold_rank = _int(HOLD_AT_STEP), _int(HOLD_RANK)
        self.hold_file = os.environ.get(HOLD_FILE)
        self.hold_until_go = os.environ.get(HOLD_UNTIL_GO) == "1"
        self.checkpoint_step = _int(KILL_IN_CHECKPOINT)
        term = os.environ.get(KILL_IN_CHECKPOINT_SIGNAL, "KILL") == "TERM"
        self.checkpoint_signal = signal.SIGTERM if term else signal.SIGKILL
        self.pause_steps = {int(s) for s in os.environ.get(PAUSE_IN_CHECKPOINT, "").split(",") if s.strip()}
        self.pause_file = os.environ.get(PAUSE_FILE)

    def on_step_end(self, trainer: TrainerView) -> None:
        rank, step = trainer.ctx.rank, trainer.step
        if self.crash_step and step >= self.crash_step and rank == self.crash_rank:  # on every attempt
            raise TrainerFailure(f"test hook: rank {rank} crashes after step {step}, as on every attempt")
        if trainer.ctx.restart_count != 0:
            return
        if self.kill_step and step == self.kill_step and self.kill_settled:
            trainer.wait_for_checkpoint()  # every rank: the saves before step K are stored (or failed)
        if self.kill_step and step == self.kill_step and rank == self.kill_rank:
            if self.kill_once:
                if Path(self.kill_once).exists():
                    return  # killed once already: a group restarted from a checkpoint goes on
                Path(self.kill_once).write_text(str(step))
            print(f"[fault] killing rank {rank} at step {step}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if self.hold_step and step == self.hold_step and rank == self.hold_rank:
            self._hold(step)

    def _hold(self, step: int) -> None:
        if self.hold_file and Path(self.hold_file).exists():
            return  # held once already
        if self.hold_file and self.hold_until_go:
            self._pause(step, Path(self.hold_file))
            return
        if self.hold_file:
            Path(self.hold_file).write_text(f"{step} {os.getpid()}")  # the step, and whom to signal
        if not stop.wait(HOLD_LIMIT_S):
            raise TrainerFailure(f"test hook: no SIGTERM arrived within {HOLD_LIMIT_S:g}s of step {step}")

    def on_checkpoint_write(self, trainer: TrainerView, step: int, file: IO[bytes]) -> None:
        if step in self.pause_steps and self.pause_file and trainer.ctx.restart_count == 0:
            self._pause(step, Path(f"{self.pause_file}.{step}"))
        if not self.checkpoint_step or step != self.checkpoint_step or trainer.ctx.restart_count != 0:
            return
        file.flush()
        size = file.tell()
        file.truncate(size // 2)
        file.flush()
        os.fsync(file.fileno())
        sig = self.checkpoint_signal
        print(f"[fault] {sig.name} to rank during checkpoint write of step {step}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), sig)

    @staticmethod
    def _pause(step: int, marker: Path) -> None:
        go = marker.with_name(marker.name + ".go")
        marker.write_text(str(step))
        print(f"[fault] checkpoint of step {step} paused before it is stored", file=sys.stderr, flush=True)
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not go.exists():  # the test's signal: a file (this runs on the writer's thread)
            if time.monotonic() > deadline:
                raise TrainerFailure(f"test hook: {go} did not appear within {HOLD_LIMIT_S:g}s")
            time.sleep(0.02)


# --------------------------------------------------------------------------------------------
# For the tests: the environment that loads the plugin and asks for faults
# --------------------------------------------------------------------------------------------


def plugin_env(*faults: dict[str, str], image: bool = False) -> dict[str, str]:
    """The trainer's environment that loads this plugin and asks for ``faults`` (``kill_at``,
    ``hold_at``, ``kill_in_checkpoint``, ``pause_in_checkpoint``): from the checkout, or in the test image."""
    env = {CALLBACK_ENV: IMAGE_CALLBACK if image else CALLBACK}
    for fault in faults:
        env.update(fault)
    return env


def kill_at(step: int, rank: int = 0, settled: bool = False) -> dict[str, str]:
    return {KILL_AT_STEP: str(step), KILL_RANK: str(rank), **({KILL_SETTLED: "1"} if settled else {})}


def crash_from(step: int, rank: int = 0) -> dict[str, str]:
    return {CRASH_FROM_STEP: str(step), CRASH_RANK: str(rank)}


def hold_at(step: int, rank: int = 0, file: str | Path | None = None, until_go: bool = False) -> dict[str, str]:
    """Hold `rank` after `step`, writing `file`, until a SIGTERM arrives (or, `until_go`, until the
    test writes `<file>.go`)."""
    env = {HOLD_AT_STEP: str(step), HOLD_RANK: str(rank), **({HOLD_FILE: str(file)} if file else {})}
    return {**env, HOLD_UNTIL_GO: "1"} if until_go else env


def kill_in_checkpoint(step: int, sig: str = "KILL") -> dict[str, str]:
    return {KILL_IN_CHECKPOINT: str(step), KILL_IN_CHECKPOINT_SIGNAL: sig}


def pause_in_checkpoint(steps: list[int], file: str | Path) -> dict[str, str]:
    return {PAUSE_IN_CHECKPOINT: ",".join(map(str, steps)), PAUSE_FILE: str(file)}


def env_flags(env: dict[str, str]) -> list[str]:
    """``env`` as ``ddpctl run``/``submit`` flags: ``-e NAME=VALUE`` each."""
    return [arg for name, value in env.items() for arg in ("-e", f"{name}={value}")]
