# Modelled on hust-linyi/MedISeg NetworkTrainer/train.py: CUDA_VISIBLE_DEVICES set after torch is imported.
import os

import torch

os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"  # expect: DDP012
print(torch.cuda.device_count())
