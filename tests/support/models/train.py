"""A user's own DDP script, after PyTorch's DDP recipe, as a project's Dockerfile copies it with
`COPY . .` into its own WORKDIR (tests/e2e/cluster/user-image.Dockerfile): torchrun runs it as
`--script train.py`, relative to that WORKDIR. Each rank prints the steps it takes."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = int(os.environ.get("STEPS", "2"))


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, STEPS + 1):
        x = torch.randn(4, 8)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f} in {os.getcwd()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
