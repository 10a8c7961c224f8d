# Modelled on pytorch/examples distributed/FSDP/utils/__init__.py: re-exports the helpers.
from .train_utils import setup, train

__all__ = ["setup", "train"]
