# Modelled on scripts that choose the device by CUDA's presence but hard-code nccl.
import os

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group(backend="nccl")  # expect: DDP010
device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
model = torch.nn.Linear(4, 4).to(device)
