"""Models for the stall-watchdog tests, loaded by the trainer as ``--model tests.support.models.stall_models:NAME``.

Which rank misbehaves, and from which training step, comes from the environment (set with
``ddpctl run -e``), so one module serves every test:

* ``STALL_RANK``: the global rank that blocks or slows down;
* ``STALL_AT_STEP``: ``blocking``'s rank blocks forever in its forward of this training step;
* ``SLOW_STEP_S``: ``slowing``'s rank sleeps this many seconds x the step number in every
  forward: each step slower than the one before, but every step finishes.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import torch
from torch import nn


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _stall_rank() -> int:
    """-1 (no rank) when unset: the model then trains normally."""
    return int(os.environ.get("STALL_RANK", "-1"))


class _Small(nn.Module):
    """A tiny classifier for any image size; ``hook`` runs at the start of each training forward."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(12, num_classes))
        self.steps = 0

    def hook(self) -> None:  # overridden
        pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.steps += 1
            self.hook()
        return self.head(x)


class Blocking(_Small):
    def hook(self) -> None:
        if _rank() == _stall_rank() and self.steps == int(os.environ["STALL_AT_STEP"]):
            print(f"[stall-test] rank {_rank()} blocks in forward at step {self.steps}", file=sys.stderr, flush=True)
            threading.Event().wait()  # a lock nobody releases: the blocking frame the summary must name


class Slowing(_Small):
    def hook(self) -> None:
        if _rank() == _stall_rank():
            time.sleep(float(os.environ["SLOW_STEP_S"]) * self.steps)


def blocking(num_classes: int) -> nn.Module:
    return Blocking(num_classes)


def slowing(num_classes: int) -> nn.Module:
    return Slowing(num_classes)
