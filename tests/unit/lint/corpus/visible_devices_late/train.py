# Modelled on scripts that pick GPUs by setting CUDA_VISIBLE_DEVICES after importing torch.
import os

import torch

os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"  # expect: DDP012
print(torch.cuda.device_count())
