# Modelled on kakaobrain/scrl trainer/trainer.py _save_checkpoint: the save runs without a rank test.
import os

import torch
import torch.distributed as dist
from torch import nn

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 4).cuda(), device_ids=[local_rank])
torch.save(model.module.state_dict(), "final.pt")  # expect: DDP008
