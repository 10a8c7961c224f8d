# Modelled on facebookresearch/detr main.py, its local packages imported, checked out without one of its
# modules: a note, not a crash.
import os

import torch
import torch.distributed as dist
from mypkg import present
from mypkg.absent import helper

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
present.run(helper)
