# Modelled on pytorch/examples@77f55b9 imagenet/main.py: nn.DataParallel on one machine.
import torch
from torch import nn

model = nn.DataParallel(nn.Linear(4, 4))  # expect: DDP013
if torch.cuda.is_available():
    model = model.cuda()
