# Modelled on kekmodel/FixMatch-pytorch train.py: a DistributedSampler whose set_epoch is never called.
import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
dataset = TensorDataset(torch.randn(64, 4))
sampler = DistributedSampler(dataset)  # expect: DDP007
loader = DataLoader(dataset, batch_size=8, sampler=sampler)
for epoch in range(3):
    for (batch,) in loader:
        pass
