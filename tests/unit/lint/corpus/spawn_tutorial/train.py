# Modelled on pytorch/tutorials intermediate_source/ddp_tutorial.rst (demo_basic started by mp.spawn):
# the spawn index is the device.
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def demo_basic(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    model = nn.Linear(10, 5).to(rank)
    ddp_model = DDP(model, device_ids=[rank])
    ddp_model(torch.randn(20, 10)).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    mp.spawn(demo_basic, args=(world_size,), nprocs=world_size, join=True)
