# Modelled on bshall/hubert train.py: nccl written into init_process_group (it fails where NCCL is absent);
# here the device is otherwise chosen by CUDA's presence.
import os

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group(backend="nccl")  # expect: DDP010
device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
model = torch.nn.Linear(4, 4).to(device)
