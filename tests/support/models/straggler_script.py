"""A user's own DDP script (not the ddpctl trainer) that opts in to the straggler detector with its
one import and a ``with`` around its step, as docs/trainer.md shows. Every rank's forward takes
``WORK_S`` (a sleep standing for the model's work: the linear layer alone takes a fraction of a
millisecond, where a busy machine's scheduling noise decides the ratio), and node ``SLOW_NODE``'s
rank takes ``SLOW_S`` more from step ``SLOW_FROM`` on: its own work slows, its peers' does not.

A test input, run by tests/unit/trainer/test_stragglers.py under two hand-wired torchrun nodes.
"""

from __future__ import annotations

import gc
import os
import time

import torch
import torch.distributed as dist
from torch import nn

from ddpctl_trainer.stragglers import Stragglers

SLOW_NODE = int(os.environ.get("SLOW_NODE", "1"))
SLOW_FROM = int(os.environ.get("SLOW_FROM", "6"))
STEPS = int(os.environ.get("STEPS", "40"))
WORK_S, SLOW_S = 0.02, 0.05  # at 0.29 of its peer's speed once slowed; a healthy pair stays near 1


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 4)
        self.step = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        slowed = int(os.environ["GROUP_RANK"]) == SLOW_NODE and self.step >= SLOW_FROM
        time.sleep(WORK_S + (SLOW_S if slowed else 0.0))
        return self.fc(x)


def train() -> None:
    """The steps, in a function of their own: the DDP model (and the detector's hook on it) are gone
    when it returns, before the process group is destroyed; one still alive then can abort at
    interpreter exit (gloo's teardown, pytorch/pytorch#179291), as PyTorch's DDP tutorial avoids."""
    torch.manual_seed(0)
    net = Net()
    model = nn.parallel.DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = Stragglers(model)
    for step in range(STEPS):
        net.step = step
        with watch.step():
            loss = model(torch.randn(8, 16)).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    if dist.get_rank() == 0:
        print(f"[rank 0] finished {STEPS} steps", flush=True)


def main() -> None:
    dist.init_process_group("gloo")
    train()
    # DDP's objects sit in reference cycles: collected and met here, none outlives the group, else
    # gloo's threads can abort the process at exit (3 of 12 runs here, 0 of 24 so; pytorch#179291)
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
