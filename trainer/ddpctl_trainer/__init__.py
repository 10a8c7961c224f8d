"""DDP training code shipped in the ddpctl trainer image.

Run it with ``torchrun -m ddpctl_trainer [flags]`` (or ``python -m ddpctl_trainer`` for one
process). This package's ``__init__`` imports nothing heavy, so ``import ddpctl_trainer`` stays
cheap; torch is imported by the modules that need it.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
