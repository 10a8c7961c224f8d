# Modelled on ultralytics/yolov5@4102fcc9a train.py (torch.distributed.launch era): the local rank only
# from --local_rank.
import argparse

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)  # expect: DDP002
args = parser.parse_args()
torch.cuda.set_device(args.local_rank)
dist.init_process_group(backend="nccl")
model = nn.Linear(4, 4).cuda(args.local_rank)
model = nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
