"""Models for the fault tests, loaded by the trainer as ``--model tests.support.models.fault_models:NAME``.

* ``crashing``: rank ``CRASH_RANK`` raises in training step ``CRASH_AT_STEP`` (see ``_Crashing``).
* ``killed_while_built``: the rank named by ``KILL_RANK`` SIGKILLs itself while its model is
  built (after the process group was set up, before training), as a node lost during start-up.
"""

from __future__ import annotations

import os
import signal
import sys

from torch import Tensor, nn


def killed_while_built(num_classes: int) -> nn.Module:
    rank = int(os.environ.get("RANK", "0"))
    if rank == int(os.environ.get("KILL_RANK", "-1")):
        print(f"[fault] rank {rank} killed while building its model", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(12, num_classes))


class _Crashing(nn.Module):
    """Raises in the forward of training step ``CRASH_AT_STEP`` on rank ``CRASH_RANK``: a
    deterministic bug, the same on every start of the job."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(12, num_classes))
        self.steps = 0

    def forward(self, x: Tensor) -> Tensor:
        if self.training:
            self.steps += 1
            rank = int(os.environ.get("RANK", "0"))
            if rank == int(os.environ.get("CRASH_RANK", "-1")) and self.steps == int(os.environ["CRASH_AT_STEP"]):
                raise ValueError(f"rank {rank} crashes at step {self.steps}")
        out: Tensor = self.head(x)
        return out


def crashing(num_classes: int) -> nn.Module:
    return _Crashing(num_classes)
