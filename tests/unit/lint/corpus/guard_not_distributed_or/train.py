# Modelled on pytorch/examples@7efb79e imagenet/main.py: the save guard reads
# `not args.distributed or args.rank == 0`.
import argparse
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--distributed", action="store_true")
args = parser.parse_args()
args.distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
local_rank = int(os.environ["LOCAL_RANK"])
if args.distributed:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
if not args.distributed or dist.get_rank() == 0:
    torch.save({}, "ckpt.pt")
