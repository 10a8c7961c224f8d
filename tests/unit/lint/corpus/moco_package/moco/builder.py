# Modelled on facebookresearch/moco moco/builder.py: the model, built from an encoder.
from torch import nn


class MoCo(nn.Module):
    def __init__(self, base_encoder, dim=128):
        super().__init__()
        self.encoder_q = base_encoder(dim, dim)
        self.encoder_k = base_encoder(dim, dim)

    def forward(self, x):
        return self.encoder_q(x) - self.encoder_k(x)
