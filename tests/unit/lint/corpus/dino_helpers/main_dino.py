# Modelled on facebookresearch/dino main_dino.py with utils.py: --local_rank kept only so the old
# launcher's flag parses; utils.init_distributed_mode reads LOCAL_RANK.
import argparse

import torch
import utils
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def get_args_parser():
    parser = argparse.ArgumentParser("DINO", add_help=False)
    parser.add_argument("--epochs", default=100, type=int)
    parser.add_argument("--local_rank", default=0, type=int, help="Please ignore and do not set this argument.")
    parser.add_argument("--dist_url", default="env://", type=str)
    return parser


def train_dino(args):
    utils.init_distributed_mode(args)
    dataset = TensorDataset(torch.randn(64, 8))
    sampler = DistributedSampler(dataset, shuffle=True)
    data_loader = DataLoader(dataset, sampler=sampler, batch_size=8, drop_last=True)
    student = nn.Linear(8, 8).cuda()
    student = nn.parallel.DistributedDataParallel(student, device_ids=[args.gpu])
    for epoch in range(args.epochs):
        data_loader.sampler.set_epoch(epoch)
        save_dict = {"student": student.state_dict(), "epoch": epoch + 1}
        utils.save_on_master(save_dict, "checkpoint.pth")


if __name__ == "__main__":
    train_dino(get_args_parser().parse_args())
