"""``torchrun -m ddpctl_trainer ...`` and ``python -m ddpctl_trainer ...`` start here."""

import os
import sys

from .errors import EXIT_OK
from .main import main


def _leave(code: int) -> None:
    """Exit with ``code``; after a successful run without the interpreter's teardown. The work is
    done and the process group destroyed by then, but torch's gloo teardown at interpreter exit can
    still abort the process (SIGABRT, pytorch/pytorch#179291), turning a finished rank into a failed
    one and the finished job into a restart. Output is flushed first; files are closed by the run."""
    if code != EXIT_OK:
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_OK)


if __name__ == "__main__":
    _leave(main())
