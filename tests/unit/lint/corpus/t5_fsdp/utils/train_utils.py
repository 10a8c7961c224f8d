# Modelled on pytorch/examples distributed/FSDP/utils/train_utils.py.
import torch
import torch.distributed as dist


def setup():
    dist.init_process_group("nccl")


def train(args, model, rank, world_size, train_loader, optimizer, epoch, sampler=None):
    model.train()
    local_rank = int(__import__("os").environ["LOCAL_RANK"])
    fsdp_loss = torch.zeros(2).to(local_rank)
    if sampler:
        sampler.set_epoch(epoch)
    for (batch,) in train_loader:
        optimizer.zero_grad()
        loss = model(batch.to(local_rank)).sum()
        loss.backward()
        optimizer.step()
        fsdp_loss[0] += loss.item()
    dist.all_reduce(fsdp_loss, op=dist.ReduceOp.SUM)
    if rank == 0:
        print(f"Train Epoch: {epoch}, Loss: {fsdp_loss[0] / fsdp_loss[1]:.4f}")
