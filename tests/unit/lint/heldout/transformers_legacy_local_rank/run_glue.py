# Modelled on huggingface/transformers@0287d264 examples/run_glue.py (before the Trainer): the local
# rank read from --local_rank only, which torchrun never passes.
import argparse

import torch
from torch.utils.data import DataLoader, RandomSampler, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1, help="For distributed training: local_rank")  # expect: DDP002
    parser.add_argument("--num_train_epochs", default=3, type=int)
    args = parser.parse_args()
    if args.local_rank == -1:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        torch.cuda.set_device(args.local_rank)
        device = torch.device("cuda", args.local_rank)
        torch.distributed.init_process_group(backend="nccl")
    dataset = TensorDataset(torch.randn(64, 8))
    sampler = RandomSampler(dataset) if args.local_rank == -1 else DistributedSampler(dataset)
    loader = DataLoader(dataset, sampler=sampler, batch_size=8)
    model = torch.nn.Linear(8, 8).to(device)
    if args.local_rank != -1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
    for epoch in range(args.num_train_epochs):
        if args.local_rank != -1:
            sampler.set_epoch(epoch)
        for (batch,) in loader:
            model(batch.to(device)).sum().backward()
    if args.local_rank in [-1, 0]:
        torch.save(model.state_dict(), "pytorch_model.bin")  # expect: DDP008, DDP009


if __name__ == "__main__":
    main()
