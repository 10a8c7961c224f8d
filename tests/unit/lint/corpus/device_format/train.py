# Modelled on a pattern seen in pytorch/examples-style scripts: torch.device built with str.format.
import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("nccl")
device = torch.device("cuda:{}".format(dist.get_rank()))  # expect: DDP001
model = nn.Linear(4, 4).to(device)
model = nn.parallel.DistributedDataParallel(model, device_ids=[device])
