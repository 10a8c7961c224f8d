# Modelled on pytorch/examples imagenet/main.py launched by torchrun with --dist-url env://.
import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--world-size", default=-1, type=int)
parser.add_argument("--rank", default=-1, type=int)
parser.add_argument("--dist-url", default="tcp://224.66.41.62:23456", type=str)
parser.add_argument("--dist-backend", default="nccl", type=str)
parser.add_argument("--gpu", default=None, type=int)
parser.add_argument("--multiprocessing-distributed", action="store_true")
parser.add_argument("--epochs", default=90, type=int)


def save_checkpoint(state, filename="checkpoint.pth.tar"):
    torch.save(state, filename)  # expect: DDP008


def main():
    args = parser.parse_args()
    if args.dist_url == "env://" and args.world_size == -1:
        args.world_size = int(os.environ["WORLD_SIZE"])
    args.distributed = args.world_size > 1 or args.multiprocessing_distributed
    ngpus_per_node = torch.cuda.device_count()
    if args.multiprocessing_distributed:
        args.world_size = ngpus_per_node * args.world_size
        mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))
    else:
        main_worker(args.gpu, ngpus_per_node, args)


def main_worker(gpu, ngpus_per_node, args):
    args.gpu = gpu
    if args.distributed:
        if args.dist_url == "env://" and args.rank == -1:
            args.rank = int(os.environ["RANK"])
        if args.multiprocessing_distributed:
            args.rank = args.rank * ngpus_per_node + gpu
        dist.init_process_group(
            backend=args.dist_backend, init_method=args.dist_url, world_size=args.world_size, rank=args.rank
        )
    model = nn.Linear(8, 2)
    if torch.cuda.is_available():
        if args.gpu is not None:
            torch.cuda.set_device(args.gpu)
            model.cuda(args.gpu)
            model = nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
        else:
            model.cuda()
            model = nn.parallel.DistributedDataParallel(model)  # expect: DDP014
    train_dataset = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    val_dataset = TensorDataset(torch.randn(50, 8), torch.randint(0, 2, (50,)))
    if args.distributed:
        train_sampler = DistributedSampler(train_dataset)
        val_sampler = DistributedSampler(val_dataset, shuffle=False, drop_last=True)
    else:
        train_sampler = None
        val_sampler = None
    train_loader = DataLoader(train_dataset, batch_size=8, shuffle=(train_sampler is None), sampler=train_sampler)
    val_loader = DataLoader(val_dataset, batch_size=8, shuffle=False, sampler=val_sampler)
    if args.distributed and len(val_loader.sampler) * args.world_size < len(val_dataset):
        aux_val_dataset = Subset(val_dataset, range(len(val_loader.sampler) * args.world_size, len(val_dataset)))
        aux_val_loader = DataLoader(aux_val_dataset, batch_size=8, shuffle=False)
        print(len(aux_val_loader))
    for epoch in range(args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)
        print(len(train_loader))
        if not args.multiprocessing_distributed or (
            args.multiprocessing_distributed and args.rank % ngpus_per_node == 0
        ):
            save_checkpoint({"epoch": epoch + 1, "state_dict": model.state_dict()})


if __name__ == "__main__":
    main()
