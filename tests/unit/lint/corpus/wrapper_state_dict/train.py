# Modelled on whai362/pan_pp.pytorch train.py: the wrapper's state_dict saved for a plain model to load
# (there DataParallel, here DDP).
import os

import torch
import torch.distributed as dist
from torch import nn

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 4).cuda(), device_ids=[local_rank])
if dist.get_rank() == 0:
    torch.save(model.state_dict(), "model.pt")  # expect: DDP009
