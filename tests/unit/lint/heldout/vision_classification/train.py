# Modelled on pytorch/vision references/classification/train.py with its utils.py.
import argparse

import torch
import torch.utils.data
import utils
from torch import nn


def get_args_parser():
    parser = argparse.ArgumentParser(description="PyTorch Classification Training")
    parser.add_argument("--device", default="cuda", type=str)
    parser.add_argument("--epochs", default=90, type=int)
    parser.add_argument("--output-dir", default=".", type=str)
    parser.add_argument("--dist-url", default="env://", type=str)
    return parser


def main(args):
    utils.init_distributed_mode(args)
    device = torch.device(args.device)
    dataset = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    if args.distributed:
        train_sampler = torch.utils.data.distributed.DistributedSampler(dataset)
    else:
        train_sampler = torch.utils.data.RandomSampler(dataset)
    data_loader = torch.utils.data.DataLoader(dataset, batch_size=8, sampler=train_sampler)
    model = nn.Linear(8, 2)
    model.to(device)
    model_without_ddp = model
    if args.distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
        model_without_ddp = model.module
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)
        for x, y in data_loader:
            loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        checkpoint = {"model": model_without_ddp.state_dict(), "epoch": epoch}
        utils.save_on_master(checkpoint, "checkpoint.pth")


if __name__ == "__main__":
    main(get_args_parser().parse_args())
