# Modelled on detectron2-style scripts: a checkpoint helper called under the main-process test.
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
