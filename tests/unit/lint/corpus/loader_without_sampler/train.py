# Modelled on binbinao/physicsnemo-from-zero-to-one ch07_drivaernet_optim/train_gpu.py: a DDP script that
# kept the single-process DataLoader(shuffle=True).
import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
dataset = TensorDataset(torch.randn(64, 4))
loader = DataLoader(dataset, batch_size=8, shuffle=True)  # expect: DDP005
