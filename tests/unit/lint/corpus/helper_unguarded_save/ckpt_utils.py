# Modelled on Tramac/awesome-semantic-segmentation-pytorch scripts/train.py save_checkpoint; the finding is
# reported here, where torch.save is.
import torch


def save_checkpoint(state, path):
    torch.save(state, path)  # expect: DDP008
