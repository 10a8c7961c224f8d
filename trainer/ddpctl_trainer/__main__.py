"""``torchrun -m ddpctl_trainer ...`` and ``python -m ddpctl_trainer ...`` start here."""

import os
import sys

from .main import main


def _leave(code: int) -> None:
    """Exit with ``code`` without the interpreter's teardown. By then the run is over, its files
    closed and the process group destroyed, but:

    * torch's gloo teardown at interpreter exit can still abort the process (SIGABRT,
      pytorch/pytorch#179291), turning a finished rank into a failed one and a finished job into a
      restart;
    * destroying the group closes this rank's connections, so its peers fail at once and torchrun
      SIGTERMs this rank: during a slow teardown that signal would replace its own exit code (a
      crash's 1 read as "stopped by SIGTERM", and a node exiting 138, a lost peer, for its crash).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _leave(main())
