# Modelled on pytorch/examples distributed/FSDP/T5_training.py with utils/train_utils.py: the
# sampler's set_epoch is called in the helper module.
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from utils.train_utils import setup, train


def fsdp_main(args):
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    setup()
    dataset = TensorDataset(torch.randn(64, 8))
    sampler1 = DistributedSampler(dataset, rank=rank, num_replicas=world_size, shuffle=True)
    train_loader = DataLoader(dataset, batch_size=8, sampler=sampler1)
    torch.cuda.set_device(local_rank)
    model = FSDP(torch.nn.Linear(8, 8), device_id=torch.cuda.current_device())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(1, 3):
        train(args, model, rank, world_size, train_loader, optimizer, epoch, sampler=sampler1)
    dist.barrier()


if __name__ == "__main__":
    fsdp_main(None)
