# Modelled on facebookresearch/simsiam@a7bc1772 main_simsiam.py launched by torchrun with --dist-url
# env://: no --gpu and no --multiprocessing-distributed, so DDP gets no device_ids and every rank saves.
import argparse
import builtins
import os
import shutil

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser(description="SimSiam pre-training")
parser.add_argument("--epochs", default=100, type=int)
parser.add_argument("--world-size", default=-1, type=int)
parser.add_argument("--rank", default=-1, type=int)
parser.add_argument("--dist-url", default="tcp://224.66.41.62:23456", type=str)
parser.add_argument("--dist-backend", default="nccl", type=str)
parser.add_argument("--gpu", default=None, type=int)
parser.add_argument("--multiprocessing-distributed", action="store_true")


def main():
    args = parser.parse_args()
    if args.dist_url == "env://" and args.world_size == -1:
        args.world_size = int(os.environ["WORLD_SIZE"])
    args.distributed = args.world_size > 1 or args.multiprocessing_distributed
    ngpus_per_node = torch.cuda.device_count()
    if args.multiprocessing_distributed:
        args.world_size = ngpus_per_node * args.world_size
        mp.spawn(worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))
    else:
        worker(args.gpu, ngpus_per_node, args)


def worker(gpu, ngpus_per_node, args):
    args.gpu = gpu
    if args.multiprocessing_distributed and args.gpu != 0:

        def quiet(*_args):
            pass

        builtins.print = quiet
    if args.distributed:
        if args.dist_url == "env://" and args.rank == -1:
            args.rank = int(os.environ["RANK"])
        if args.multiprocessing_distributed:
            args.rank = args.rank * ngpus_per_node + gpu
        dist.init_process_group(
            backend=args.dist_backend, init_method=args.dist_url, world_size=args.world_size, rank=args.rank
        )
        torch.distributed.barrier()
    model = nn.Sequential(nn.Linear(32, 32), nn.BatchNorm1d(32), nn.Linear(32, 16))
    if args.distributed:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        if args.gpu is not None:
            torch.cuda.set_device(args.gpu)
            model.cuda(args.gpu)
            model = nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
        else:
            model.cuda()
            model = nn.parallel.DistributedDataParallel(model)  # expect: DDP014
    else:
        raise NotImplementedError("Only DistributedDataParallel is supported.")
    criterion = nn.CosineSimilarity(dim=1).cuda(args.gpu)
    optimizer = torch.optim.SGD(model.parameters(), 0.05, momentum=0.9)
    dataset = TensorDataset(torch.randn(128, 32), torch.randn(128, 32))
    sampler = DistributedSampler(dataset) if args.distributed else None
    loader = DataLoader(dataset, batch_size=16, shuffle=(sampler is None), sampler=sampler, drop_last=True)
    for epoch in range(args.epochs):
        if args.distributed:
            sampler.set_epoch(epoch)
        for x1, x2 in loader:
            if args.gpu is not None:
                x1, x2 = x1.cuda(args.gpu, non_blocking=True), x2.cuda(args.gpu, non_blocking=True)
            loss = -criterion(model(x1), model(x2)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if not args.multiprocessing_distributed or (
            args.multiprocessing_distributed and args.rank % ngpus_per_node == 0
        ):
            save_checkpoint(
                {"epoch": epoch + 1, "state_dict": model.state_dict()},
                is_best=False,
                filename="checkpoint_{:04d}.pth.tar".format(epoch),
            )


def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
    torch.save(state, filename)  # expect: DDP008
    if is_best:
        shutil.copyfile(filename, "model_best.pth.tar")


if __name__ == "__main__":
    main()
