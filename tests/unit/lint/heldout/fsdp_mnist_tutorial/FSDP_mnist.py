# Modelled on pytorch/tutorials@09dfc622 intermediate_source/FSDP_tutorial.rst (FSDP_mnist.py): every
# spawned rank builds MNIST with download=True into the same folder at once.
import argparse
import functools
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
from torch.optim.lr_scheduler import StepLR
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(torch.flatten(x, 1)))), dim=1)


def train(model, rank, loader, optimizer, epoch, sampler=None):
    model.train()
    totals = torch.zeros(2).to(rank)
    if sampler:
        sampler.set_epoch(epoch)
    for data, target in loader:
        data, target = data.to(rank), target.to(rank)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target, reduction="sum")
        loss.backward()
        optimizer.step()
        totals[0] += loss.item()
        totals[1] += len(data)
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    if rank == 0:
        print("epoch {} loss {:.6f}".format(epoch, totals[0] / totals[1]))


def fsdp_main(rank, world_size, args):
    setup(rank, world_size)
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train_set = datasets.MNIST("../data", train=True, download=True, transform=transform)  # expect: DDP011
    sampler = DistributedSampler(train_set, rank=rank, num_replicas=world_size, shuffle=True)
    loader_kwargs = {"batch_size": args.batch_size, "sampler": sampler}
    loader_kwargs.update({"num_workers": 2, "pin_memory": True, "shuffle": False})
    loader = torch.utils.data.DataLoader(train_set, **loader_kwargs)
    policy = functools.partial(size_based_auto_wrap_policy, min_num_params=100)
    torch.cuda.set_device(rank)
    model = FSDP(Net().to(rank), auto_wrap_policy=policy)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    for epoch in range(1, args.epochs + 1):
        train(model, rank, loader, optimizer, epoch, sampler=sampler)
        scheduler.step()
    if args.save_model:
        dist.barrier()
        states = model.state_dict()
        if rank == 0:
            torch.save(states, "mnist_cnn.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="FSDP MNIST")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--save-model", action="store_true", default=False)
    args = parser.parse_args()
    WORLD_SIZE = torch.cuda.device_count()
    mp.spawn(fsdp_main, args=(WORLD_SIZE, args), nprocs=WORLD_SIZE, join=True)
