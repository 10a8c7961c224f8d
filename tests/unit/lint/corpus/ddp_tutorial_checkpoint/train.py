# Modelled on pytorch/tutorials intermediate_source/ddp_tutorial.rst (demo_checkpoint): the wrapper's own
# state_dict, saved on rank 0 and loaded back into the same wrapper.
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)


def demo_checkpoint(rank, world_size):
    setup(rank, world_size)
    model = nn.Linear(10, 5).to(rank)
    ddp_model = DDP(model, device_ids=[rank])
    checkpoint_path = tempfile.gettempdir() + "/model.checkpoint"
    if rank == 0:
        torch.save(ddp_model.state_dict(), checkpoint_path)
    dist.barrier()
    map_location = {"cuda:%d" % 0: "cuda:%d" % rank}
    ddp_model.load_state_dict(torch.load(checkpoint_path, map_location=map_location, weights_only=True))
    if rank == 0:
        os.remove(checkpoint_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    n_gpus = torch.cuda.device_count()
    mp.spawn(demo_checkpoint, args=(n_gpus,), nprocs=n_gpus, join=True)
