# Modelled on ultralytics/yolov3@cd51e113 train.py: shuffle=True kept next to the new DistributedSampler.
import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
dataset = TensorDataset(torch.randn(64, 4))
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=8, sampler=sampler, shuffle=True)  # expect: DDP006
for epoch in range(3):
    sampler.set_epoch(epoch)
