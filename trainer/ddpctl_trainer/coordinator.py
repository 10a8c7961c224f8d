"""``python -m ddpctl_trainer.coordinator [--port N]``: the store a pod-recovery job meets in.

With ``recovery: pod`` no pod of the job hosts the rendezvous store, so that losing any pod, node
0's included, leaves the others a place to meet the replacement. This process hosts it (a
``TCPStore``, the store torchrun's own rendezvous uses) and does nothing else until SIGTERM:
which generation of the process group is current, and which generation each rank last joined
(``ddpctl_trainer.recovery``). It holds no training state.
"""

from __future__ import annotations

import argparse
import datetime
import signal
import sys
import threading
from collections.abc import Sequence

from .protocol import COORDINATOR_PORT


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpctl_trainer.coordinator", description=__doc__)
    parser.add_argument("--host", default="0.0.0.0", help="the address to listen on (default: every one)")  # noqa: S104
    parser.add_argument("--port", type=int, default=COORDINATOR_PORT, help=f"default {COORDINATOR_PORT}; 0 picks one")
    args = parser.parse_args(argv)
    import torch.distributed as dist

    store = dist.TCPStore(
        args.host, args.port, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(days=365)
    )
    print(f"[ddpctl] coordinator listening on port {store.port}", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
