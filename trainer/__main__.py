"""``torchrun -m ddpctl_trainer ...`` and ``python -m ddpctl_trainer ...`` start here."""

import sys

from .main import main

if __name__ == "__main__":
    sys.exit(main())
