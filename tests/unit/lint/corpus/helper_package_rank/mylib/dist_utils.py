# Modelled on openai/gpt-oss gpt_oss/torch/utils.py init_distributed: the process group and the rank
# from RANK, returned to the caller.
import os

import torch.distributed as dist


def setup():
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    return rank, world_size
