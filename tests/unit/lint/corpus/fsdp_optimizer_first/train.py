# Modelled on intelligent-machine-learning/dlrover model_zoo/pytorch/nanogpt/train.py (before its PR 585):
# the optimizer built where the single-GPU script built it, before the FSDP wrap.
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")


def build():
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # expect: DDP003
    model = FSDP(model)
    return model, optimizer
