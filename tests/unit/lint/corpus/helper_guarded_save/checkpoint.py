# Modelled on pytorch/examples@77f55b9 imagenet/main.py save_checkpoint: it saves whatever it is given.
import torch


def save_checkpoint(state, path):
    torch.save(state, path)
