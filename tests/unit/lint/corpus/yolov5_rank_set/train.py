# Modelled on ultralytics/yolov5@5081342f train.py: ranks from the environment with -1 for "not launched",
# and the save guarded by `RANK in {-1, 0}`, which only rank 0 passes under torchrun.
import argparse
import os
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))
RANK = int(os.getenv("RANK", -1))
WORLD_SIZE = int(os.getenv("WORLD_SIZE", 1))


@contextmanager
def distributed_zero_first(local_rank):
    if local_rank not in [-1, 0]:
        dist.barrier(device_ids=[local_rank])
    yield
    if local_rank == 0:
        dist.barrier(device_ids=[0])


def de_parallel(model):
    return model.module if isinstance(model, DDP) else model


def train(opt, device):
    model = nn.Linear(8, 2).to(device)
    if RANK != -1:
        model = DDP(model, device_ids=[LOCAL_RANK], output_device=LOCAL_RANK)
    with distributed_zero_first(LOCAL_RANK):
        dataset = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    sampler = None if LOCAL_RANK == -1 else DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=opt.batch_size, shuffle=sampler is None, sampler=sampler)
    for epoch in range(opt.epochs):
        if RANK != -1:
            loader.sampler.set_epoch(epoch)
        for x, _ in loader:
            model(x.to(device)).sum().backward()
        if RANK in {-1, 0}:
            ckpt = {"epoch": epoch, "model": de_parallel(model).state_dict()}
            torch.save(ckpt, "last.pt")


def main(opt):
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if LOCAL_RANK != -1:
        torch.cuda.set_device(LOCAL_RANK)
        device = torch.device("cuda", LOCAL_RANK)
        dist.init_process_group(backend="nccl" if dist.is_nccl_available() else "gloo")
    train(opt, device)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    main(parser.parse_args())
