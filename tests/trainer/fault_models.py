"""Models for the fault tests, loaded by the trainer as ``--model tests.trainer.fault_models:NAME``.

* ``killed_while_built``: the rank named by ``KILL_RANK`` SIGKILLs itself while its model is
  built (after the process group was set up, before training), as a node lost during start-up.
"""

from __future__ import annotations

import os
import signal
import sys

from torch import nn


def killed_while_built(num_classes: int) -> nn.Module:
    rank = int(os.environ.get("RANK", "0"))
    if rank == int(os.environ.get("KILL_RANK", "-1")):
        print(f"[fault] rank {rank} killed while building its model", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(12, num_classes))
