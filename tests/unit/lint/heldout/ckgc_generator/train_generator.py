# Modelled on sunnweiwei/ckgc@8c734613 train_generator.py: the rank that torch.distributed gives is
# called the local rank and chooses the GPU, the DDP device and the checkpoint's map_location.
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def loader_for(dataset, batch_size, distributed, epoch):
    sampler = DistributedSampler(dataset) if distributed else None
    if sampler is not None:
        sampler.set_epoch(epoch)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=sampler is None)


def train_one(generator, optimizer, dataset, batch_size, epoch, distributed):
    generator.train()
    for source, target in loader_for(dataset, batch_size, distributed, epoch):
        logits = generator(source.cuda())
        loss = F.cross_entropy(logits, target.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def dist_init():
    torch.distributed.init_process_group(backend="nccl")
    local_rank = torch.distributed.get_rank()
    torch.cuda.set_device(local_rank)  # expect: DDP001


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-save_path", type=str, default="out")
    parser.add_argument("--bc_size", type=int, default=32)
    parser.add_argument("--pt_path", type=str, default="none")
    parser.add_argument("--dist", type=int, default=1)
    args = parser.parse_args()
    distributed = args.dist
    if distributed:
        dist_init()
    local_rank = dist.get_rank() if distributed else 0

    dataset = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    generator = torch.nn.Linear(16, 4)
    if torch.cuda.is_available():
        generator = generator.cuda()
    if distributed:
        generator = torch.nn.parallel.DistributedDataParallel(
            generator,
            device_ids=[local_rank],  # expect: DDP001
            output_device=local_rank,  # expect: DDP001
        )
    optimizer = torch.optim.AdamW(generator.parameters(), 5e-5)
    if os.path.exists(args.pt_path) and distributed:
        dist.barrier()
        remap = {"cuda:%d" % 0: "cuda:%d" % dist.get_rank()}  # expect: DDP001 (missed)
        generator.load_state_dict(torch.load(args.pt_path, map_location=remap))
        dist.barrier()

    for epoch in range(100):
        if distributed:
            dist.barrier()
        train_one(generator, optimizer, dataset, args.bc_size, epoch, distributed)
        if distributed:
            dist.barrier()
        if local_rank == 0:
            torch.save(generator.state_dict(), f"{args.save_path}/generator/{epoch}.pt")
        if distributed:
            dist.barrier()


if __name__ == "__main__":
    main()
