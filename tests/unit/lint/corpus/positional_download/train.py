# Modelled on pytorch/examples@e69bec7 distributed/dcgan/main.py: CIFAR-10 downloaded on every rank (there
# by keyword, here torchvision's arguments by position).
import os

import torch
import torch.distributed as dist
import torchvision
from torch.utils.data import DataLoader, DistributedSampler

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
transform = torchvision.transforms.ToTensor()
train_set = torchvision.datasets.CIFAR10("./data", True, transform, None, True)  # expect: DDP011
test_set = torchvision.datasets.CIFAR10("./data", False, transform, None, False)
sampler = DistributedSampler(train_set)
loader = DataLoader(train_set, batch_size=32, sampler=sampler)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for images, labels in loader:
        pass
