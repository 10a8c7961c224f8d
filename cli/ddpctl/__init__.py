"""ddpctl: package multi-node PyTorch DDP training for Kubernetes."""

__version__ = "0.1.0"
