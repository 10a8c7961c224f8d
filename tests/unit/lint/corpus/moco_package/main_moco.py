# Modelled on facebookresearch/moco main_moco.py (with its moco/ package) under torchrun.
import argparse
import os

import moco.builder
import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--world-size", default=-1, type=int)
parser.add_argument("--rank", default=-1, type=int)
parser.add_argument("--dist-url", default="env://", type=str)
parser.add_argument("--gpu", default=None, type=int)
parser.add_argument("--multiprocessing-distributed", action="store_true")


def main_worker(gpu, ngpus_per_node, args):
    args.gpu = gpu
    if args.dist_url == "env://" and args.rank == -1:
        args.rank = int(os.environ["RANK"])
    dist.init_process_group(backend="nccl", init_method=args.dist_url, world_size=args.world_size, rank=args.rank)
    model = moco.builder.MoCo(nn.Linear)
    if args.gpu is not None:
        torch.cuda.set_device(args.gpu)
        model.cuda(args.gpu)
        model = nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
    else:
        model.cuda()
        model = nn.parallel.DistributedDataParallel(model)  # expect: DDP014
    for epoch in range(2):
        if not args.multiprocessing_distributed or (args.multiprocessing_distributed and args.rank % 8 == 0):
            torch.save({"epoch": epoch, "state_dict": model.state_dict()}, "checkpoint.pth.tar")  # expect: DDP008, DDP009


def main():
    args = parser.parse_args()
    args.world_size = int(os.environ["WORLD_SIZE"])
    main_worker(args.gpu, torch.cuda.device_count(), args)


if __name__ == "__main__":
    main()
