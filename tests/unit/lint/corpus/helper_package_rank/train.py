# Modelled on openai/gpt-oss gpt_oss/torch/utils.py: the caller puts the model on the device named by the
# global rank a package helper returned.
import torch
from mylib.dist_utils import setup
from torch import nn

rank, world_size = setup()
model = nn.Linear(4, 4).to(rank)  # expect: DDP001
print(world_size)
