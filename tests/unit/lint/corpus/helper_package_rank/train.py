# Modelled on training repositories with a dist_utils helper package: setup() returns the rank.
import torch
from mylib.dist_utils import setup
from torch import nn

rank, world_size = setup()
model = nn.Linear(4, 4).to(rank)  # expect: DDP001
print(world_size)
