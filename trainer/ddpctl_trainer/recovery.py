"""Pod recovery: the global process group formed through the job's coordinator, and formed again
with a lone replacement when a rank is lost, while the survivors keep their training state.

Set ``DDP_COORDINATOR=HOST:PORT`` (``python -m ddpctl_trainer.coordinator`` listens there) and
start each node's torchrun for that node alone (``--nnodes 1``), with the node's place in the job
in ``DDP_NODE_RANK``, ``DDP_NODE_FIRST_RANK`` and ``DDP_WORLD_SIZE`` (``dist.detect``). No pod
hosts the store, so losing any pod, node 0's included, leaves the others a place to meet.

Generations: each formation of the group is a generation with a key prefix of its own in the
store (gloo's peer addresses of a dead process must not be read by the next one). Every rank
records the generation it joined. A rank with a record is a replacement: it joins the next
generation. A survivor whose collective failed because a peer went away joins the next one too.
Both move the store's current generation forward with compare-and-set, so it moves once however
many ranks notice. The new group forms when every rank has joined, the replacement included:
the world never shrinks silently.

The replacement sets itself up alone (``solo``: the trainer's own collectives are skipped until
it has joined the others' state), then every rank takes the state of the rank furthest along
(``Trainer.handoff``).
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Mapping
from typing import Any

from .errors import UsageError
from .protocol import COORDINATOR_ENV, ENDED_KEY, EXIT_STALLED, FAILS_THE_JOB, FINISHED_KEY, RECOVERY_SCOPE_ENV

ARRIVED_KEY = "arrived"  # under a generation's prefix: how many ranks came to form it
# A waiting rank reads the count after 50 ms, then ever less often, up to twice a second: a
# replacement's wait is seconds to minutes, and the coordinator answers every rank of the job.
ARRIVAL_POLL_S = (0.05, 0.5)


def coordinator_address(env: Mapping[str, str] | None = None) -> str | None:
    """``DDP_COORDINATOR`` as HOST:PORT, or None when the job does not recover pods."""
    value = (os.environ if env is None else env).get(COORDINATOR_ENV, "")
    if not value:
        return None
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"{COORDINATOR_ENV}={value!r} is not HOST:PORT (the job's coordinator)")
    return value


class Membership:
    """This rank's place in the generations of the job's group (see the module docstring)."""

    def __init__(
        self,
        address: str,
        rank: int,
        world_size: int,
        backend: str,
        timeout: datetime.timedelta,
        scope: str = "",
    ) -> None:
        import torch.distributed as dist

        host, _, port = address.rpartition(":")
        self.store = dist.TCPStore(host, int(port), is_master=False, timeout=timeout)
        self.rank, self.world_size, self.backend, self.timeout = rank, world_size, backend, timeout
        self.prefix = f"ddpctl/{scope}/" if scope else "ddpctl/"
        self.generation_key = self.prefix + "generation"
        self.recoveries = 0
        key = self._member_key()
        if self.store.check([key]):  # this rank ran before: a replacement joins the next generation
            last = int(self.store.get(key))
            self.generation = last + 1
            self.store.compare_set(self.generation_key, str(last), str(self.generation))
            self.solo = True
        else:
            self.generation = int(self.store.add(self.generation_key, 0))  # made at 0 by the first to come
            self.solo = False

    def _member_key(self) -> str:
        return f"{self.prefix}member/{self.rank}"

    @property
    def rejoined(self) -> bool:
        """Whether this process replaced a lost one (it took the others' state, or will)."""
        return self.generation > 0 and self.recoveries == 0

    def join(self, **kwargs: Any) -> None:
        """Form this generation's group with every other rank (blocks until all have joined)."""
        import torch.distributed as dist

        store = dist.PrefixStore(f"{self.prefix}generation/{self.generation}", self.store)
        self._await_everyone(store)
        dist.init_process_group(
            self.backend, store=store, rank=self.rank, world_size=self.world_size, timeout=self.timeout, **kwargs
        )
        self.store.set(self._member_key(), str(self.generation))

    def _await_everyone(self, store: Any) -> None:
        """Count this rank in, then wait in Python until every rank has: the group's own rendezvous
        waits inside the store's C++ client, where a SIGTERM's handler cannot run, so the pods of a
        job failed or deleted while its survivors wait for a replacement would hold their node for
        the whole grace period. Once all have come, forming the group takes no wait."""
        import torch.distributed as dist

        store.add(ARRIVED_KEY, 1)
        deadline = time.monotonic() + self.timeout.total_seconds()
        pause, longest = ARRIVAL_POLL_S
        while (arrived := int(store.add(ARRIVED_KEY, 0))) < self.world_size:
            if time.monotonic() > deadline:
                raise dist.DistStoreError(
                    f"timed out after {self.timeout.total_seconds():.0f} s waiting for the group of generation "
                    f"{self.generation}: {arrived} of {self.world_size} ranks came"
                )
            time.sleep(pause)  # a signal's handler runs here
            pause = min(pause * 1.5, longest)

    def rejoin(self, **kwargs: Any) -> None:
        """After a lost peer: leave the broken group and form the next generation with its replacement."""
        import torch.distributed as dist

        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001, S110 - the broken group's teardown must not stop the recovery
            pass
        self.store.compare_set(self.generation_key, str(self.generation), str(self.generation + 1))
        self.generation += 1
        self.recoveries += 1
        self.join(**kwargs)

    def report_end(self, code: int) -> None:
        """Tell the coordinator how this rank ended, so that its own job ends with the training:
        every rank finished, or one ended the job at once (a code no restart helps)."""
        try:
            if code == 0:
                self.store.add(self.prefix + FINISHED_KEY, 1)
            elif code in (*FAILS_THE_JOB, EXIT_STALLED):
                self.store.set(self.prefix + ENDED_KEY, str(code))
        except Exception:  # noqa: BLE001, S110 - a coordinator gone by now must not change this rank's exit
            pass


_current: Membership | None = None


def current() -> Membership | None:
    """This process's membership, when its job recovers pods (``dist.setup`` makes it)."""
    return _current


def start(address: str, rank: int, world_size: int, backend: str, timeout: datetime.timedelta) -> Membership:
    global _current
    _current = Membership(address, rank, world_size, backend, timeout, os.environ.get(RECOVERY_SCOPE_ENV, ""))
    return _current


def solo() -> bool:
    """Whether this rank is a replacement still setting itself up alone: the trainer's own
    collectives (data preparation, the setup check, resume) are skipped until the handoff."""
    return _current is not None and _current.solo


def wait_as_a_spare(assignment: str, poll_s: float = 0.05) -> None:
    """A warm spare: import what a replacement needs (torch, the trainer), then wait until the
    runner writes ``assignment`` (it does so atomically) with the env of the node this process
    takes, and take it on. Stopped by the runner's SIGTERM while it waits."""
    import json
    from pathlib import Path

    import torch.distributed  # noqa: F401 - the import a spare is there to have done already

    path = Path(assignment)
    while not path.exists():
        time.sleep(poll_s)  # the runner's file is the only signal a spare gets
    os.environ.update({str(k): str(v) for k, v in json.loads(path.read_text())["env"].items()})


def source_rank(steps: list[int]) -> int:
    """The rank whose state every rank takes: the furthest along (the lowest such rank on a tie).
    A survivor whose gradient all-reduce finished before the peer died completed a step the others
    did not; only its state is exact."""
    return max(range(len(steps)), key=lambda r: (steps[r], -r))
