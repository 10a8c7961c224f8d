# Modelled on pytorch/examples@77f55b9 imagenet/main.py: the checkpoint helper called under a rank test
# (here a true rank-0 test, and the helper in its own module).
import os

import checkpoint
import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
state = {"step": 1}
if dist.get_rank() == 0:
    checkpoint.save_checkpoint(state, "ckpt.pt")
dist.barrier()
