# Modelled on binbinao/physicsnemo-from-zero-to-one ch07_drivaernet_optim/train_gpu.py: a device string
# built from dist.get_rank() (there an f-string, here str.format).
import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("nccl")
device = torch.device("cuda:{}".format(dist.get_rank()))  # expect: DDP001
model = nn.Linear(4, 4).to(device)
model = nn.parallel.DistributedDataParallel(model, device_ids=[device])
