"""``python -m ddpctl_trainer.coordinator [--port N]``: the store a pod-recovery job meets in.

With ``recovery: pod`` no pod of the job hosts the rendezvous store, so that losing any pod, node
0's included, leaves the others a place to meet the replacement. This process hosts it (a
``TCPStore``, the store torchrun's own rendezvous uses) and does nothing else: which generation
of the process group is current, and which generation each rank last joined
(``ddpctl_trainer.recovery``). It holds no training state.

It runs until SIGTERM; given ``--world-size N`` (in a cluster, where it is a pod of its own) it
also ends, with exit 0, once the training has: every rank reported that it finished, or one
reported a code that ends the job at once (``Membership.report_end``). Stopped before that (its
pod evicted, or deleted) it exits 143, a failure, so that its Job starts another in its place
(an exit 0 would complete the Job); the ranks tell the new one what it needs (``recovery``).
"""

from __future__ import annotations

import argparse
import datetime
import signal
import sys
import threading
from collections.abc import Sequence

from .protocol import COORDINATOR_PORT, ENDED_KEY, EXIT_PREEMPTED, FINISHED_KEY

POLL_S = 1.0  # how often it reads the store's count of finished ranks (one key, on loopback)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpctl_trainer.coordinator", description=__doc__)
    parser.add_argument("--host", default="0.0.0.0", help="the address to listen on (default: every one)")  # noqa: S104
    parser.add_argument("--port", type=int, default=COORDINATOR_PORT, help=f"default {COORDINATOR_PORT}; 0 picks one")
    parser.add_argument("--world-size", type=int, default=0, help="end once this many ranks finished (0: never)")
    parser.add_argument("--scope", default="", help="the key prefix the ranks use (DDP_RECOVERY_SCOPE)")
    args = parser.parse_args(argv)
    import torch.distributed as dist

    stopped = threading.Event()  # set before it says it listens: a SIGTERM from then on is seen
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    store = dist.TCPStore(
        args.host, args.port, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(days=365)
    )
    print(f"[ddpctl] coordinator listening on port {store.port}", flush=True)
    prefix = f"ddpctl/{args.scope}/" if args.scope else "ddpctl/"
    while not stopped.wait(POLL_S if args.world_size else None):
        if store.check([prefix + ENDED_KEY]):
            print(f"[ddpctl] coordinator: a rank ended the job (exit {store.get(prefix + ENDED_KEY).decode()})")
            return 0
        if store.add(prefix + FINISHED_KEY, 0) >= args.world_size:
            print(f"[ddpctl] coordinator: all {args.world_size} ranks finished", flush=True)
            return 0
    print("[ddpctl] coordinator: stopped before the training ended", flush=True)
    return EXIT_PREEMPTED


if __name__ == "__main__":
    sys.exit(main())
