# Modelled on pytorch/examples-era single-machine multi-GPU scripts with nn.DataParallel.
import torch
from torch import nn

model = nn.DataParallel(nn.Linear(4, 4))  # expect: DDP013
if torch.cuda.is_available():
    model = model.cuda()
