# Modelled on pytorch/examples distributed/ddp/example.py: the device taken from the global rank.
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def demo_basic(rank):
    model = nn.Linear(10, 5).to(rank)  # expect: DDP001
    ddp_model = DDP(model, device_ids=[rank])  # expect: DDP001
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    ddp_model(torch.randn(20, 10)).sum().backward()
    optimizer.step()


def spmd_main():
    env_dict = {key: os.environ[key] for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    rank = int(env_dict["RANK"])
    torch.accelerator.set_device_index(rank)  # expect: DDP001
    dist.init_process_group(backend="nccl")
    demo_basic(rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    spmd_main()
