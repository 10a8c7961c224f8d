# Modelled on a checkpoint helper module: it saves whatever it is given.
import torch


def save_checkpoint(state, path):
    torch.save(state, path)
