# Modelled on ultralytics/yolov5@4102fcc9a train.py (the torch.distributed.launch era):
# `local_rank = opt.local_rank`, then `if local_rank in [-1, 0]:` around the save. Here the device
# already comes from LOCAL_RANK, but the guard still reads the argument: -1 on every rank under torchrun.
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(opt):
    local_rank = opt.local_rank
    device_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device("cuda", device_rank) if torch.cuda.is_available() else torch.device("cpu")
    model = nn.Linear(8, 2).to(device)
    model = DDP(model, device_ids=[device_rank] if torch.cuda.is_available() else None)
    for epoch in range(opt.epochs):
        model(torch.randn(4, 8, device=device)).sum().backward()
        if local_rank in [-1, 0]:
            torch.save({"epoch": epoch, "model": model.module.state_dict()}, "last.pt")  # expect: DDP008


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--epochs", type=int, default=3)
    train(parser.parse_args())
